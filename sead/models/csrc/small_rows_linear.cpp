// y = x @ W.T in bf16 (fp32 sums) for the few rows of a decoding step, on CPUs with AVX512-BF16
// (sead/models/decode_kernel.py builds and loads it; sead/models/decode_step.py calls it).
//
// At 1-4 rows a linear layer only streams its weight once, and oneDNN's bf16 kernels read it at about half the
// machine's bandwidth there (benchmarks/RESULTS.md). Here the weight is packed once into blocks of 16 output rows,
// each 4 sub-blocks of 4 rows laid out contiguously over all inputs, so that a register tile of 4 outputs x 4 rows
// of x reads one sequential stream (the hardware prefetcher's best case) and the other rows of x find it in L1.
// Register tiles of 16 accumulators: 4 outputs x 4 rows, 8 x 2 or 16 x 1 (4 streams), each reduced by one
// transpose-and-add.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <immintrin.h>
#include <torch/library.h>

#include "avx512_bf16.h"

#include <algorithm>
#include <cstdint>

namespace {

using sead::sum_lanes16;

constexpr int kOut = 16;  // output features per packed block
constexpr int kSub = 4;   // output features per sub-block: each contiguous over all inputs
constexpr int kIn = 32;   // inputs per chunk: one register of bf16 pairs

struct Shape {
  const at::BFloat16* x;  // (rows, in)
  int64_t in, chunks;     // in <= chunks * kIn
  __mmask32 tail;         // the valid inputs of the last chunk
  at::BFloat16* y;        // (rows, out)
  int64_t out;
};

// acc[i * TM + r] = (weight row n0 + i) . (x row m0 + r)
template <int TN, int TM>
inline void tile(const Shape& s, const at::BFloat16* block, int n0, int64_t m0, float* sums) {
  static_assert(TN * TM == 16, "a tile is 16 accumulators");
  __m512 acc[16];
#pragma GCC unroll 16
  for (int j = 0; j < 16; ++j) acc[j] = _mm512_setzero_ps();
  for (int64_t c = 0; c < s.chunks; ++c) {
    const __mmask32 valid = c == s.chunks - 1 ? s.tail : ~__mmask32(0);
    __m512i xv[TM];
#pragma GCC unroll 4
    for (int r = 0; r < TM; ++r) xv[r] = _mm512_maskz_loadu_epi16(valid, s.x + (m0 + r) * s.in + c * kIn);
    const at::BFloat16* w = block + c * kSub * kIn;  // row n of the block: w + row_offset(n)
#pragma GCC unroll 16
    for (int i = 0; i < TN; ++i) {
      const int n = n0 + i;
      const __m512bh wv = sead::load_bf16x32(w + (n / kSub) * s.chunks * kSub * kIn + (n % kSub) * kIn);
#pragma GCC unroll 4
      for (int r = 0; r < TM; ++r)
        acc[i * TM + r] = _mm512_dpbf16_ps(acc[i * TM + r], wv, reinterpret_cast<__m512bh>(xv[r]));
    }
  }
  _mm512_storeu_ps(sums, sum_lanes16(acc));
}

// rows m0 .. m0 + TM of x against one block (output features col0 .. col0 + 16)
template <int TN, int TM>
inline void block_rows(const Shape& s, const at::BFloat16* block, int64_t col0, int64_t m0) {
  float sums[16];
  for (int n0 = 0; n0 < kOut; n0 += TN) {
    tile<TN, TM>(s, block, n0, m0, sums);
    for (int i = 0; i < TN && col0 + n0 + i < s.out; ++i)
      for (int r = 0; r < TM; ++r) s.y[(m0 + r) * s.out + col0 + n0 + i] = at::BFloat16(sums[i * TM + r]);
  }
}

// x (..., in) bf16; packed (blocks, 4, chunks, 4, 32) bf16 (decode_kernel.pack_small_rows); out: output features
at::Tensor small_rows_linear(const at::Tensor& input, const at::Tensor& packed, int64_t out) {
  TORCH_CHECK(input.scalar_type() == at::kBFloat16 && packed.scalar_type() == at::kBFloat16,
              "small_rows_linear takes bf16 tensors");
  TORCH_CHECK(packed.dim() == 5 && packed.size(1) == kOut / kSub && packed.size(3) == kSub && packed.size(4) == kIn &&
                  packed.is_contiguous(),
              "packed must be a contiguous (blocks, 4, chunks, 4, 32) tensor");
  const int64_t blocks = packed.size(0), chunks = packed.size(2), in = input.size(-1);
  TORCH_CHECK(in > (chunks - 1) * kIn && in <= chunks * kIn, "input has ", in, " features; the weight takes ",
              chunks * kIn, " (padded)");
  TORCH_CHECK(out > (blocks - 1) * kOut && out <= blocks * kOut, "out = ", out, " does not match ", blocks, " blocks");
  const at::Tensor x = input.contiguous();
  auto sizes = x.sizes().vec();
  sizes.back() = out;
  at::Tensor y = at::empty(sizes, x.options());
  const int64_t rows = in ? x.numel() / in : 0, tail = in - (chunks - 1) * kIn;
  const Shape s{x.data_ptr<at::BFloat16>(), in, chunks,
                tail == kIn ? ~__mmask32(0) : static_cast<__mmask32>((1u << tail) - 1u), y.data_ptr<at::BFloat16>(),
                out};
  const auto* w = packed.data_ptr<at::BFloat16>();
  const int64_t block_size = chunks * kOut * kIn;
  at::parallel_for(0, blocks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      const at::BFloat16* block = w + b * block_size;
      int64_t m = 0;
      for (; m + 4 <= rows; m += 4) block_rows<4, 4>(s, block, b * kOut, m);
      for (; m + 2 <= rows; m += 2) block_rows<8, 2>(s, block, b * kOut, m);
      for (; m < rows; ++m) block_rows<16, 1>(s, block, b * kOut, m);
    }
  });
  return y;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(sead, lib) { lib.def("small_rows_linear(Tensor input, Tensor packed, int out) -> Tensor"); }

TORCH_LIBRARY_IMPL(sead, CPU, lib) { lib.impl("small_rows_linear", &small_rows_linear); }
