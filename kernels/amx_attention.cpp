// vlabench's bf16 attention on Intel AMX, for the replicas' float parts under the AMX int8 scheme (issue 19,
// section 3): softmax(q k^T * scale + bias) v with grouped K/V heads, q, k, v and the output bf16. On CPUs with
// AVX512-BF16 but no AMX the same packed K and V feed VDPBF16PS instead of the tiles (16 rows' sums in registers,
// each tile row's 16 columns against each row's broadcast bf16 pair): the same products, the same softmax.
//
// One task takes up to 64 query rows of one head. Scores run on AMX tiles (TDPBF16PS: bf16 pairs, fp32 sums) against
// K packed once per call into whole 1 KB B tiles; the softmax runs in fp32 on AVX-512 and writes exp(s - max) as
// bf16; P V runs on tiles again against V packed the same way, and each output row is divided by its sum in fp32
// as it is stored. Keys past the last are zero in the packed K and V and get a probability of exactly zero.
#include <ATen/Parallel.h>
#include <immintrin.h>
#include <torch/library.h>
#include <torch/types.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

#include "amx_tiles.h"
#include "vector_math.h"

namespace {
using bf16 = at::BFloat16;
constexpr int ROWS = 4 * vlabench_amx::TILE_ROWS;  // query rows per task: one 16-row C tile each
constexpr int PAIR_COLS = 32;                      // bf16 values in one 64-byte tile row
constexpr int TILE_VALUES = vlabench_amx::TILE_ROWS * PAIR_COLS;  // bf16 values in one 1 KB tile

// Scratch kept per thread between calls, only ever grown: fresh buffers of these sizes are mmapped and page-faulted
// on every call, and a vector resized between the expert's two key counts would zero-fill on every call.
template <typename T>
class Scratch {
 public:
  T* get(int64_t size) {
    if (size > capacity_) {
      buffer_.reset(new T[size]);
      capacity_ = size;
    }
    return buffer_.get();
  }

 private:
  std::unique_ptr<T[]> buffer_;
  int64_t capacity_ = 0;
};

inline __m256i to_bf16(__m512 v) { return reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v)); }

// The 16 x 16 matrix of 32-bit values in r, transposed in place (row i becomes column i).
inline void transpose16(__m512i (&r)[16]) {
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  for (int i = 0; i < 4; ++i) {
    t[i] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0x88);
    t[i + 4] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0xdd);
    t[i + 8] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0x88);
    t[i + 12] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0xdd);
  }
  for (int i = 0; i < 8; ++i) {
    r[i] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0xdd);
  }
}

// Keys [32 * block, 32 * block + 32) of K [T, D] (rows `stride` apart, both even) -> their B tiles of q k^T, at
// `out` = the packed K: [T_pad/16][D/32][16 pair rows][16 keys] pairs of bf16 (as uint32), zero past T. Each tile
// is a 16 keys x 16 pairs block of K, transposed in registers.
void pack_keys(const bf16* k, int64_t stride, int64_t t, int64_t d, int64_t block, bf16* out) {
  const auto* pairs = reinterpret_cast<const uint32_t*>(k);
  const int64_t row_pairs = stride / 2, k_tiles = d / PAIR_COLS;
  for (int64_t tb = 2 * block; tb < 2 * block + 2; ++tb) {
    auto* tiles = reinterpret_cast<__m512i*>(out) + tb * k_tiles * 16;
    for (int64_t kb = 0; kb < k_tiles; ++kb, tiles += 16) {
      __m512i r[16];
      for (int64_t key = 0; key < 16; ++key) {
        const int64_t row = tb * 16 + key;
        r[key] = row < t ? _mm512_loadu_si512(pairs + row * row_pairs + kb * 16) : _mm512_setzero_si512();
      }
      transpose16(r);
      for (int i = 0; i < 16; ++i) _mm512_storeu_si512(tiles + i, r[i]);
    }
  }
}

// Keys [32 * block, 32 * block + 32) of V [T, D] (rows `stride` apart) -> their B tiles of P v, at `out` = the
// packed V: [T_pad/32][D/16][16 key pairs][16 columns][2], zero past T: each tile row interleaves two rows of V.
void pack_values(const bf16* v, int64_t stride, int64_t t, int64_t d, int64_t block, bf16* out) {
  auto* tiles = reinterpret_cast<__m512i*>(out) + block * d;  // d 64-byte rows per 32 keys
  auto row16 = [&](int64_t key, int64_t c) {
    return key < t ? _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + key * stride + c)))
                   : _mm512_setzero_si512();
  };
  for (int64_t c = 0; c < d; c += 16)
    for (int64_t r = 0; r < 16; ++r, ++tiles) {
      const int64_t key = block * PAIR_COLS + 2 * r;
      _mm512_storeu_si512(tiles, _mm512_or_si512(row16(key, c), _mm512_slli_epi32(row16(key + 1, c), 16)));
    }
}

