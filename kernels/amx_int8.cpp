// vlabench's int8 linear for the action expert's small-M GEMMs (issue 19, section 3), on Intel AMX or, on CPUs
// without AMX, on AVX512-VNNI.
//
// y[m, n] = (q(x)[m, :] . W[n, :]) * x_scale[m] * w_scale[n] + bias[n]
// x is quantized per row (symmetric int8, scale = absmax / 127), W per output channel (packed once, at load).
// On AMX the int32 accumulation runs on tiles (TDPBSSD, s8 x s8): four 16-row C tiles cover up to 64 rows of x, one
// A tile and one B tile stream through them. On AVX512-VNNI (VPDPBUSD, u8 x s8) the same packed weight is read 64
// bytes (16 columns x 4 k) at a time against 16 rows' broadcast codes; x's codes are stored offset by 128 and 128 x
// each column's weight sum is taken off the sums. The weight is packed so each thread reads its columns as one
// contiguous stream of 1 KB blocks; x is quantized straight into the tile-blocked layout. The epilogue can apply an
// activation (SiLU, tanh GELU) to the fp32 result before its one rounding; a gated MLP's gate and up projections run
// as one call on a weight packed as (gate, up) block pairs, with act(gate) * up taken in the same pass.
#include <ATen/Parallel.h>
#include <immintrin.h>
#include <torch/library.h>
#include <torch/types.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "amx_tiles.h"
#include "int8_call.h"
#include "vector_math.h"

namespace {
using vlabench_amx::C_TILES;
using vlabench_int8::Activation, vlabench_int8::Epilogue, vlabench_int8::QUANTIZE_INLINE_VALUES, vlabench_int8::TILE_K,
    vlabench_int8::TILE_N;
constexpr int TILE_M = vlabench_amx::TILE_ROWS;
static_assert(TILE_K == vlabench_amx::TILE_ROW_BYTES, "a packed block row is one AMX tile row");
constexpr int TILE_BYTES = TILE_M * TILE_K;
constexpr int PREFETCH_TILES = 16;  // whole weight tiles prefetched ahead of the one in use

// 16 activations as fp32, from fp32 or bf16 (a bf16 is the upper half of an fp32).
inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 load16(const at::BFloat16* p) {
  const __m256i half = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(half), 16));
}
inline float load1(const float* p) { return *p; }
inline float load1(const at::BFloat16* p) { return static_cast<float>(*p); }

// 16 outputs, masked to the live columns, as fp32 or as bf16 (rounded to nearest even, as torch rounds).
inline void store16(float* p, __mmask16 live, __m512 v) { _mm512_mask_storeu_ps(p, live, v); }
inline void store16(at::BFloat16* p, __mmask16 live, __m512 v) {
  _mm256_mask_storeu_epi16(p, live, reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v)));
}

// Row i of x, quantized into the blocked layout [m_tile][k_block][16 rows][64 bytes], each code XORed with `flip`
// (0 for AMX's s8 codes, 0x80 for VNNI's u8 codes offset by 128). Bytes past column k and rows past m stay unset:
// the packed weight is zero past k, and rows past m are never stored.
template <typename T>
float quantize_row(const T* row, int64_t k, int64_t k_blocks, int64_t i, int8_t flip, int8_t* blocked) {
  __m512 vmax = _mm512_setzero_ps();
  int64_t j = 0;
  for (; j + 16 <= k; j += 16) vmax = _mm512_max_ps(vmax, _mm512_abs_ps(load16(row + j)));
  float amax = _mm512_reduce_max_ps(vmax);
  for (; j < k; ++j) amax = std::max(amax, std::fabs(load1(row + j)));
  const float scale = amax > vlabench_int8::MIN_RANGE ? amax / 127.f : 1.f;
  const __m512 inverse = _mm512_set1_ps(1.f / scale);
  int8_t* base = blocked + ((i / TILE_M) * k_blocks * TILE_M + i % TILE_M) * TILE_K;
  auto at = [&](int64_t col) { return base + (col / TILE_K) * TILE_BYTES + col % TILE_K; };
  const __m128i flips = _mm_set1_epi8(flip);
  for (j = 0; j + 16 <= k; j += 16) {
    const __m512i codes = _mm512_cvtps_epi32(_mm512_mul_ps(load16(row + j), inverse));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(at(j)), _mm_xor_si128(_mm512_cvtsepi32_epi8(codes), flips));
  }
  const float inverse_scale = 1.f / scale;  // the tail rounds x * (1 / scale) too, as the vector part does
  for (; j < k; ++j) {
    const auto code = static_cast<int8_t>(std::nearbyint(std::clamp(load1(row + j) * inverse_scale, -127.f, 127.f)));
    *at(j) = static_cast<int8_t>(code ^ flip);
  }
  return scale;
}
}  // namespace

