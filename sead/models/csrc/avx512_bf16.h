// AVX-512 helpers shared by SEAD's decoding kernels (sead/models/decode_kernel.py builds each of them).
//
// The small loops over registers carry `#pragma GCC unroll`: unrolled early, an array of accumulators lives in
// registers; otherwise GCC 12 keeps it on the stack and stores every accumulator on every iteration (measured:
// the small-rows linear kernel ran at half speed that way).
#pragma once

#include <ATen/ATen.h>
#include <immintrin.h>

namespace sead {

// The 16 lane sums of a[0..15], lane i = sum of a[i]: a transpose-and-add tree (45 instructions against 16
// horizontal reductions of about 10 each).
__attribute__((always_inline)) inline __m512 sum_lanes16(const __m512* a) {
  __m512 b[8], c[4];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i)  // per 128-bit chunk: [a2i 0+2, a2i+1 0+2, a2i 1+3, a2i+1 1+3]
    b[i] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * i], a[2 * i + 1]), _mm512_unpackhi_ps(a[2 * i], a[2 * i + 1]));
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i)  // per chunk: the chunk's sum of a4i .. a4i+3
    c[i] = _mm512_add_ps(_mm512_shuffle_ps(b[2 * i], b[2 * i + 1], 0x44),
                         _mm512_shuffle_ps(b[2 * i], b[2 * i + 1], 0xEE));
  const __m512 d0 = _mm512_add_ps(_mm512_shuffle_f32x4(c[0], c[1], 0x88), _mm512_shuffle_f32x4(c[0], c[1], 0xDD));
  const __m512 d1 = _mm512_add_ps(_mm512_shuffle_f32x4(c[2], c[3], 0x88), _mm512_shuffle_f32x4(c[2], c[3], 0xDD));
  return _mm512_add_ps(_mm512_shuffle_f32x4(d0, d1, 0x88), _mm512_shuffle_f32x4(d0, d1, 0xDD));
}

inline __m512bh load_bf16x32(const at::BFloat16* p) {
  return reinterpret_cast<__m512bh>(_mm512_loadu_si512(p));
}

// 16 bf16 -> 16 floats (a bf16 is the top half of a float)
inline __m512 widen16(const at::BFloat16* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// the first lanes of 16 bf16 -> floats (the rest 0), reading only the positions `keep` marks
inline __m512 widen16_masked(const at::BFloat16* p, __mmask16 keep) {
  const __m256i h = _mm256_maskz_loadu_epi16(keep, p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

}  // namespace sead
