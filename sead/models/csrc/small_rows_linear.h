// The decoding linear kernel's core (y = x @ W.T in bf16 with fp32 sums, W packed by
// decode_kernel.pack_small_rows), shared by its own operator (small_rows_linear.cpp) and the fused decoding step
// (decode_layers.cpp).
//
// A decoding step multiplies a few rows (1-64) by each weight. The weight is packed once into blocks of 32 output
// features, and within a block pair by pair of inputs: for input pair k, 16 outputs x 2 inputs in one register for
// each of the block's two groups of 16 outputs. Each `vdpbf16ps` then multiplies such a register by one row's input
// pair broadcast to every lane, so a lane holds one output's running sum: no horizontal reduction, and each block is
// one sequential stream (the hardware prefetcher's best case). A tile of up to 12 rows keeps 24 accumulators in
// registers; more rows take the block again (from L2). At 1-8 rows it streams the weights at 0.75-0.8 of the
// machine's measured bandwidth (oneDNN: about 0.5); at 32-64 rows it runs at 0.9-1.0 of its bf16 matmul rate
// (oneDNN: 0.7-0.85; measured 2026-11-27; an earlier layout that summed 32 inputs per lane and reduced
// across lanes ran at 0.6 of it).
#pragma once

#include <ATen/Parallel.h>

#include "avx512_bf16.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>

namespace sead::small_rows {

constexpr int kGroups = 2;                 // groups of 16 output features per block
constexpr int kBlockOut = 16 * kGroups;    // output features per block
constexpr int kPairWidth = 2 * kBlockOut;  // bf16 values of one input pair in a block
constexpr int kMaxRows = 12;               // rows per tile: 2 x 12 accumulators, 2 weight registers

// one row's input pair k as the 32 bits `vdpbf16ps` broadcasts; the pair past an odd row's end is (x, 0)
inline int32_t input_pair(const at::BFloat16* row, int64_t in, int64_t k) {
  uint16_t half[2] = {0, 0};
  std::memcpy(half, row + 2 * k, (2 * k + 1 < in ? 2 : 1) * sizeof(uint16_t));
  int32_t bits;
  std::memcpy(&bits, half, sizeof(bits));
  return bits;
}

// rows m0 .. m0 + TM of x (rows, in) against block `wb` (pairs, 2, 16, 2): output features col0 .. col0 + 32 of y
template <int TM>
inline void tile(const at::BFloat16* x, int64_t in, const at::BFloat16* wb, int64_t pairs, at::BFloat16* y,
                 int64_t out, int64_t col0, int64_t m0) {
  __m512 acc[kGroups][TM];
#pragma GCC unroll 2
  for (int g = 0; g < kGroups; ++g)
#pragma GCC unroll 12
    for (int r = 0; r < TM; ++r) acc[g][r] = _mm512_setzero_ps();
  const int64_t whole = in / 2;  // pairs read straight from x; an odd `in` leaves one more, built by input_pair
  auto step = [&](int64_t k, const int32_t* bits) {
    const at::BFloat16* w = wb + k * kPairWidth;
    const __m512bh w0 = load_bf16x32(w), w1 = load_bf16x32(w + 32);
#pragma GCC unroll 12
    for (int r = 0; r < TM; ++r) {
      const __m512bh xb = reinterpret_cast<__m512bh>(_mm512_set1_epi32(bits[r]));
      acc[0][r] = _mm512_dpbf16_ps(acc[0][r], w0, xb);
      acc[1][r] = _mm512_dpbf16_ps(acc[1][r], w1, xb);
    }
  };
  const int32_t* rows[TM];
#pragma GCC unroll 12
  for (int r = 0; r < TM; ++r) rows[r] = reinterpret_cast<const int32_t*>(x + (m0 + r) * in);
  for (int64_t k = 0; k < whole; ++k) {
    int32_t bits[TM];
#pragma GCC unroll 12
    for (int r = 0; r < TM; ++r) std::memcpy(&bits[r], rows[r] + k, sizeof(int32_t));
    step(k, bits);
  }
  if (whole < pairs) {
    int32_t bits[TM];
    for (int r = 0; r < TM; ++r) bits[r] = input_pair(x + (m0 + r) * in, in, whole);
    step(whole, bits);
  }
  for (int g = 0; g < kGroups; ++g) {
    const int64_t c = col0 + 16 * g;
    if (c >= out) break;
    const __mmask16 keep = out - c >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << (out - c)) - 1u);
    for (int r = 0; r < TM; ++r)  // rounded to nearest even, as torch's bf16 results
      _mm256_mask_storeu_epi16(y + (m0 + r) * out + c, keep, reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(acc[g][r])));
  }
}

template <int... R>
inline void tile_of(int tm, const at::BFloat16* x, int64_t in, const at::BFloat16* wb, int64_t pairs, at::BFloat16* y,
                    int64_t out, int64_t col0, int64_t m0, std::integer_sequence<int, R...>) {
  ((tm == R + 1 ? (tile<R + 1>(x, in, wb, pairs, y, out, col0, m0), 0) : 0), ...);
}

// y (rows, out) = x (rows, in, contiguous) @ W.T, W packed as (blocks, pairs, 2, 16, 2); blocks split over threads
inline void linear_rows(const at::BFloat16* x, int64_t rows, int64_t in, const at::BFloat16* packed, int64_t blocks,
                        int64_t pairs, at::BFloat16* y, int64_t out) {
  at::parallel_for(0, blocks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b)
      for (int64_t m = 0; m < rows; m += kMaxRows)
        tile_of(static_cast<int>(std::min<int64_t>(kMaxRows, rows - m)), x, in, packed + b * pairs * kPairWidth, pairs,
                y, out, b * kBlockOut, m, std::make_integer_sequence<int, kMaxRows>{});
  });
}

}  // namespace sead::small_rows