inline __m512 load_live(const float* p, __mmask16 live) { return _mm512_maskz_loadu_ps(live, p); }
inline __m512 load_live(const bf16* p, __mmask16 live) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(live, p)), 16));
}

inline __mmask16 live_keys(int64_t t, int64_t j) { return t - j >= 16 ? 0xFFFF : (1u << (t - j)) - 1; }

// Row i of the scores -> exp(s * scale + bias - max) as bf16 (zero past t), the bias fp32 or bf16; returns 1 / the
// sum, which the caller applies to the row's P V (the normalization deferred to the output: one pass less here).
template <typename B>
float softmax_row(float* s, const B* bias, int64_t t, int64_t t_pad, float scale, bf16* p) {
  __m512 vmax = _mm512_set1_ps(-INFINITY);
  if (bias) {
    for (int64_t j = 0; j < t; j += 16) {
      const __mmask16 live = live_keys(t, j);
      const __m512 x = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(live, s + j), _mm512_set1_ps(scale),
                                       load_live(bias + j, live));
      _mm512_mask_storeu_ps(s + j, live, x);
      vmax = _mm512_mask_max_ps(vmax, live, vmax, x);
    }
  } else {  // no bias: the scale (positive) is taken with the exp, max(s * scale) = max(s) * scale
    for (int64_t j = 0; j < t; j += 16) {
      const __mmask16 live = live_keys(t, j);
      vmax = _mm512_mask_max_ps(vmax, live, vmax, _mm512_maskz_loadu_ps(live, s + j));
    }
  }
  const float multiplier = bias ? 1.f : scale;
  const __m512 vmult = _mm512_set1_ps(multiplier), top = _mm512_set1_ps(_mm512_reduce_max_ps(vmax) * multiplier);
  __m512 vsum = _mm512_setzero_ps();
  for (int64_t j = 0; j < t_pad; j += 16) {
    const __mmask16 live = j < t ? live_keys(t, j) : 0;
    const __m512 shifted = _mm512_fmsub_ps(_mm512_maskz_loadu_ps(live, s + j), vmult, top);
    const __m512 e =
        _mm512_maskz_mov_ps(live, vlabench_vec::exp_nonpositive(_mm512_min_ps(shifted, _mm512_setzero_ps())));
    vsum = _mm512_add_ps(vsum, e);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p + j), to_bf16(e));
  }
  return 1.f / _mm512_reduce_add_ps(vsum);
}

enum class Unit { kAmx, kAvx512 };

// c[row][0..15] = sum over the 16 pair rows of B (16 columns each) of a[row] pairs . B, for R rows of a (bf16,
// `lda` apart, 16 pairs each), added over `blocks` (a, b) blocks `a_step` / 512 pairs apart: what TDPBF16PS does on
// a tile, on AVX512-BF16, with the R rows' sums in registers. Under 8 rows, each row keeps 8 / R sums over
// alternate pairs, added at the end, so the multiply-adds of a short group overlap instead of waiting on each other.
template <int R>
void dot_rows_avx512(const bf16* a, int64_t lda, int64_t a_step, const bf16* b, int64_t b_step, int64_t blocks,
                     __m512 (&c)[16]) {
  constexpr int CHAINS = R >= 8 ? 1 : 8 / R;
  __m512 sums[R][CHAINS];
  for (int row = 0; row < R; ++row)
    for (int chain = 0; chain < CHAINS; ++chain) sums[row][chain] = _mm512_setzero_ps();
  for (int64_t block = 0; block < blocks; ++block) {
    const bf16* a_block = a + block * a_step;
    const auto* b_block = reinterpret_cast<const uint32_t*>(b + block * b_step);
    for (int pair0 = 0; pair0 < 16; pair0 += CHAINS)
      for (int chain = 0; chain < CHAINS; ++chain) {
        const int pair = pair0 + chain;
        const auto columns = reinterpret_cast<__m512bh>(_mm512_loadu_si512(b_block + pair * 16));
        for (int row = 0; row < R; ++row) {
          uint32_t values;
          std::memcpy(&values, a_block + row * lda + 2 * pair, sizeof values);
          sums[row][chain] =
              _mm512_dpbf16_ps(sums[row][chain], reinterpret_cast<__m512bh>(_mm512_set1_epi32(values)), columns);
        }
      }
  }
  for (int row = 0; row < R; ++row) {
    c[row] = sums[row][0];
    for (int chain = 1; chain < CHAINS; ++chain) c[row] = _mm512_add_ps(c[row], sums[row][chain]);
  }
}

