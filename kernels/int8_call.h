// What every path of vlabench's int8 linear shares outside its arithmetic: the packed layout's sizes, the epilogue's
// activation codes, and the checks on an operator call. amx_int8.cpp (AMX, VNNI) and avx2_int8.cpp (AVX2) are built
// into separate libraries with different instruction sets, so they share this header rather than code.
#pragma once
#include <torch/library.h>
#include <torch/types.h>

#include <cstdint>

namespace vlabench_int8 {
constexpr int TILE_N = 16, TILE_K = 64;  // packed weight: 16 output columns x 64 bytes of k per block row
constexpr int64_t QUANTIZE_INLINE_VALUES = 1 << 15;  // activations quantized on the calling thread up to this size
// Ranges (absmax) at or below this quantize as zero, with scale 1: a smaller one's inverse scale can overflow to inf.
constexpr float MIN_RANGE = 1e-30f;

// The epilogue's activation codes (amx_int8.py's ACTIVATION_CODES).
enum class Activation : int64_t { kNone = -1, kSilu = 0, kGeluTanh = 1 };

// What the rescaled sums become: act(x W^T + b), or, for a gated MLP whose weight holds (gate block, up block) pairs
// of the same 16 columns, act(gate) * up.
struct Epilogue {
  Activation activation;
  bool gated;
};

inline Activation activation_of(int64_t code, bool gated) {
  TORCH_CHECK((code == 0 || code == 1) || (!gated && code == -1),
              gated ? "a gated call's activation is 0 (SiLU) or 1 (GELU, tanh form)"
                    : "activation is -1 (none), 0 (SiLU) or 1 (GELU, tanh form)");
  return static_cast<Activation>(code);
}

// An operator call's packed weight [N/16][k blocks][16][64], scales and bias against x's width k and out_features.
inline void check_call(int64_t k, const torch::Tensor& packed, const torch::Tensor& w_scale,
                       const torch::Tensor& bias, int64_t out_features, bool gated) {
  TORCH_CHECK(packed.scalar_type() == torch::kInt8 && packed.dim() == 4 && packed.size(2) == TILE_K / 4 &&
                  packed.size(3) == TILE_N * 4 && packed.is_contiguous(),
              "packed is not the int8 kernel's packed weight layout");
  const int64_t n_blocks = packed.size(0), k_blocks = packed.size(1);
  TORCH_CHECK(k <= k_blocks * TILE_K && k > (k_blocks - 1) * TILE_K, "activations do not match the packed weight");
  TORCH_CHECK(!gated || n_blocks % 2 == 0, "a gated weight holds (gate, up) block pairs");
  TORCH_CHECK(out_features <= (gated ? n_blocks / 2 : n_blocks) * TILE_N && w_scale.numel() == n_blocks * TILE_N &&
                  bias.numel() == n_blocks * TILE_N,
              "bad output features");
}
}  // namespace vlabench_int8
