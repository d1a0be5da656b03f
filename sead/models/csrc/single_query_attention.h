// Single-query attention's core, for decoding steps in bf16 on CPUs with AVX512-BF16: shared by its own operator
// (single_query_attention.cpp: each row's own keys and values) and the fused decoding step (decode_layers.cpp: the
// shared prefix too).
//
// A decoding step has one query per row and 3 query heads per key/value head. As batched matmuls (one per row and
// key/value head, 3 query rows each) oneDNN's bf16 kernel takes about 3x the time of reading the keys once, and the
// fp32 softmax between the two matmuls adds as much again (measured 2026-11-26). Here each (row, key/value head)
// is one task: the keys of its valid positions are read once for all its query heads (bf16 dot products with fp32
// sums), the softmax runs on a small scratch buffer, and the values are read once. Positions outside the first and
// last valid one of a row (left padding, room reserved for tokens not decoded yet) are never read, nor are the
// values of masked positions between them.
//
// Returned unnormalised, so the caller can merge this part with another (the shared prefix's) by their maxima:
// out = sum_j exp(scale * (s_j - m)) v_j, m = max_j s_j, l = sum_j exp(scale * (s_j - m)), s_j = q . k_j.
#pragma once

#include "valid_span.h"
#include "avx512_bf16.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

