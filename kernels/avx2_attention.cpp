// vlabench's int8 attention on AVX2 (issue 19: int8 on CPUs without native bf16), for long unmasked sequences: the
// vision towers' self-attention over their patches, the vision phase's largest cost after the linears once those ran
// on the int8 linear's AVX2 path, with torch's fp32 flash attention. softmax(q k^T * scale) v, both products in int8 on the int8
// linear's VPMADDUBSW block product (avx2_int8.h), the softmax in fp32 between them, in the style of SageAttention:
//
// - q per row to 8 bits (the linear's activation codes, offset to u8);
// - k less its mean over the keys (which adds the same amount to every score of a row, so the softmax is unchanged;
//   it takes the channels' common offset out of the codes), then per key to 7 bits (the signed operand);
// - p = exp(s - max) in [0, 1] per row to u8 codes round(255 p) (unsigned already), and the row's output divided by
//   the sum of its codes, so the weights applied sum to exactly 1;
// - v per channel (over the keys) to 7 bits.
//
// Every pair VPMADDUBSW sums stays below 2 x 255 x 63 = 32130, so the int32 sums are exact. K and V are packed once
// per call and K/V head into the linear's block layout (16 columns x 4 bytes per group: keys for q k^T, channels for
// p v); one task takes up to 64 query rows of one head, 4 rows at a time, whose score rows stay in L1.
#include <ATen/Parallel.h>
#include <immintrin.h>
#include <torch/library.h>
#include <torch/types.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "avx2_int8.h"