namespace {
using Sums = int32_t[C_TILES][TILE_M * TILE_N];

// Up to four 16-row tiles of x (`live` of them, `step` bytes apart) times one 16-column block of W, over every k
// block: four C tiles, one A tile and one B tile streaming through them; the int32 sums land in `sums`.
void multiply_rows(const int8_t* a, int64_t step, const int8_t* b, int64_t k_blocks, int live, Sums& sums) {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t kb = 0; kb < k_blocks; ++kb) {
    const char* ahead = reinterpret_cast<const char*>(b + (kb + PREFETCH_TILES) * TILE_BYTES);
    for (int line = 0; line < TILE_BYTES; line += 64) _mm_prefetch(ahead + line, _MM_HINT_T0);
    _tile_loadd(VLABENCH_B_TILE, b + kb * TILE_BYTES, TILE_N * 4);
    const int8_t* at = a + kb * TILE_BYTES;
#define VLABENCH_MAC(T)                                        \
  if (T < live) {                                              \
    _tile_loadd(VLABENCH_A_TILE, at + T * step, TILE_K);       \
    _tile_dpbssd(T, VLABENCH_A_TILE, VLABENCH_B_TILE);         \
  }
    VLABENCH_MAC(0)
    VLABENCH_MAC(1)
    VLABENCH_MAC(2)
    VLABENCH_MAC(3)
#undef VLABENCH_MAC
  }
  _tile_stored(0, sums[0], TILE_N * 4);
  _tile_stored(1, sums[1], TILE_N * 4);
  _tile_stored(2, sums[2], TILE_N * 4);
  _tile_stored(3, sums[3], TILE_N * 4);
}

