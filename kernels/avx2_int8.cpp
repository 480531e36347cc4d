// vlabench's int8 linear on AVX2 (issue 19: int8 on CPUs without AVX512-VNNI, e.g. AMD Zen 2 and 3, Intel
// Haswell to Skylake client): the scheme, packed weight and epilogue of amx_int8.cpp, built apart from it with only
// AVX2 and FMA enabled, so nothing in this library can execute an AVX-512 instruction.
//
// y[m, n] = (q(x)[m, :] . W[n, :]) * x_scale[m] * w_scale[n] + bias[n]
// x is quantized per row (symmetric int8, scale = absmax / 127, codes in [-127, 127]), W per output channel to 7 bits
// (amx_int8.py's WEIGHT_QMAX: codes in [-63, 63], the scheme OpenVINO and oneDNN use on AVX2). AVX2 has no int8 dot
// product that accumulates in int32, only VPMADDUBSW (u8 x s8 pairs summed into a saturating int16) and VPMADDWD:
// the activation codes go in offset by 128 (u8 in [1, 255]), so a pair sums at most 2 x 255 x 63 = 32130 and never
// saturates, and 128 x each column's sum (the offset row's product with the block, once per call) comes off the int32
// sums, which are then exact and equal the other paths' on the same codes. The fp32 rescale, activation and rounding
// are the same operations as the AVX-512 epilogue's, so the outputs match the VNNI path's on the same packed weight.
#include <ATen/Parallel.h>
#include <immintrin.h>
#include <torch/library.h>
#include <torch/types.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "avx2_int8.h"
#include "int8_call.h"

namespace {
using vlabench_avx2::abs_neg, vlabench_avx2::exp_nonpositive, vlabench_avx2::multiply_rows, vlabench_avx2::OFFSET,
    vlabench_avx2::quantize_row, vlabench_avx2::store8;
using vlabench_int8::Activation, vlabench_int8::Epilogue, vlabench_int8::QUANTIZE_INLINE_VALUES, vlabench_int8::TILE_K,
    vlabench_int8::TILE_N;
constexpr int GROUPS = TILE_K / 4;  // 4-byte k groups per 64-byte block row
constexpr int ROWS = 4;  // rows of x whose sums stay in registers over a 16-column block (2 x 4 sums + 4 of 16 ymm)
constexpr int64_t CHUNK = 64;  // rows of x per pass over the weight

inline __m256 silu(__m256 x) {
  const __m256 e = exp_nonpositive(abs_neg(x)), one = _mm256_set1_ps(1.f);
  const __m256 numerator = _mm256_blendv_ps(one, e, _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ));
  return _mm256_mul_ps(x, _mm256_div_ps(numerator, _mm256_add_ps(one, e)));
}

inline __m256 gelu_tanh(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.f);
  const __m256 cube = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
  const __m256 y = _mm256_mul_ps(_mm256_set1_ps(0.7978845608f), _mm256_fmadd_ps(_mm256_set1_ps(0.044715f), cube, x));
  const __m256 e = exp_nonpositive(_mm256_mul_ps(_mm256_set1_ps(2.f), abs_neg(y)));
  const __m256 t = _mm256_div_ps(_mm256_sub_ps(one, e), _mm256_add_ps(one, e));
  const __m256 negative = _mm256_cmp_ps(y, _mm256_setzero_ps(), _CMP_LT_OQ);
  return _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), x),
                       _mm256_add_ps(one, _mm256_blendv_ps(t, _mm256_sub_ps(_mm256_setzero_ps(), t), negative)));
}

inline __m256 activate(Activation activation, __m256 v) {
  if (activation == Activation::kSilu) return silu(v);
  if (activation == Activation::kGeluTanh) return gelu_tanh(v);
  return v;
}

// Every row of x (`m` rows) times one 16-column block, ROWS rows per pass over the block (from L1 after the first).
void multiply_block(const uint8_t* x, int64_t m, int64_t stride, const int8_t* b, int64_t groups, int32_t* sums) {
  int64_t i = 0;
  for (; i + ROWS <= m; i += ROWS) multiply_rows<ROWS>(x + i * stride, stride, b, groups, sums + i * TILE_N);
  for (; i < m; ++i) multiply_rows<1>(x + i * stride, stride, b, groups, sums + i * TILE_N);
}

// Eight of a row's outputs: the sums of the codes (the offset codes' sums less 128 x the column sums, `offsets`)
// rescaled (sum * x_scale, then fused w_scale * . + bias), as the AVX-512 epilogue computes them.
inline __m256 rescaled(const int32_t* sums, const int32_t* offsets, float x_scale, const float* w_scale,
                       const float* bias) {
  const __m256i exact = _mm256_sub_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sums)),
                                         _mm256_loadu_si256(reinterpret_cast<const __m256i*>(offsets)));
  const __m256 sum = _mm256_cvtepi32_ps(exact);
  return _mm256_fmadd_ps(_mm256_mul_ps(sum, _mm256_set1_ps(x_scale)), _mm256_loadu_ps(w_scale),
                         _mm256_loadu_ps(bias));
}

