"""Serving robots over the network: ``vlabench serve`` (a policy server) and ``vlabench run --remote`` (robots)."""