// The same product on AVX512-VNNI: a's codes are u8 (s8 + 128), so each column's sum carries 128 x its weight sum
// (`offset`), which is taken off. R rows of one 16-row group keep their sums in registers over every k block; the
// weight block (k_blocks KB) is read once per group, from L1 or L2 after the first. The first group's pass
// (WITH_OFFSET) also sums the offset from the weight lines it loads anyway (no pass of its own over a cold block).
// Pass `pass` of `passes` prefetches every passes-th 1 KB block of the next weight block into L2, so the weight
// stream from memory overlaps all passes' arithmetic instead of stalling the first. Groups of under 8 rows keep
// 8 / R sums per row over alternate k groups, so their multiply-adds overlap instead of waiting on each other.
template <int R, bool WITH_OFFSET>
void multiply_group_vnni(const int8_t* rows, const int8_t* b, int64_t k_blocks, int pass, int passes,
                         __m512i& offset_out, int32_t* sums) {
  constexpr uint64_t GROUPS = TILE_K / 4;  // 4-byte k groups per 64-byte row
  constexpr int CHAINS = R >= 8 ? 1 : 8 / R;
  const __m512i offset_codes = _mm512_set1_epi8(static_cast<char>(0x80));
  const int8_t* next = b + k_blocks * TILE_BYTES;  // the next 16 columns' block: contiguous, this thread's next task
  __m512i offset = offset_out, acc[R][CHAINS];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < CHAINS; ++c) acc[r][c] = _mm512_setzero_si512();
  // k blocks in runs of `passes`, this pass prefetching one of each run's. The multiply-adds' loop must sit inside an
  // outer loop: alone (or unrolled over a block's 16 k groups), GCC 12 kept each sum in two registers and copied it
  // to and fro around every VPDPBUSD, two moves per multiply-add.
  for (int64_t kb0 = 0; kb0 < k_blocks; kb0 += passes) {
    const int64_t kb_end = std::min<int64_t>(k_blocks, kb0 + passes);
    if (kb0 + pass < kb_end)
      for (int line = 0; line < TILE_BYTES; line += 64)
        _mm_prefetch(reinterpret_cast<const char*>(next + (kb0 + pass) * TILE_BYTES + line), _MM_HINT_T1);
    for (uint64_t g0 = kb0 * GROUPS; g0 < kb_end * GROUPS; g0 += CHAINS)
      for (int c = 0; c < CHAINS; ++c) {
        const uint64_t g = g0 + c;  // k group g % GROUPS of k block g / GROUPS
        const __m512i columns = _mm512_loadu_si512(b + g * 64);
        if constexpr (WITH_OFFSET) offset = _mm512_dpbusd_epi32(offset, offset_codes, columns);
        const int8_t* x = rows + (g / GROUPS) * TILE_BYTES + (g % GROUPS) * 4;
        for (int r = 0; r < R; ++r) {
          int32_t codes;
          std::memcpy(&codes, x + r * TILE_K, sizeof codes);
          acc[r][c] = _mm512_dpbusd_epi32(acc[r][c], _mm512_set1_epi32(codes), columns);
        }
      }
  }
  for (int r = 0; r < R; ++r) {
    __m512i sum = acc[r][0];
    for (int c = 1; c < CHAINS; ++c) sum = _mm512_add_epi32(sum, acc[r][c]);
    _mm512_store_si512(sums + r * TILE_N, _mm512_sub_epi32(sum, offset));
  }
  offset_out = offset;
}

template <bool WITH_OFFSET>
void multiply_group_vnni(int rows, const int8_t* x, const int8_t* b, int64_t k_blocks, int pass, int passes,
                         __m512i& offset, int32_t* sums) {
  if (rows > 8)
    multiply_group_vnni<16, WITH_OFFSET>(x, b, k_blocks, pass, passes, offset, sums);
  else if (rows > 4)
    multiply_group_vnni<8, WITH_OFFSET>(x, b, k_blocks, pass, passes, offset, sums);
  else if (rows > 2)
    multiply_group_vnni<4, WITH_OFFSET>(x, b, k_blocks, pass, passes, offset, sums);
  else if (rows > 1)
    multiply_group_vnni<2, WITH_OFFSET>(x, b, k_blocks, pass, passes, offset, sums);
  else
    multiply_group_vnni<1, WITH_OFFSET>(x, b, k_blocks, pass, passes, offset, sums);
}

// Up to four 16-row groups of x (`live`, the last holding `last_rows` rows) times one 16-column block of W; a short
// last group runs only its rows, rounded up to a power of two.
void multiply_rows_vnni(const int8_t* a, int64_t step, const int8_t* b, int64_t k_blocks, int live, int last_rows,
                        Sums& sums) {
  __m512i offset = _mm512_setzero_si512();
  for (int t = 0; t < live; ++t) {
    const int rows = t + 1 < live ? TILE_M : last_rows;
    if (t == 0)
      multiply_group_vnni<true>(rows, a, b, k_blocks, t, live, offset, sums[t]);
    else
      multiply_group_vnni<false>(rows, a + t * step, b, k_blocks, t, live, offset, sums[t]);
  }
}

enum class Isa { kAmx, kVnni };

inline __m512 activate(Activation activation, __m512 v) {
  if (activation == Activation::kSilu) return vlabench_vec::silu(v);
  if (activation == Activation::kGeluTanh) return vlabench_vec::gelu_tanh(v);
  return v;
}