torch::Tensor run_linear(const torch::Tensor& x, const torch::Tensor& packed, const torch::Tensor& w_scale,
                         const torch::Tensor& bias, int64_t out_features, Epilogue epilogue) {
  TORCH_CHECK(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"), "the AVX2 int8 kernel needs AVX2 and FMA");
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == torch::kFloat, "the AVX2 int8 kernel takes 2-D fp32 activations");
  const auto xc = x.contiguous();
  const int64_t m = xc.size(0), k = xc.size(1), n_blocks = packed.size(0), k_blocks = packed.size(1);
  const bool gated = epilogue.gated;
  vlabench_int8::check_call(k, packed, w_scale, bias, out_features, gated);
  auto y = torch::empty({m, out_features}, xc.options());
  if (m == 0) return y;
  const int64_t stride = k_blocks * TILE_K, groups = k_blocks * GROUPS;
  auto codes = torch::empty({m, stride}, torch::kUInt8);
  auto x_scale = torch::empty({m}, torch::kFloat);
  const float* xp = xc.data_ptr<float>();
  uint8_t* q = codes.data_ptr<uint8_t>();
  float* xs = x_scale.data_ptr<float>();
  at::parallel_for(0, m, std::max<int64_t>(16, QUANTIZE_INLINE_VALUES / k), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) xs[i] = quantize_row(xp + i * k, k, q + i * stride);
  });
  const int8_t* wp = packed.data_ptr<int8_t>();
  const float* ws = w_scale.data_ptr<float>();
  const float* bp = bias.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  const std::vector<uint8_t> offset_row(stride, OFFSET);  // 128 x a column's sum is its dot product with this row
  // One task per 16 output columns (a gated call: a (gate, up) block pair), as in amx_int8.cpp: each thread reads
  // its blocks' weight as one stream, once per CHUNK rows of x (whose codes stay in L2 meanwhile).
  at::parallel_for(0, gated ? n_blocks / 2 : n_blocks, 1, [&](int64_t begin, int64_t end) {
    alignas(32) int32_t sums[CHUNK * TILE_N], up_sums[CHUNK * TILE_N];
    std::vector<int32_t> offsets((end - begin) * 2 * TILE_N);  // per task: its block's and its up block's
    for (int64_t m0 = 0; m0 < m; m0 += CHUNK) {
      const int64_t rows = std::min<int64_t>(CHUNK, m - m0);
      for (int64_t task = begin; task < end; ++task) {
        const int64_t nb = gated ? 2 * task : task, up = gated ? nb + 1 : nb, n0 = task * TILE_N;
        int32_t* offset = offsets.data() + 2 * (task - begin) * TILE_N;
        if (m0 == 0) {  // once per call, right before the block's first pass, which then reads its weight from cache
          multiply_rows<1>(offset_row.data(), 0, wp + nb * stride * TILE_N, groups, offset);
          if (gated) multiply_rows<1>(offset_row.data(), 0, wp + up * stride * TILE_N, groups, offset + TILE_N);
        }
        multiply_block(q + m0 * stride, rows, stride, wp + nb * stride * TILE_N, groups, sums);
        if (gated) multiply_block(q + m0 * stride, rows, stride, wp + up * stride * TILE_N, groups, up_sums);
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t column = 0; column < TILE_N && column < out_features - n0; column += 8) {
            const float scale = xs[m0 + r];
            __m256 value = activate(epilogue.activation, rescaled(sums + r * TILE_N + column, offset + column, scale,
                                                                  ws + nb * TILE_N + column, bp + nb * TILE_N + column));
            if (gated)
              value = _mm256_mul_ps(value, rescaled(up_sums + r * TILE_N + column, offset + TILE_N + column, scale,
                                                    ws + up * TILE_N + column, bp + up * TILE_N + column));
            store8(yp + (m0 + r) * out_features + n0 + column, out_features - n0 - column, value);
          }
      }
    }
  });
  return y;
}

// The operators' signatures and meaning are amx_int8.cpp's (fp32 activations only).
torch::Tensor int8_linear(const torch::Tensor& x, const torch::Tensor& packed, const torch::Tensor& w_scale,
                          const torch::Tensor& bias, int64_t out_features, int64_t activation) {
  return run_linear(x, packed, w_scale, bias, out_features, {vlabench_int8::activation_of(activation, false), false});
}

torch::Tensor int8_gated_linear(const torch::Tensor& x, const torch::Tensor& packed, const torch::Tensor& w_scale,
                                const torch::Tensor& bias, int64_t out_features, int64_t activation) {
  return run_linear(x, packed, w_scale, bias, out_features, {vlabench_int8::activation_of(activation, true), true});
}
}  // namespace

TORCH_LIBRARY_FRAGMENT(vlabench, library) {
  const std::string args = "(Tensor x, Tensor packed, Tensor w_scale, Tensor bias, int out_features, int activation)";
  library.def(("avx2_int8_linear" + args + " -> Tensor").c_str());
  library.def(("avx2_int8_gated_linear" + args + " -> Tensor").c_str());
}

TORCH_LIBRARY_IMPL(vlabench, CPU, library) {
  library.impl("avx2_int8_linear", &int8_linear);
  library.impl("avx2_int8_gated_linear", &int8_gated_linear);
}