namespace {
using vlabench_avx2::bytes8, vlabench_avx2::horizontal_max, vlabench_avx2::horizontal_sum, vlabench_avx2::multiply_rows,
    vlabench_avx2::OFFSET, vlabench_avx2::quantize_row, vlabench_avx2::store8, vlabench_avx2::store_bytes8,
    vlabench_int8::TILE_N;
constexpr int ROWS = 4;                    // query rows per pass over a head's packed K and V
constexpr int64_t QUERY_BLOCK = 64;        // query rows per task
constexpr float SIGNED_QMAX = 63.f;        // k and v codes: 7 bits, VPMADDUBSW's signed operand
constexpr float PROBABILITY_QMAX = 255.f;  // p codes: u8, VPMADDUBSW's unsigned operand
constexpr float LOG2E = 1.44269504f;
constexpr int64_t MAX_KEYS = 1 << 16;      // the p v sums stay below 2^31 up to here (2 x 32130 per 4 keys)

inline int64_t round_up(int64_t value, int64_t multiple) { return (value + multiple - 1) / multiple * multiple; }

inline int8_t signed_code(float value, float inverse_scale) {
  return static_cast<int8_t>(std::nearbyint(std::clamp(value * inverse_scale, -SIGNED_QMAX, SIGNED_QMAX)));
}

// One K/V head's packed codes: k [keys/16][depth/4][16 keys][4] with per-key scales and 128 x each key's code sum
// (the offset q codes' excess), v [depth/16][keys/4][16 channels][4] with per-channel scales; zero past the ends.
// `finite` is cleared when any of the head's k or v is NaN or infinite: its rows' outputs are then NaN (torch's kernel
// gives NaN in some of them), where codes alone would turn it into finite garbage.
struct PackedHead {
  int8_t* keys;
  float* key_scale;
  int32_t* key_offset;
  int8_t* values;
  float* value_scale;
  uint8_t* finite;
};

// The scale of a range: absmax / qmax, or 1 for a range too small to quantize (MIN_RANGE).
inline float scale_of(float amax) { return amax > vlabench_int8::MIN_RANGE ? amax / SIGNED_QMAX : 1.f; }

// Eight fp32 values -> their 7-bit codes round(x * inverse) (|x * inverse| <= 63 by the scale), as int32 lanes.
inline __m256i codes8(__m256 x, __m256 inverse) { return _mm256_cvtps_epi32(_mm256_mul_ps(x, inverse)); }

void pack_keys(const float* k, int64_t stride, int64_t t, int64_t d, int64_t d4, const PackedHead& head) {
  const int64_t whole = d / 8 * 8, groups = d4 / 4;
  std::vector<float> mean(d, 0.f), centered(d);
  std::vector<int8_t> codes(d4, 0);
  for (int64_t j = 0; j < t; ++j)
    for (int64_t c = 0; c < d; ++c) mean[c] += k[j * stride + c];
  for (float& m : mean) {
    if (!std::isfinite(m)) *head.finite = 0;  // a NaN or infinity among the keys reaches their sum
    m /= static_cast<float>(t);
  }
  const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  for (int64_t j = 0; j < t; ++j) {
    __m256 vmax = _mm256_setzero_ps();
    for (int64_t c = 0; c < whole; c += 8) {
      const __m256 x = _mm256_sub_ps(_mm256_loadu_ps(k + j * stride + c), _mm256_loadu_ps(mean.data() + c));
      _mm256_storeu_ps(centered.data() + c, x);
      vmax = _mm256_max_ps(vmax, _mm256_and_ps(x, magnitude));
    }
    float amax = horizontal_max(vmax);
    for (int64_t c = whole; c < d; ++c) {
      centered[c] = k[j * stride + c] - mean[c];
      amax = std::max(amax, std::fabs(centered[c]));
    }
    const float scale = scale_of(amax), inverse = 1.f / scale;
    __m256i total = _mm256_setzero_si256();
    for (int64_t c = 0; c < whole; c += 8) {
      const __m256i words = codes8(_mm256_loadu_ps(centered.data() + c), _mm256_set1_ps(inverse));
      total = _mm256_add_epi32(total, words);
      store_bytes8(codes.data() + c, bytes8(words));
    }
    int32_t sum = horizontal_sum(total);
    for (int64_t c = whole; c < d; ++c) sum += codes[c] = signed_code(centered[c], inverse);
    head.key_scale[j] = scale;
    head.key_offset[j] = OFFSET * sum;
    int8_t* block = head.keys + (j / TILE_N) * groups * TILE_N * 4 + (j % TILE_N) * 4;
    for (int64_t g = 0; g < groups; ++g) std::memcpy(block + g * TILE_N * 4, codes.data() + g * 4, 4);
  }
}

// Four keys' codes of eight channels (int32 lanes, one vector per key) -> 32 bytes: per channel its 4 keys' codes,
// the packed V's group layout.
inline __m256i interleave_keys(__m256i k0, __m256i k1, __m256i k2, __m256i k3) {
  const __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(k0, k1), _mm256_packs_epi32(k2, k3));
  const __m256i by_channel = _mm256_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15, 0, 4, 8, 12, 1, 5,
                                              9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return _mm256_shuffle_epi8(bytes, by_channel);
}

void pack_values(const float* v, int64_t stride, int64_t t, int64_t d, int64_t t_pad, const PackedHead& head) {
  const int64_t whole = d / 8 * 8, groups = t_pad / 4;
  std::vector<float> amax(d, 0.f), total(d, 0.f), inverse(d);
  for (int64_t j = 0; j < t; ++j)
    for (int64_t c = 0; c < d; ++c) {
      amax[c] = std::max(amax[c], std::fabs(v[j * stride + c]));
      total[c] += v[j * stride + c];  // not finite when a value is not (the max would drop a NaN)
    }
  for (int64_t c = 0; c < d; ++c) {
    if (!std::isfinite(total[c])) *head.finite = 0;
    head.value_scale[c] = scale_of(amax[c]);
    inverse[c] = 1.f / head.value_scale[c];
  }
  auto at = [&](int64_t j, int64_t c) -> int8_t& {
    return head.values[((c / TILE_N) * groups + j / 4) * TILE_N * 4 + (c % TILE_N) * 4 + j % 4];
  };
  const int64_t whole_keys = t / 4 * 4;
  for (int64_t j = 0; j < whole_keys; j += 4) {
    for (int64_t c = 0; c < whole; c += 8) {
      const __m256 scale = _mm256_loadu_ps(inverse.data() + c);
      const float* row = v + j * stride + c;
      const __m256i packed = interleave_keys(codes8(_mm256_loadu_ps(row), scale),
                                             codes8(_mm256_loadu_ps(row + stride), scale),
                                             codes8(_mm256_loadu_ps(row + 2 * stride), scale),
                                             codes8(_mm256_loadu_ps(row + 3 * stride), scale));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(&at(j, c)), packed);
    }
    for (int64_t c = whole; c < d; ++c)
      for (int64_t key = j; key < j + 4; ++key) at(key, c) = signed_code(v[key * stride + c], inverse[c]);
  }
  for (int64_t j = whole_keys; j < t; ++j)
    for (int64_t c = 0; c < d; ++c) at(j, c) = signed_code(v[j * stride + c], inverse[c]);
}

