// The AVX2 int8 kernels' shared arithmetic (avx2_int8.cpp's linear and avx2_attention.cpp's attention): fp32 exp,
// the activation codes' quantization (offset to u8), the u8 x s8 block product, the masked store. Built only into
// the AVX2 library (amx_int8.py's EXTENSIONS), with AVX2 and FMA enabled.
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "int8_call.h"

namespace vlabench_avx2 {
using vlabench_int8::TILE_N;
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

inline float horizontal_max(__m256 v) {
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, v);
  return *std::max_element(lanes, lanes + 8);
}

inline int32_t horizontal_sum(__m256i v) {
  alignas(32) int32_t lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), v);
  int32_t sum = 0;
  for (const int32_t lane : lanes) sum += lane;
  return sum;
}

// Eight int32 lanes -> eight bytes in the low half (saturated as int8, or as uint8 where Unsigned), in lane order.
template <bool Unsigned = false>
inline __m128i bytes8(__m256i words) {
  const __m256i halves = _mm256_packs_epi32(words, words);
  __m256i bytes;
  if constexpr (Unsigned)
    bytes = _mm256_packus_epi16(halves, _mm256_setzero_si256());
  else
    bytes = _mm256_packs_epi16(halves, _mm256_setzero_si256());
  return _mm_unpacklo_epi32(_mm256_castsi256_si128(bytes), _mm256_extracti128_si256(bytes, 1));
}

inline void store_bytes8(void* p, __m128i eight) { _mm_storel_epi64(reinterpret_cast<__m128i*>(p), eight); }

// Row `row` of x quantized into `codes` (k bytes; the padding past k meets zero weights); returns its scale. Each code
// is round-to-nearest-even of x * (1 / scale), saturated to int8, as in amx_int8.cpp's quantize_row, and stored offset
// by 128 as a u8 (VPMADDUBSW's unsigned operand).
inline float quantize_row(const float* row, int64_t k, uint8_t* codes) {
  const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 vmax = _mm256_setzero_ps();
  int64_t j = 0;
  for (; j + 8 <= k; j += 8) vmax = _mm256_max_ps(vmax, _mm256_and_ps(_mm256_loadu_ps(row + j), magnitude));
  float amax = horizontal_max(vmax);
  for (; j < k; ++j) amax = std::max(amax, std::fabs(row[j]));
  const float scale = amax > vlabench_int8::MIN_RANGE ? amax / 127.f : 1.f, inverse_scale = 1.f / scale;
  const __m256 inverse = _mm256_set1_ps(inverse_scale);
  for (j = 0; j + 8 <= k; j += 8) {
    const __m256i words = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(row + j), inverse));
    store_bytes8(codes + j, _mm_xor_si128(bytes8(words), _mm_set1_epi8(static_cast<char>(OFFSET))));
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

inline void store8(float* p, int64_t live, __m256 v) {
  if (live >= 8) return _mm256_storeu_ps(p, v);
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  _mm256_maskstore_ps(p, _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(live)), lane), v);
}

}  // namespace vlabench_avx2
