"""Compute kernels vlabench owns: ceiling micro-benchmarks and fused action-expert steps (see ARCHITECTURE.md)."""
