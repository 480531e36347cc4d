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
#include <torch/extension.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "int8_call.h"

namespace {
using vlabench_int8::Activation, vlabench_int8::Epilogue, vlabench_int8::QUANTIZE_INLINE_VALUES, vlabench_int8::TILE_K,
    vlabench_int8::TILE_N;
constexpr int GROUPS = TILE_K / 4;  // 4-byte k groups per 64-byte block row
constexpr int ROWS = 4;  // rows of x whose sums stay in registers over a 16-column block (2 x 4 sums + 4 of 16 ymm)
constexpr int64_t CHUNK = 64;  // rows of x per pass over the weight
constexpr int OFFSET = 128;  // added to each activation code: VPMADDUBSW multiplies unsigned bytes by signed ones

// exp(x) for x <= 0 (vector_math.h's, on 8 lanes: 2^n * p(r), the same operations and constants, so the same
// values); 2^n is built in the exponent bits, n >= -126 above the -87 cut.
inline __m256 exp_nonpositive(__m256 x) {
  const __m256 normal = _mm256_cmp_ps(x, _mm256_set1_ps(-87.f), _CMP_GT_OQ);
  x = _mm256_max_ps(x, _mm256_set1_ps(-87.f));
  const __m256 n =
      _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145752f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.42860677e-6f), r);
  __m256 p = _mm256_set1_ps(1.f / 720);
  for (const float c : {1.f / 120, 1.f / 24, 1.f / 6, 0.5f, 1.f, 1.f}) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
  const __m256i exponent = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_and_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(exponent)), normal);
}

inline __m256 abs_neg(__m256 x) { return _mm256_or_ps(x, _mm256_set1_ps(-0.f)); }  // -|x|

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

// Row `row` of x quantized into `codes` (k bytes; the padding past k meets zero weights); returns its scale. Each code
// is round-to-nearest-even of x * (1 / scale), saturated to int8, as in amx_int8.cpp's quantize_row, and stored offset
// by 128 as a u8 (VPMADDUBSW's unsigned operand).
float quantize_row(const float* row, int64_t k, uint8_t* codes) {
  const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 vmax = _mm256_setzero_ps();
  int64_t j = 0;
  for (; j + 8 <= k; j += 8) vmax = _mm256_max_ps(vmax, _mm256_and_ps(_mm256_loadu_ps(row + j), magnitude));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, vmax);
  float amax = *std::max_element(lanes, lanes + 8);
  for (; j < k; ++j) amax = std::max(amax, std::fabs(row[j]));
  const float scale = amax > 0.f ? amax / 127.f : 1.f, inverse_scale = 1.f / scale;
  const __m256 inverse = _mm256_set1_ps(inverse_scale);
  for (j = 0; j + 8 <= k; j += 8) {
    const __m256i words = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(row + j), inverse));
    const __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(words, words), _mm256_setzero_si256());
    const __m128i eight = _mm_unpacklo_epi32(_mm256_castsi256_si128(bytes), _mm256_extracti128_si256(bytes, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(codes + j), _mm_xor_si128(eight, _mm_set1_epi8(static_cast<char>(OFFSET))));
  }
  for (; j < k; ++j)
    codes[j] = static_cast<uint8_t>(std::nearbyint(std::clamp(row[j] * inverse_scale, -127.f, 127.f)) + OFFSET);
  return scale;
}

// R rows of x's offset codes (`stride` bytes apart) times one 16-column block of the packed weight (`groups` 64-byte
// k groups: 16 columns x 4 k); the int32 sums (of the offset codes) land in sums[R][16].
template <int R>
void multiply_rows(const uint8_t* x, int64_t stride, const int8_t* b, int64_t groups, int32_t* sums) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i acc[R][2];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_si256();
  for (int64_t g = 0; g < groups; ++g) {
    const __m256i w_low = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + g * 64));
    const __m256i w_high = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + g * 64 + 32));
    for (int r = 0; r < R; ++r) {
      int32_t four;
      std::memcpy(&four, x + r * stride + g * 4, sizeof four);
      const __m256i codes = _mm256_set1_epi32(four);
      acc[r][0] = _mm256_add_epi32(acc[r][0], _mm256_madd_epi16(_mm256_maddubs_epi16(codes, w_low), ones));
      acc[r][1] = _mm256_add_epi32(acc[r][1], _mm256_madd_epi16(_mm256_maddubs_epi16(codes, w_high), ones));
    }
  }
  for (int r = 0; r < R; ++r) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(sums + r * TILE_N), acc[r][0]);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(sums + r * TILE_N + 8), acc[r][1]);
  }
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

inline void store8(float* p, int64_t live, __m256 v) {
  if (live >= 8) return _mm256_storeu_ps(p, v);
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  _mm256_maskstore_ps(p, _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(live)), lane), v);
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