// y = act(x W^T + b) (plain) or act(x Wg^T + bg) * (x Wu^T + bu) (gated); T the activations' type (fp32 or bf16)
// in and out; y is allocated [m, out_features].
template <typename T, Isa isa>
void linear_into(const torch::Tensor& xc, const torch::Tensor& packed, const torch::Tensor& w_scale,
                 const torch::Tensor& bias, int64_t out_features, Epilogue epilogue, torch::Tensor& y) {
  const int64_t m = xc.size(0), k = xc.size(1), n_blocks = packed.size(0), k_blocks = packed.size(1);
  const int64_t m_tiles = (m + TILE_M - 1) / TILE_M, step = k_blocks * TILE_BYTES;
  auto blocked = torch::empty({m_tiles, k_blocks, TILE_M, TILE_K}, torch::kInt8);
  auto x_scale = torch::empty({m}, torch::kFloat);
  const T* xp = xc.data_ptr<T>();
  int8_t* q = blocked.data_ptr<int8_t>();
  float* xs = x_scale.data_ptr<float>();
  const int64_t rows_inline = std::max<int64_t>(TILE_M, QUANTIZE_INLINE_VALUES / k);  // small x: no fork/join
  const auto flip = static_cast<int8_t>(isa == Isa::kVnni ? 0x80 : 0);
  at::parallel_for(0, m, rows_inline, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) xs[i] = quantize_row(xp + i * k, k, k_blocks, i, flip, q);
  });
  const int8_t* wp = packed.data_ptr<int8_t>();
  const float* ws = w_scale.data_ptr<float>();
  const float* bp = bias.data_ptr<float>();
  T* yp = y.data_ptr<T>();
  const bool gated = epilogue.gated;
  // One task per 16 output columns: a block of W, or a gated (gate, up) block pair. Each thread reads its blocks'
  // weight as one contiguous stream, once per 64 rows of x.
  at::parallel_for(0, gated ? n_blocks / 2 : n_blocks, 1, [&](int64_t begin, int64_t end) {
    alignas(64) Sums sums, up_sums;
    if constexpr (isa == Isa::kAmx) vlabench_amx::configure_tiles();
    for (int64_t m0 = 0; m0 < m_tiles; m0 += C_TILES) {
      const int live = static_cast<int>(std::min<int64_t>(C_TILES, m_tiles - m0));
      const int last_rows = static_cast<int>(std::min<int64_t>(TILE_M, m - (m0 + live - 1) * TILE_M));
      const int8_t* a = q + m0 * step;
      auto multiply = [&](const int8_t* b, Sums& into) {
        if constexpr (isa == Isa::kAmx)
          multiply_rows(a, step, b, k_blocks, live, into);
        else
          multiply_rows_vnni(a, step, b, k_blocks, live, last_rows, into);
      };
      for (int64_t task = begin; task < end; ++task) {
        const int64_t nb = gated ? 2 * task : task, n0 = task * TILE_N;
        multiply(wp + nb * step, sums);
        if (gated) multiply(wp + (nb + 1) * step, up_sums);
        const __m512 w_first = _mm512_loadu_ps(ws + nb * TILE_N), b_first = _mm512_loadu_ps(bp + nb * TILE_N);
        const int64_t up = gated ? nb + 1 : nb;
        const __m512 w_up = _mm512_loadu_ps(ws + up * TILE_N), b_up = _mm512_loadu_ps(bp + up * TILE_N);
        auto rescaled = [&](const Sums& from, __m512 w, __m512 b, int t, int r, int64_t row) {
          const __m512 sum = _mm512_cvtepi32_ps(_mm512_load_si512(from[t] + r * TILE_N));
          return _mm512_fmadd_ps(_mm512_mul_ps(sum, _mm512_set1_ps(xs[row])), w, b);
        };
        const __mmask16 columns = out_features - n0 >= TILE_N ? 0xFFFF : (1u << (out_features - n0)) - 1;
        for (int t = 0; t < live; ++t)
          for (int r = 0; r < TILE_M; ++r) {
            const int64_t row = (m0 + t) * TILE_M + r;
            if (row >= m) break;
            __m512 value = activate(epilogue.activation, rescaled(sums, w_first, b_first, t, r, row));
            if (gated) value = _mm512_mul_ps(value, rescaled(up_sums, w_up, b_up, t, r, row));
            store16(yp + row * out_features + n0, columns, value);
          }
      }
    }
    if constexpr (isa == Isa::kAmx) _tile_release();
  });
}