// Eight scores of R rows' int32 sums in fp32, in base-2 units: (sum - key offset) * key scale * the row's scale
// (q's, times the softmax scale and log2(e)).
inline __m256 score8(const int32_t* sums, const int32_t* offset, const float* key_scale, __m256 row_scale) {
  const __m256i exact = _mm256_sub_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sums)),
                                         _mm256_loadu_si256(reinterpret_cast<const __m256i*>(offset)));
  return _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(exact), _mm256_loadu_ps(key_scale)), row_scale);
}

// 2^x for x <= 0, to the precision the u8 probability codes need (relative error below 6e-5, a code's step is
// 1/255): 2^n * p(f), f = x - n in [-0.5, 0.5], p of degree 4; clamped at 2^-126, whose code is 0.
inline __m256 exp2_nonpositive(__m256 x) {
  x = _mm256_max_ps(x, _mm256_set1_ps(-126.f));
  const __m256 n = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), f = _mm256_sub_ps(x, n);
  __m256 p = _mm256_set1_ps(9.6181291e-3f);
  for (const float c : {5.5504109e-2f, 2.4022651e-1f, 6.9314718e-1f, 1.f}) p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(c));
  const __m256i exponent = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(exponent));
}

// A score row (base-2 units, t_pad values, -inf past the keys) and its max -> its u8 codes round(255 * 2^(s - max));
// returns their sum.
int32_t probability_codes(const float* s, int64_t t_pad, float max, uint8_t* codes) {
  const __m256 row_max = _mm256_set1_ps(max), levels = _mm256_set1_ps(PROBABILITY_QMAX);
  __m256i total = _mm256_setzero_si256();
  for (int64_t j = 0; j < t_pad; j += 8) {
    const __m256 p = exp2_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(s + j), row_max));
    const __m256i words = _mm256_cvtps_epi32(_mm256_mul_ps(p, levels));
    total = _mm256_add_epi32(total, words);
    store_bytes8(codes + j, bytes8<true>(words));
  }
  return horizontal_sum(total);
}

struct Shape {
  int64_t t, d, t_pad, d4, d16;
};