namespace sead::attention {

constexpr int kBlock = 16;  // keys per block: one AVX-512 register of scores

// e^x for 16 floats: range reduction by ln 2 and a degree-6 polynomial (Cephes' expf), 2^n applied by scalef.
// Inputs below -87.3 (and -inf) give 0; a few ulp elsewhere (the kernel's sums are tested against fp64).
inline __m512 exp16(__m512 x) {
  const __m512 lo = _mm512_set1_ps(-87.3365447505531f);
  const __mmask16 zero = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
  x = _mm512_min_ps(_mm512_max_ps(x, lo), _mm512_set1_ps(88.3762626647949f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 y = _mm512_set1_ps(1.9875691500e-4f);
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.3981999507e-3f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(8.3334519073e-3f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(4.1665795894e-2f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.6666665459e-1f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(5.0000001201e-1f));
  y = _mm512_add_ps(_mm512_fmadd_ps(y, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
  return _mm512_maskz_mov_ps(static_cast<__mmask16>(~zero), _mm512_scalef_ps(y, n));
}

struct Task {
  const at::BFloat16* q;  // (group, dim)
  const at::BFloat16* k;  // (positions, dim), row stride ks
  const at::BFloat16* v;  // (positions, dim), row stride vs
  int64_t ks, vs;
  int64_t first, last;  // valid positions: [first, last)
  const bool* mask;     // per position, or nullptr (all valid)
  float* out;           // (group, dim)
  float* m;             // (group)
  float* l;             // (group)
};

// out[g0 + g] = sum_j p[g0 + g][j] v_j for G query heads at once: each value read once; the G x DIM / 16
// accumulators stay in registers (G is a constant)
template <int DIM, int G>
inline void weigh_values(const Task& t, int g0, int64_t padded, const float* p) {
  constexpr int kLanes = DIM / 16;  // fp32 registers per output row
  __m512 acc[G][kLanes];
#pragma GCC unroll 4
  for (int g = 0; g < G; ++g)
#pragma GCC unroll 8
    for (int c = 0; c < kLanes; ++c) acc[g][c] = _mm512_setzero_ps();
  for (int64_t j = 0; j < t.last - t.first; ++j) {
    if (t.mask && !t.mask[t.first + j]) continue;  // a masked value is never read (it may be anything, NaN too)
    const at::BFloat16* val = t.v + (t.first + j) * t.vs;
    __m512 vf[kLanes];
#pragma GCC unroll 8
    for (int c = 0; c < kLanes; ++c) vf[c] = widen16(val + 16 * c);
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) {
      const __m512 w = _mm512_set1_ps(p[(g0 + g) * padded + j]);
#pragma GCC unroll 8
      for (int c = 0; c < kLanes; ++c) acc[g][c] = _mm512_fmadd_ps(w, vf[c], acc[g][c]);
    }
  }
  for (int g = 0; g < G; ++g)
    if (t.m[g0 + g] != -std::numeric_limits<float>::infinity())
      for (int c = 0; c < kLanes; ++c) _mm512_storeu_ps(t.out + (g0 + g) * DIM + 16 * c, acc[g][c]);
}

template <int DIM>
inline void run_task(const Task& t, int group, float scale, std::vector<float>& scratch) {
  constexpr int kChunks = DIM / 32;  // bf16 pairs per dot product step
  const int64_t n = t.last - t.first;
  const float neg_inf = -std::numeric_limits<float>::infinity();
  for (int g = 0; g < group; ++g) {
    t.m[g] = neg_inf;
    t.l[g] = 0.f;
    for (int d = 0; d < DIM; ++d) t.out[g * DIM + d] = 0.f;
  }
  if (n <= 0) return;
  const int64_t padded = (n + kBlock - 1) / kBlock * kBlock;
  scratch.resize(static_cast<size_t>(group * padded));
  // scores, -inf where masked
  for (int g = 0; g < group; ++g) {
    __m512bh q[kChunks];
    for (int c = 0; c < kChunks; ++c) q[c] = load_bf16x32(t.q + g * DIM + 32 * c);
    float* s = scratch.data() + g * padded;
    __m512 top = _mm512_set1_ps(neg_inf);
    for (int64_t j0 = 0; j0 < n; j0 += kBlock) {
      const int count = static_cast<int>(std::min<int64_t>(kBlock, n - j0));
      // 16 independent sums in registers (unrolled), not one dependent chain per key; past the last key of a
      // short block the last one is read again, and its lanes are masked below
      const at::BFloat16* key[kBlock];
#pragma GCC unroll 16
      for (int jj = 0; jj < kBlock; ++jj) key[jj] = t.k + (t.first + j0 + std::min(jj, count - 1)) * t.ks;
      __m512 acc[kBlock];
#pragma GCC unroll 16
      for (int jj = 0; jj < kBlock; ++jj) acc[jj] = _mm512_dpbf16_ps(_mm512_setzero_ps(), q[0], load_bf16x32(key[jj]));
#pragma GCC unroll 4
      for (int c = 1; c < kChunks; ++c)
#pragma GCC unroll 16
        for (int jj = 0; jj < kBlock; ++jj) acc[jj] = _mm512_dpbf16_ps(acc[jj], q[c], load_bf16x32(key[jj] + 32 * c));
      __mmask16 valid = static_cast<__mmask16>((1u << count) - 1u);
      if (t.mask) {
        __mmask16 m = 0;
        for (int jj = 0; jj < count; ++jj) m |= static_cast<__mmask16>(t.mask[t.first + j0 + jj]) << jj;
        valid &= m;
      }
      const __m512 scores = _mm512_mask_blend_ps(valid, _mm512_set1_ps(neg_inf), sum_lanes16(acc));
      top = _mm512_max_ps(top, scores);
      _mm512_storeu_ps(s + j0, scores);
    }
    const float m = _mm512_reduce_max_ps(top);
    t.m[g] = m;
    if (m == neg_inf) continue;  // no valid position: weight 0
    const __m512 shift = _mm512_set1_ps(m), scl = _mm512_set1_ps(scale);
    __m512 total = _mm512_setzero_ps();
    for (int64_t j0 = 0; j0 < padded; j0 += kBlock) {
      const __m512 p = exp16(_mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(s + j0), shift), scl));
      total = _mm512_add_ps(total, p);
      _mm512_storeu_ps(s + j0, p);
    }
    t.l[g] = _mm512_reduce_add_ps(total);
  }
  // weighted values, up to 4 query heads of the group in one pass over the values
  for (int g0 = 0; g0 < group; g0 += 4) {
    switch (std::min(4, group - g0)) {
      case 1: weigh_values<DIM, 1>(t, g0, padded, scratch.data()); break;
      case 2: weigh_values<DIM, 2>(t, g0, padded, scratch.data()); break;
      case 3: weigh_values<DIM, 3>(t, g0, padded, scratch.data()); break;
      default: weigh_values<DIM, 4>(t, g0, padded, scratch.data());
    }
  }
}

using sead::valid_span;

// one task at the head size it was built for (64 or 128)
inline void run_task_dim(const Task& t, int64_t dim, int group, float scale, std::vector<float>& scratch) {
  if (dim == 64)
    run_task<64>(t, group, scale, scratch);
  else
    run_task<128>(t, group, scale, scratch);
}

}  // namespace sead::attention
