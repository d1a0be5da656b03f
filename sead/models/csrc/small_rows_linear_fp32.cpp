// y = x @ W.T in fp32 for the rows of a decoding step, on CPUs with AVX2 and FMA, as an operator
// (sead/models/decode_kernel.py builds and loads it; sead/models/decode_step.py calls it). The kernel itself, and
// why it is laid out as it is: small_rows_linear_fp32.h.
#include <ATen/ATen.h>
#include <torch/library.h>

#include "check.h"

#include "small_rows_linear_fp32.h"

#include <cstdint>

namespace {

using namespace sead::small_rows_fp32;

// x (..., in) fp32; packed (blocks, in, 16) fp32 (decode_kernel.pack_small_rows_fp32); out: output features
at::Tensor small_rows_linear_fp32(const at::Tensor& input, const at::Tensor& packed, int64_t out) {
  SEAD_CHECK(input.scalar_type() == at::kFloat && packed.scalar_type() == at::kFloat,
             "small_rows_linear_fp32 takes fp32 tensors");
  SEAD_CHECK(packed.dim() == 3 && packed.size(2) == kBlockOut && packed.is_contiguous(),
             "packed must be a contiguous (blocks, in, 16) tensor");
  const int64_t blocks = packed.size(0), in = input.size(-1);
  SEAD_CHECK(packed.size(1) == in, "input has ", in, " features; the weight takes ", packed.size(1));
  SEAD_CHECK(out > (blocks - 1) * kBlockOut && out <= blocks * kBlockOut, "out = ", out, " does not match ", blocks,
             " blocks");
  const at::Tensor x = input.contiguous();
  auto sizes = x.sizes().vec();
  sizes.back() = out;
  at::Tensor y = at::empty(sizes, x.options());
  const int64_t rows = in ? x.numel() / in : 0;
  linear_rows(x.data_ptr<float>(), rows, in, packed.data_ptr<float>(), blocks, y.data_ptr<float>(), out);
  return y;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(sead, lib) { lib.def("small_rows_linear_fp32(Tensor input, Tensor packed, int out) -> Tensor"); }

TORCH_LIBRARY_IMPL(sead, CPU, lib) { lib.impl("small_rows_linear_fp32", &small_rows_linear_fp32); }
