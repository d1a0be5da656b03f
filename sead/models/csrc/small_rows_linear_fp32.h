// The fp32 decoding linear kernel's core (y = x @ W.T, W packed by decode_kernel.pack_small_rows_fp32), for CPUs
// with AVX2 and FMA; shared by its own operator (small_rows_linear_fp32.cpp) and the fused fp32 decoding step
// (decode_layers_fp32.cpp).
//
// The same layout idea as the bf16 kernel (small_rows_linear.h): the weight is packed once into blocks of 16 output
// features, input by input, so that for input k one block holds the 16 weights of its outputs in two registers; each
// FMA multiplies such a register by one row's input k broadcast to every lane, and a lane holds one output's running
// sum (no horizontal reduction). Each block is one sequential stream. A tile of up to 6 rows keeps 12 accumulators
// in registers (AVX2 has 16); more rows take the block again, from L2 (`tile_rows`). Up to 3 rows, two sets of
// accumulators take alternate inputs, so that the FMAs of one output do not wait on each other's latency.
#pragma once

#include <ATen/Parallel.h>

#include "avx2_fp32.h"

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace sead::small_rows_fp32 {

constexpr int kBlockOut = 16;  // output features per block: two registers
constexpr int kMaxRows = 6;    // rows per tile: 2 x 6 accumulators, 2 weight registers, 1 broadcast
constexpr int kFewRows = 3;    // up to here two sets of accumulators take alternate inputs (FMA latency)

// rows m0 .. m0 + TM of x against block `wb` (in, 16): output features col0 .. col0 + 16 of y. `panel`: those rows
// of x input by input, (in, TM), so that a step's broadcasts read one or two cache lines through one pointer.
template <int TM>
inline void tile(const float* panel, int64_t in, const float* wb, float* y, int64_t out, int64_t col0, int64_t m0) {
  constexpr int G = 2;  // registers of outputs
  constexpr int kSets = TM <= kFewRows ? 2 : 1;
  __m256 acc[kSets][G][TM];
#pragma GCC unroll 2
  for (int s = 0; s < kSets; ++s)
#pragma GCC unroll 2
    for (int g = 0; g < G; ++g)
#pragma GCC unroll 12
      for (int r = 0; r < TM; ++r) acc[s][g][r] = _mm256_setzero_ps();
  const float* w = wb;
  auto step = [&](int s, int64_t k) {
    __m256 wk[G];
#pragma GCC unroll 2
    for (int g = 0; g < G; ++g) wk[g] = _mm256_loadu_ps(w + k * kBlockOut + 8 * g);
#pragma GCC unroll 12
    for (int r = 0; r < TM; ++r) {
      const __m256 xb = _mm256_broadcast_ss(panel + k * TM + r);
#pragma GCC unroll 2
      for (int g = 0; g < G; ++g) acc[s][g][r] = _mm256_fmadd_ps(wk[g], xb, acc[s][g][r]);
    }
  };
  int64_t k = 0;
  for (; k + kSets <= in; k += kSets)
#pragma GCC unroll 2
    for (int s = 0; s < kSets; ++s) step(s, k + s);
  for (; k < in; ++k) step(0, k);  // an odd input left over (two sets)
  if constexpr (kSets == 2) {
#pragma GCC unroll 2
    for (int g = 0; g < G; ++g)
#pragma GCC unroll 12
      for (int r = 0; r < TM; ++r) acc[0][g][r] = _mm256_add_ps(acc[0][g][r], acc[1][g][r]);
  }
  // unrolled with constant indices, so that the accumulators stay registers (see avx2_fp32.h)
#pragma GCC unroll 2
  for (int g = 0; g < G; ++g) {
    const int64_t c = col0 + 8 * g;
    const int64_t left = out - c;
    const __m256i keep = sead::fp32::first_lanes(static_cast<int>(std::clamp<int64_t>(left, 0, 8)));
#pragma GCC unroll 12
    for (int r = 0; r < TM; ++r) {
      if (left >= 8)
        _mm256_storeu_ps(y + (m0 + r) * out + c, acc[0][g][r]);
      else if (left > 0)
        _mm256_maskstore_ps(y + (m0 + r) * out + c, keep, acc[0][g][r]);
    }
  }
}

template <int... R>
inline void tile_of(int tm, const float* panel, int64_t in, const float* wb, float* y, int64_t out, int64_t col0,
                    int64_t m0, std::integer_sequence<int, R...>) {
  ((tm == R + 1 ? (tile<R + 1>(panel, in, wb, y, out, col0, m0), 0) : 0), ...);
}

// Rows are split into the fewest tiles of up to `kMaxRows`, of equal size (8 rows: 4 + 4, not 6 + 2, whose second
// tile does little work per weight read): measured the fastest of the splits tried at 4-64 rows, beside tiles of up
// to 12 rows over one register of outputs (a broadcast per FMA, slower from 8 rows on).
inline int64_t tile_rows(int64_t rows) {
  const int64_t tiles = (rows + kMaxRows - 1) / kMaxRows;
  return (rows + tiles - 1) / tiles;
}

// x (rows, in) as the tiles read it: per tile of `tile_rows` rows, (in, rows of the tile)
inline void pack_panels(const float* x, int64_t rows, int64_t in, float* panels) {
  const int64_t step = tile_rows(rows);
  for (int64_t m = 0; m < rows; m += step) {
    const int64_t tm = std::min(step, rows - m);
    for (int64_t r = 0; r < tm; ++r)
      for (int64_t k = 0; k < in; ++k) panels[m * in + k * tm + r] = x[(m + r) * in + k];
  }
}

// y (rows, out) = x (rows, in, contiguous) @ W.T, W packed as (blocks, in, 16); blocks split over threads
inline void linear_rows(const float* x, int64_t rows, int64_t in, const float* packed, int64_t blocks, float* y,
                        int64_t out) {
  std::vector<float> panels(rows == 1 ? 0 : rows * in);  // one row is its own panel
  if (rows > 1) pack_panels(x, rows, in, panels.data());
  const float* p = rows == 1 ? x : panels.data();
  const int64_t step = tile_rows(rows);
  at::parallel_for(0, blocks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b)
      for (int64_t m = 0; m < rows; m += step)
        tile_of(static_cast<int>(std::min(step, rows - m)), p + m * in, in, packed + b * in * kBlockOut, y, out,
                b * kBlockOut, m, std::make_integer_sequence<int, kMaxRows>{});
  });
}

}  // namespace sead::small_rows_fp32