// R query rows (row pointers `q`) of one head against its packed K and V -> R output rows (pointers `out`).
template <int R>
void attend_rows(const float* const* q, float scale, const PackedHead& head, const Shape& shape, uint8_t* q_codes,
                 float* scores, uint8_t* p_codes, float* const* out) {
  alignas(32) int32_t sums[R * TILE_N];
  __m256 row_scale[R];
  int32_t code_sum[R];
  __m256 row_max[R];
  bool finite[R];
  for (int r = 0; r < R; ++r) {
    row_scale[r] = _mm256_set1_ps(quantize_row(q[r], shape.d, q_codes + r * shape.d4) * scale * LOG2E);
    row_max[r] = _mm256_set1_ps(-INFINITY);
    finite[r] = *head.finite && std::isfinite(std::accumulate(q[r], q[r] + shape.d, 0.f));
  }
  const int64_t key_groups = shape.d4 / 4, whole_blocks = shape.t / TILE_N * TILE_N;
  for (int64_t j0 = 0; j0 < shape.t_pad; j0 += TILE_N) {
    multiply_rows<R>(q_codes, shape.d4, head.keys + j0 * shape.d4, key_groups, sums);
    for (int r = 0; r < R; ++r)
      for (int half = 0; half < TILE_N; half += 8) {
        const __m256 score =
            score8(sums + r * TILE_N + half, head.key_offset + j0 + half, head.key_scale + j0 + half, row_scale[r]);
        _mm256_storeu_ps(scores + r * shape.t_pad + j0 + half, score);
        if (j0 < whole_blocks) row_max[r] = _mm256_max_ps(row_max[r], score);
      }
  }
  for (int r = 0; r < R; ++r) {
    float* row = scores + r * shape.t_pad;
    float max = horizontal_max(row_max[r]);
    for (int64_t j = whole_blocks; j < shape.t; ++j) max = std::max(max, row[j]);
    std::fill(row + shape.t, row + shape.t_pad, -INFINITY);
    code_sum[r] = probability_codes(row, shape.t_pad, max, p_codes + r * shape.t_pad);
  }
  for (int64_t c0 = 0; c0 < shape.d16; c0 += TILE_N) {
    multiply_rows<R>(p_codes, shape.t_pad, head.values + c0 * shape.t_pad, shape.t_pad / 4, sums);
    for (int r = 0; r < R; ++r)
      for (int64_t half = 0; half < TILE_N && c0 + half < shape.d; half += 8) {
        const __m256 sum = _mm256_cvtepi32_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sums + r * TILE_N + half)));
        const __m256 value =
            finite[r] ? _mm256_mul_ps(_mm256_mul_ps(sum, _mm256_loadu_ps(head.value_scale + c0 + half)),
                                      _mm256_set1_ps(1.f / static_cast<float>(code_sum[r])))
                      : _mm256_set1_ps(NAN);
        store8(out[r] + c0 + half, shape.d - c0 - half, value);
      }
  }
}

