// Single-query attention's core in fp32, for decoding steps on CPUs with AVX2 and FMA (the fused fp32 decoding
// step, decode_layers_fp32.cpp, runs it over each row's own positions and over pieces of the shared prefix).
//
// The same plan as the bf16 kernel (single_query_attention.h): one task per (row, key/value head, piece of the
// positions) reads its keys once for all its query heads, runs the softmax on a small scratch buffer and reads the
// values once per query head; positions outside the first and last valid one are never read, nor are the values of
// masked positions between them. Returned unnormalised, so that pieces merge by their maxima:
// out = sum_j exp(scale * (s_j - m)) v_j, m = max_j s_j, l = sum_j exp(scale * (s_j - m)), s_j = q . k_j.
#pragma once

#include "valid_span.h"
#include "avx2_fp32.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

namespace sead::attention_fp32 {

using sead::fp32::kLanes;

struct Task {
  const float* q;  // (group, dim)
  const float* k;  // (positions, dim), row stride ks
  const float* v;  // (positions, dim), row stride vs
  int64_t ks, vs;
  int64_t first, last;  // valid positions: [first, last)
  const bool* mask;     // per position, or nullptr (all valid)
  float* out;           // (group, dim)
  float* m;             // (group)
  float* l;             // (group)
};

// the scores of query `q` against the task's keys into s (padded to whole blocks of 8), -inf where masked;
// returns their maximum
template <int DIM>
inline float scores(const Task& t, const float* q, float* s) {
  constexpr int kChunks = DIM / kLanes;
  const int64_t n = t.last - t.first;
  const float neg_inf = -std::numeric_limits<float>::infinity();
  __m256 top = _mm256_set1_ps(neg_inf);
  for (int64_t j0 = 0; j0 < n; j0 += kLanes) {
    const int count = static_cast<int>(std::min<int64_t>(kLanes, n - j0));
    // 8 independent sums; past the last key of a short block the last one is read again, its lanes masked below
    const float* key[kLanes];
#pragma GCC unroll 8
    for (int jj = 0; jj < kLanes; ++jj) key[jj] = t.k + (t.first + j0 + std::min(jj, count - 1)) * t.ks;
    __m256 acc[kLanes];
#pragma GCC unroll 8
    for (int jj = 0; jj < kLanes; ++jj) acc[jj] = _mm256_mul_ps(_mm256_loadu_ps(q), _mm256_loadu_ps(key[jj]));
#pragma GCC unroll 16
    for (int c = 1; c < kChunks; ++c) {
      const __m256 qc = _mm256_loadu_ps(q + kLanes * c);
#pragma GCC unroll 8
      for (int jj = 0; jj < kLanes; ++jj) acc[jj] = _mm256_fmadd_ps(qc, _mm256_loadu_ps(key[jj] + kLanes * c), acc[jj]);
    }
    alignas(32) int32_t valid[kLanes];
    for (int jj = 0; jj < kLanes; ++jj)
      valid[jj] = jj < count && (!t.mask || t.mask[t.first + j0 + jj]) ? -1 : 0;
    const __m256 keep = _mm256_castsi256_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(valid)));
    const __m256 sc = _mm256_blendv_ps(_mm256_set1_ps(neg_inf), sead::fp32::sum_lanes8(acc), keep);
    top = _mm256_max_ps(top, sc);
    _mm256_storeu_ps(s + j0, sc);
  }
  return sead::fp32::max8(top);
}

// out = sum_j p_j v_j over the task's positions, one query head; each value read once, DIM / 8 accumulators in
// registers (in passes of 8 registers for DIM = 128)
template <int DIM>
inline void weigh_values(const Task& t, const float* p, float* out) {
  constexpr int kPass = 8;  // registers per pass
  constexpr int kRegs = DIM / kLanes;
  for (int c0 = 0; c0 < kRegs; c0 += kPass) {
    __m256 acc[kPass];
#pragma GCC unroll 8
    for (int c = 0; c < kPass; ++c) acc[c] = _mm256_setzero_ps();
    for (int64_t j = 0; j < t.last - t.first; ++j) {
      if (t.mask && !t.mask[t.first + j]) continue;  // a masked value is never read (it may be anything, NaN too)
      const float* val = t.v + (t.first + j) * t.vs + kLanes * c0;
      const __m256 w = _mm256_set1_ps(p[j]);
#pragma GCC unroll 8
      for (int c = 0; c < kPass; ++c) acc[c] = _mm256_fmadd_ps(w, _mm256_loadu_ps(val + kLanes * c), acc[c]);
    }
#pragma GCC unroll 8
    for (int c = 0; c < kPass; ++c) _mm256_storeu_ps(out + kLanes * (c0 + c), acc[c]);
  }
}

template <int DIM>
inline void run_task(const Task& t, int group, float scale, std::vector<float>& scratch) {
  const int64_t n = t.last - t.first;
  const float neg_inf = -std::numeric_limits<float>::infinity();
  for (int g = 0; g < group; ++g) {
    t.m[g] = neg_inf;
    t.l[g] = 0.f;
    std::fill_n(t.out + g * DIM, DIM, 0.f);
  }
  if (n <= 0) return;
  const int64_t padded = (n + kLanes - 1) / kLanes * kLanes;
  scratch.resize(static_cast<size_t>(padded));
  float* s = scratch.data();
  for (int g = 0; g < group; ++g) {
    const float m = scores<DIM>(t, t.q + g * DIM, s);
    t.m[g] = m;
    if (m == neg_inf) continue;  // no valid position: weight 0, output 0
    const __m256 shift = _mm256_set1_ps(m), scl = _mm256_set1_ps(scale);
    __m256 total = _mm256_setzero_ps();
    for (int64_t j0 = 0; j0 < padded; j0 += kLanes) {
      const __m256 p = sead::fp32::exp8(_mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(s + j0), shift), scl));
      total = _mm256_add_ps(total, p);
      _mm256_storeu_ps(s + j0, p);
    }
    t.l[g] = sead::fp32::sum8(total);
    weigh_values<DIM>(t, s, t.out + g * DIM);
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

}  // namespace sead::attention_fp32
