// AVX-512 fp32 math the AMX kernels share: exp on non-positive inputs, and the gate activations built on it.
#pragma once
#include <immintrin.h>

namespace vlabench_vec {
// exp(x) for x <= 0 in fp32: 2^n * p(r), r = x - n ln2, degree-6 polynomial (relative error about 2e-7); exactly
// zero below -87, where exp(x) would be denormal (slow to compute with, and zero to a bf16 result anyway).
inline __m512 exp_nonpositive(__m512 x) {
  const __mmask16 normal = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.f), _CMP_GT_OQ);
  x = _mm512_max_ps(x, _mm512_set1_ps(-87.f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145752f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.42860677e-6f), r);
  __m512 p = _mm512_set1_ps(1.f / 720);
  for (const float c : {1.f / 120, 1.f / 24, 1.f / 6, 0.5f, 1.f, 1.f}) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
  return _mm512_maskz_mov_ps(normal, _mm512_scalef_ps(p, n));
}

inline __m512 abs_neg(__m512 x) { return _mm512_or_ps(x, _mm512_set1_ps(-0.f)); }  // -|x|

// silu(x) = x * sigmoid(x), sigmoid from e = exp(-|x|): 1 / (1 + e) for x >= 0, e / (1 + e) below (no overflow).
inline __m512 silu(__m512 x) {
  const __m512 e = exp_nonpositive(abs_neg(x)), one = _mm512_set1_ps(1.f);
  const __mmask16 negative = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ);
  const __m512 numerator = _mm512_mask_mov_ps(one, negative, e);
  return _mm512_mul_ps(x, _mm512_div_ps(numerator, _mm512_add_ps(one, e)));
}

// GELU, tanh form (torch's approximate="tanh"): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), with
// tanh(y) = sign(y) (1 - e) / (1 + e), e = exp(-2|y|).
inline __m512 gelu_tanh(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.f);
  const __m512 cube = _mm512_mul_ps(_mm512_mul_ps(x, x), x);
  const __m512 y = _mm512_mul_ps(_mm512_set1_ps(0.7978845608f), _mm512_fmadd_ps(_mm512_set1_ps(0.044715f), cube, x));
  const __m512 e = exp_nonpositive(_mm512_mul_ps(_mm512_set1_ps(2.f), abs_neg(y)));
  __m512 t = _mm512_div_ps(_mm512_sub_ps(one, e), _mm512_add_ps(one, e));
  t = _mm512_mask_sub_ps(t, _mm512_cmp_ps_mask(y, _mm512_setzero_ps(), _CMP_LT_OQ), _mm512_setzero_ps(), t);
  return _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), x), _mm512_add_ps(one, t));
}
}  // namespace vlabench_vec