template <Isa isa>
torch::Tensor run_linear(const torch::Tensor& x, const torch::Tensor& packed, const torch::Tensor& w_scale,
                         const torch::Tensor& bias, int64_t out_features, Epilogue epilogue) {
  const auto dtype = x.scalar_type();
  if constexpr (isa == Isa::kAmx) {
    TORCH_CHECK(vlabench_amx::amx_permitted(), "the kernel refused AMX tile data to this process (arch_prctl XTILEDATA)");
  } else {
    const bool bf16_ok = dtype != torch::kBFloat16 || __builtin_cpu_supports("avx512bf16");
    TORCH_CHECK(__builtin_cpu_supports("avx512vnni") && bf16_ok,
                "the VNNI int8 kernel needs AVX512-VNNI, and AVX512-BF16 for bf16 activations");
  }
  TORCH_CHECK(x.dim() == 2 && (dtype == torch::kFloat || dtype == torch::kBFloat16),
              "int8_linear takes 2-D fp32 or bf16 activations");
  const auto xc = x.contiguous();
  vlabench_int8::check_call(xc.size(1), packed, w_scale, bias, out_features, epilogue.gated);
  auto y = torch::empty({xc.size(0), out_features}, xc.options());
  if (xc.size(0) == 0) return y;
  if (dtype == torch::kFloat)
    linear_into<float, isa>(xc, packed, w_scale, bias, out_features, epilogue, y);
  else
    linear_into<at::BFloat16, isa>(xc, packed, w_scale, bias, out_features, epilogue, y);
  return y;
}

}  // namespace

// x [M, K] fp32 or bf16; packed by amx_int8.py (pack_weight); w_scale and bias [N padded to 16] fp32; activation -1 (none),
// 0 (SiLU) or 1 (GELU, tanh form), applied to the fp32 result. Returns [M, out_features] in x's dtype (the sums,
// the rescale and the activation are fp32 either way; one rounding).
template <Isa isa>
torch::Tensor int8_linear(const torch::Tensor& x, const torch::Tensor& packed, const torch::Tensor& w_scale,
                          const torch::Tensor& bias, int64_t out_features, int64_t activation) {
  return run_linear<isa>(x, packed, w_scale, bias, out_features, {vlabench_int8::activation_of(activation, false), false});
}

// A gated MLP's gate and up projections in one call: packed holds (gate block i, up block i) pairs of 16 columns,
// w_scale and bias likewise; activation 0 is SiLU, 1 GELU (tanh form). Returns act(x Wg^T + bg) * (x Wu^T + bu),
// [M, out_features] in x's dtype, rounded once from fp32.
template <Isa isa>
torch::Tensor int8_gated_linear(const torch::Tensor& x, const torch::Tensor& packed, const torch::Tensor& w_scale,
                                const torch::Tensor& bias, int64_t out_features, int64_t activation) {
  return run_linear<isa>(x, packed, w_scale, bias, out_features, {vlabench_int8::activation_of(activation, true), true});
}

// The operators, one pair per instruction set, registered with the dispatcher so eager calls skip Python and
// torch.compile sees one opaque op.
TORCH_LIBRARY(vlabench, library) {
  for (const char* isa : {"amx", "vnni"}) {
    const std::string args = "(Tensor x, Tensor packed, Tensor w_scale, Tensor bias, int out_features, int activation)";
    library.def((std::string(isa) + "_int8_linear" + args + " -> Tensor").c_str());
    library.def((std::string(isa) + "_int8_gated_linear" + args + " -> Tensor").c_str());
  }
}

TORCH_LIBRARY_IMPL(vlabench, CPU, library) {
  library.impl("amx_int8_linear", &int8_linear<Isa::kAmx>);
  library.impl("amx_int8_gated_linear", &int8_gated_linear<Isa::kAmx>);
  library.impl("vnni_int8_linear", &int8_linear<Isa::kVnni>);
  library.impl("vnni_int8_gated_linear", &int8_gated_linear<Isa::kVnni>);
}
