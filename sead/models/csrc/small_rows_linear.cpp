// y = x @ W.T in bf16 (fp32 sums) for the rows of a decoding step, on CPUs with AVX512-BF16, as an operator
// (sead/models/decode_kernel.py builds and loads it; sead/models/decode_step.py calls it). The kernel itself, and
// why it is laid out as it is: small_rows_linear.h.
#include <ATen/ATen.h>
#include <torch/library.h>

#include "check.h"

#include "small_rows_linear.h"

#include <cstdint>

namespace {

using namespace sead::small_rows;

// x (..., in) bf16; packed (blocks, pairs, 2, 16, 2) bf16 (decode_kernel.pack_small_rows); out: output features
at::Tensor small_rows_linear(const at::Tensor& input, const at::Tensor& packed, int64_t out) {
  SEAD_CHECK(input.scalar_type() == at::kBFloat16 && packed.scalar_type() == at::kBFloat16,
             "small_rows_linear takes bf16 tensors");
  SEAD_CHECK(packed.dim() == 5 && packed.size(2) == kGroups && packed.size(3) == 16 && packed.size(4) == 2 &&
                 packed.is_contiguous(),
             "packed must be a contiguous (blocks, pairs, 2, 16, 2) tensor");
  const int64_t blocks = packed.size(0), pairs = packed.size(1), in = input.size(-1);
  SEAD_CHECK((in + 1) / 2 == pairs, "input has ", in, " features; the weight takes ", 2 * pairs, " (padded)");
  SEAD_CHECK(out > (blocks - 1) * kBlockOut && out <= blocks * kBlockOut, "out = ", out, " does not match ", blocks,
             " blocks");
  const at::Tensor x = input.contiguous();
  auto sizes = x.sizes().vec();
  sizes.back() = out;
  at::Tensor y = at::empty(sizes, x.options());
  const int64_t rows = in ? x.numel() / in : 0;
  linear_rows(x.data_ptr<at::BFloat16>(), rows, in, packed.data_ptr<at::BFloat16>(), blocks, pairs,
              y.data_ptr<at::BFloat16>(), out);
  return y;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(sead, lib) { lib.def("small_rows_linear(Tensor input, Tensor packed, int out) -> Tensor"); }

TORCH_LIBRARY_IMPL(sead, CPU, lib) { lib.impl("small_rows_linear", &small_rows_linear); }