// q [B, H, S, D], k and v [B, Hkv, T, D] fp32 (each row contiguous, H a multiple of Hkv) -> [B, H, S, D] whose
// storage is [B, S, H, D] (the heads' merge then needs no copy).
torch::Tensor int8_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, double scale) {
  TORCH_CHECK(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"), "the AVX2 int8 attention needs AVX2 and FMA");
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "q, k and v are [batch, heads, tokens, head size]");
  for (const auto* x : {&q, &k, &v})
    TORCH_CHECK(x->scalar_type() == torch::kFloat && x->stride(3) == 1, "q, k and v are fp32 with contiguous rows");
  const int64_t batch = q.size(0), heads = q.size(1), s = q.size(2), d = q.size(3), kv_heads = k.size(1), t = k.size(2);
  TORCH_CHECK(k.sizes() == v.sizes() && k.size(0) == batch && k.size(3) == d && kv_heads > 0 && heads % kv_heads == 0,
              "k and v must match q's batch and head size, with whole groups of query heads per K/V head");
  TORCH_CHECK(t > 0 && t <= MAX_KEYS, "the int8 attention takes 1 to 65536 keys");
  const Shape shape{t, d, round_up(t, TILE_N), round_up(d, 4), round_up(d, TILE_N)};
  const int64_t heads_total = batch * kv_heads;
  const int64_t key_bytes = shape.t_pad * shape.d4, value_bytes = shape.d16 * shape.t_pad;
  // The packed heads live in the calling thread's scratch, only ever grown: fresh buffers of megabytes are mmapped,
  // zeroed and page-faulted on every call (about as long as packing them).
  thread_local std::vector<int8_t> codes;
  thread_local std::vector<float> scales;
  thread_local std::vector<int32_t> offsets;
  thread_local std::vector<uint8_t> finite;
  codes.resize(std::max<size_t>(codes.size(), heads_total * (key_bytes + value_bytes)));
  scales.resize(std::max<size_t>(scales.size(), heads_total * (shape.t_pad + shape.d16)));
  offsets.resize(std::max<size_t>(offsets.size(), heads_total * shape.t_pad));
  finite.resize(std::max<size_t>(finite.size(), heads_total));
  // Taken here: a worker thread naming the thread_local buffers would get its own.
  int8_t* const all_codes = codes.data();
  float* const all_scales = scales.data();
  int32_t* const all_offsets = offsets.data();
  uint8_t* const all_finite = finite.data();
  auto packed = [&](int64_t index) {
    int8_t* head_codes = all_codes + index * (key_bytes + value_bytes);
    float* head_scales = all_scales + index * (shape.t_pad + shape.d16);
    return PackedHead{head_codes,     head_scales,   all_offsets + index * shape.t_pad, head_codes + key_bytes,
                      head_scales + shape.t_pad, all_finite + index};
  };
  const float* kp = k.data_ptr<float>();
  const float* vp = v.data_ptr<float>();
  at::parallel_for(0, heads_total, 1, [&](int64_t begin, int64_t end) {
    for (int64_t index = begin; index < end; ++index) {
      const int64_t b = index / kv_heads, h = index % kv_heads;
      const PackedHead head = packed(index);
      std::memset(head.keys, 0, key_bytes + value_bytes);  // the padding's codes
      std::fill(head.key_scale, head.key_scale + shape.t_pad, 1.f);
      std::fill(head.key_offset, head.key_offset + shape.t_pad, 0);
      std::fill(head.value_scale, head.value_scale + shape.d16, 1.f);
      *head.finite = 1;
      pack_keys(kp + b * k.stride(0) + h * k.stride(1), k.stride(2), t, d, shape.d4, head);
      pack_values(vp + b * v.stride(0) + h * v.stride(1), v.stride(2), t, d, shape.t_pad, head);
    }
  });
  auto out = torch::empty({batch, s, heads, d}, q.options());
  const float* qp = q.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const int64_t blocks = (s + QUERY_BLOCK - 1) / QUERY_BLOCK, group = heads / kv_heads;
  at::parallel_for(0, batch * heads * blocks, 1, [&](int64_t begin, int64_t end) {
    std::vector<uint8_t> q_codes(ROWS * shape.d4, OFFSET), p_codes(ROWS * shape.t_pad);
    std::vector<float> scores(ROWS * shape.t_pad);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / (heads * blocks), h = task / blocks % heads, first = task % blocks * QUERY_BLOCK;
      const PackedHead head = packed(b * kv_heads + h / group);
      const float* rows[ROWS];
      float* outs[ROWS];
      auto point = [&](int64_t i, int64_t count) {
        for (int64_t r = 0; r < count; ++r) {
          rows[r] = qp + b * q.stride(0) + h * q.stride(1) + (i + r) * q.stride(2);
          outs[r] = op + ((b * s + i + r) * heads + h) * d;
        }
      };
      const int64_t last = std::min(s, first + QUERY_BLOCK);
      int64_t i = first;
      for (; i + ROWS <= last; i += ROWS) {
        point(i, ROWS);
        attend_rows<ROWS>(rows, scale, head, shape, q_codes.data(), scores.data(), p_codes.data(), outs);
      }
      for (; i < last; ++i) {
        point(i, 1);
        attend_rows<1>(rows, scale, head, shape, q_codes.data(), scores.data(), p_codes.data(), outs);
      }
    }
  });
  return out.permute({0, 2, 1, 3});
}
}  // namespace

TORCH_LIBRARY_FRAGMENT(vlabench, library) {
  library.def("avx2_int8_attention(Tensor q, Tensor k, Tensor v, float scale) -> Tensor");
}

TORCH_LIBRARY_IMPL(vlabench, CPU, library) { library.impl("avx2_int8_attention", &int8_attention); }