// The same for `rows` (1..16) rows: the product runs for `rows` rounded up to a power of two (the rows of a past
// `rows` are read, zero or not; only c's first `rows` rows are meant).
inline void dot_rows_avx512(const bf16* a, int64_t lda, int64_t a_step, const bf16* b, int64_t b_step, int64_t blocks,
                            int rows, __m512 (&c)[16]) {
  if (rows > 8)
    dot_rows_avx512<16>(a, lda, a_step, b, b_step, blocks, c);
  else if (rows > 4)
    dot_rows_avx512<8>(a, lda, a_step, b, b_step, blocks, c);
  else if (rows > 2)
    dot_rows_avx512<4>(a, lda, a_step, b, b_step, blocks, c);
  else if (rows > 1)
    dot_rows_avx512<2>(a, lda, a_step, b, b_step, blocks, c);
  else
    dot_rows_avx512<1>(a, lda, a_step, b, b_step, blocks, c);
}

#define VLABENCH_TILE_CASES(M) \
  M(0)                         \
  M(1)                         \
  M(2)                         \
  M(3)
}  // namespace

// q [B, H, S, D], k and v [B, Hk, T, D] (H a multiple of Hk), all bf16; bias additive, broadcastable to
// [B, H, S, T], or none. Returns [B, H, S, D] bf16.
template <Unit unit>
torch::Tensor attention(const torch::Tensor& q_in, const torch::Tensor& k_in, const torch::Tensor& v_in,
                        const std::optional<torch::Tensor>& bias_in, double scale) {
  if constexpr (unit == Unit::kAmx) {
    TORCH_CHECK(vlabench_amx::amx_permitted(), "the kernel refused AMX tile data to this process (XTILEDATA)");
  } else {
    TORCH_CHECK(__builtin_cpu_supports("avx512bf16"), "the attention kernel's AVX-512 path needs AVX512-BF16");
  }
  TORCH_CHECK(q_in.dim() == 4 && k_in.dim() == 4 && v_in.dim() == 4, "amx_attention takes [B, heads, rows, D]");
  for (const auto* x : {&q_in, &k_in, &v_in})
    TORCH_CHECK(x->scalar_type() == torch::kBFloat16, "amx_attention takes bf16 q, k and v");
  // Strided rows are read in place (a transposed q, a K/V view of a cache): only the last dimension must be dense,
  // and K's rows 4-byte aligned for its pair-wise packing.
  auto dense_rows = [](const torch::Tensor& x, bool pairs) {
    const bool aligned = !pairs || (x.stride(2) % 2 == 0 && reinterpret_cast<uintptr_t>(x.data_ptr()) % 4 == 0 &&
                                    x.stride(0) % 2 == 0 && x.stride(1) % 2 == 0);
    return x.stride(3) == 1 && aligned ? x : x.contiguous();
  };
  const torch::Tensor q = dense_rows(q_in, false), k = dense_rows(k_in, true), v = dense_rows(v_in, false);
  const int64_t b = q.size(0), h = q.size(1), s = q.size(2), d = q.size(3), hk = k.size(1), t = k.size(2);
  TORCH_CHECK(d % PAIR_COLS == 0, "amx_attention needs a head size that is a multiple of 32");
  TORCH_CHECK(k.size(0) == b && v.sizes() == k.sizes() && k.size(3) == d && hk > 0 && h % hk == 0 && t > 0,
              "amx_attention: k and v must be [B, Hk, T, D] with H a multiple of Hk");
  torch::Tensor bias;
  if (bias_in.has_value()) {
    const auto dtype = bias_in->scalar_type();
    bias = (dtype == torch::kFloat || dtype == torch::kBFloat16 ? *bias_in : bias_in->to(torch::kFloat))
               .expand({b, h, s, t});
    if (bias.stride(3) != 1) bias = bias.contiguous();
  }
  auto out = torch::empty({b, h, s, d}, q.options());
  if (s == 0) return out;
  const int64_t t_pad = (t + PAIR_COLS - 1) / PAIR_COLS * PAIR_COLS, group = h / hk;
  // Score and probability rows one 64-byte line longer than the keys: rows 4 KB apart (1024 keys) would share
  // their L1 sets.
  const int64_t ld = t_pad + PAIR_COLS;
  thread_local Scratch<bf16> packed;
  const bf16 *kp = k.data_ptr<bf16>(), *vp = v.data_ptr<bf16>(), *qp = q.data_ptr<bf16>();
  bf16 *pk = packed.get(2 * b * hk * t_pad * d), *pv = pk + b * hk * t_pad * d, *op = out.data_ptr<bf16>();
  const int64_t key_blocks = t_pad / PAIR_COLS;  // one packing task: 32 keys of one K/V head
  at::parallel_for(0, b * hk * key_blocks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t i = task / key_blocks, block = task % key_blocks, batch = i / hk, head = i % hk;
      pack_keys(kp + batch * k.stride(0) + head * k.stride(1), k.stride(2), t, d, block, pk + i * t_pad * d);
      pack_values(vp + batch * v.stride(0) + head * v.stride(1), v.stride(2), t, d, block, pv + i * t_pad * d);
    }
  });
  const int64_t chunks = (s + ROWS - 1) / ROWS, d_tiles = d / 16, k_tiles = d / PAIR_COLS;
  at::parallel_for(0, b * h * chunks, 1, [&](int64_t begin, int64_t end) {
    thread_local Scratch<bf16> q_scratch, probs_scratch;
    thread_local Scratch<float> scores_scratch;
    bf16 *q_rows = q_scratch.get(ROWS * d), *probs = probs_scratch.get(ROWS * ld);
    float* scores = scores_scratch.get(ROWS * ld);
    alignas(64) float acc[4][vlabench_amx::TILE_ROWS * 16];
    float inverse_sums[ROWS];
    if constexpr (unit == Unit::kAmx) vlabench_amx::configure_tiles();
    for (int64_t task = begin; task < end; ++task) {
      const int64_t bh = task / chunks, row0 = (task % chunks) * ROWS, rows = std::min<int64_t>(ROWS, s - row0);
      const int64_t kv = (bh / h) * hk + (bh % h) / group, live = (rows + 15) / 16;
      const bf16* q_first = qp + (bh / h) * q.stride(0) + (bh % h) * q.stride(1) + row0 * q.stride(2);
      for (int64_t i = 0; i < rows; ++i)
        std::copy(q_first + i * q.stride(2), q_first + i * q.stride(2) + d, q_rows + i * d);
      std::fill(q_rows + rows * d, q_rows + live * 16 * d, bf16(0.f));
      const bf16* keys = pk + kv * t_pad * d;
      for (int64_t tb = 0; tb < t_pad / 16 && unit == Unit::kAvx512; ++tb)
        for (int64_t m = 0; m < live; ++m) {
          __m512 sums[16];
          const int valid = static_cast<int>(std::min<int64_t>(16, rows - m * 16));
          dot_rows_avx512(q_rows + m * 16 * d, d, PAIR_COLS, keys + tb * k_tiles * TILE_VALUES, TILE_VALUES, k_tiles,
                          valid, sums);
          for (int row = 0; row < valid; ++row) _mm512_storeu_ps(scores + (m * 16 + row) * ld + tb * 16, sums[row]);
        }
      for (int64_t tb = 0; tb < t_pad / 16 && unit == Unit::kAmx; ++tb) {
#define VLABENCH_ZERO(T) \
  if (T < live) _tile_zero(T);
        VLABENCH_TILE_CASES(VLABENCH_ZERO)
        for (int64_t kb = 0; kb < k_tiles; ++kb) {
          _tile_loadd(VLABENCH_B_TILE, keys + (tb * k_tiles + kb) * TILE_VALUES, 64);
#define VLABENCH_SCORE(T)                                                                       \
  if (T < live) {                                                                               \
    _tile_loadd(VLABENCH_A_TILE, q_rows + T * 16 * d + kb * PAIR_COLS, d * 2);                  \
    _tile_dpbf16ps(T, VLABENCH_A_TILE, VLABENCH_B_TILE);                                        \
  }
          VLABENCH_TILE_CASES(VLABENCH_SCORE)
        }
#define VLABENCH_STORE_SCORES(T) \
  if (T < live) _tile_stored(T, scores + T * 16 * ld + tb * 16, ld * 4);
        VLABENCH_TILE_CASES(VLABENCH_STORE_SCORES)
      }
      std::fill(probs + rows * ld, probs + live * 16 * ld, bf16(0.f));
      for (int64_t i = 0; i < rows; ++i) {
        const int64_t at = bias.defined() ? (bh / h) * bias.stride(0) + (bh % h) * bias.stride(1) +
                                                (row0 + i) * bias.stride(2)
                                          : 0;
        float* row = scores + i * ld;
        bf16* row_probs = probs + i * ld;
        const float row_scale = static_cast<float>(scale);
        if (bias.defined() && bias.scalar_type() == torch::kBFloat16)
          inverse_sums[i] = softmax_row(row, bias.data_ptr<bf16>() + at, t, t_pad, row_scale, row_probs);
        else
          inverse_sums[i] = softmax_row(row, bias.defined() ? bias.data_ptr<float>() + at : nullptr, t, t_pad,
                                        row_scale, row_probs);
      }
      const bf16* values = pv + kv * t_pad * d;
      for (int64_t m = 0; m < live && unit == Unit::kAvx512; ++m)
        for (int64_t c = 0; c < d_tiles; ++c) {
          __m512 sums[16];
          const int valid = static_cast<int>(std::min<int64_t>(16, rows - m * 16));
          dot_rows_avx512(probs + m * 16 * ld, ld, PAIR_COLS, values + c * TILE_VALUES, d_tiles * TILE_VALUES,
                          t_pad / PAIR_COLS, valid, sums);
          for (int row = 0; row < valid; ++row)
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(op + (bh * s + row0 + m * 16 + row) * d + c * 16),
                                to_bf16(_mm512_mul_ps(sums[row], _mm512_set1_ps(inverse_sums[m * 16 + row]))));
        }
      for (int64_t m = 0; m < live && unit == Unit::kAmx; ++m)
        for (int64_t c0 = 0; c0 < d_tiles; c0 += 4) {
          const int64_t cols = std::min<int64_t>(4, d_tiles - c0);
#define VLABENCH_ZERO_COLS(T) \
  if (T < cols) _tile_zero(T);
          VLABENCH_TILE_CASES(VLABENCH_ZERO_COLS)
          for (int64_t kb = 0; kb < t_pad / PAIR_COLS; ++kb) {
            _tile_loadd(VLABENCH_A_TILE, probs + m * 16 * ld + kb * PAIR_COLS, ld * 2);
#define VLABENCH_MIX(T)                                                                         \
  if (T < cols) {                                                                               \
    _tile_loadd(VLABENCH_B_TILE, values + (kb * d_tiles + c0 + T) * TILE_VALUES, 64);           \
    _tile_dpbf16ps(T, VLABENCH_A_TILE, VLABENCH_B_TILE);                                        \
  }
            VLABENCH_TILE_CASES(VLABENCH_MIX)
          }
#define VLABENCH_STORE_OUT(T) \
  if (T < cols) _tile_stored(T, acc[T], 64);
          VLABENCH_TILE_CASES(VLABENCH_STORE_OUT)
          for (int64_t c = 0; c < cols; ++c)
            for (int64_t r = 0; r < 16 && m * 16 + r < rows; ++r)
              _mm256_storeu_si256(reinterpret_cast<__m256i*>(op + (bh * s + row0 + m * 16 + r) * d + (c0 + c) * 16),
                                  to_bf16(_mm512_mul_ps(_mm512_load_ps(acc[c] + r * 16),
                                                        _mm512_set1_ps(inverse_sums[m * 16 + r]))));
        }
    }
    if constexpr (unit == Unit::kAmx) _tile_release();
  });
  return out;
}

TORCH_LIBRARY_FRAGMENT(vlabench, library) {
  library.def("amx_attention(Tensor q, Tensor k, Tensor v, Tensor? bias, float scale) -> Tensor");
  library.def("avx512_attention(Tensor q, Tensor k, Tensor v, Tensor? bias, float scale) -> Tensor");
}

TORCH_LIBRARY_IMPL(vlabench, CPU, library) {
  library.impl("amx_attention", &attention<Unit::kAmx>);
  library.impl("avx512_attention", &attention<Unit::kAvx512>);
}
