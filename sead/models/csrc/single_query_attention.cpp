// Single-query attention over each row's own keys and values, as an operator (sead/models/decode_kernel.py builds
// and loads it; sead/models/attention.py calls it). The kernel itself, and why it is laid out as it is:
// single_query_attention.h.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include "check.h"

#include "single_query_attention.h"

#include <cstdint>
#include <vector>

namespace {

using namespace sead::attention;

// query (rows, kv heads, group, dim) bf16; key/value (rows, kv heads, positions, dim) bf16 with unit stride in
// dim; valid (rows, positions) bool or an empty tensor. -> (out (rows, kv, group, dim), m, l (rows, kv, group)) fp32
std::tuple<at::Tensor, at::Tensor, at::Tensor> single_query_attention(
    const at::Tensor& query, const at::Tensor& key, const at::Tensor& value, const at::Tensor& valid, double scale) {
  SEAD_CHECK(query.dim() == 4 && key.dim() == 4 && value.dim() == 4, "query, key and value must be 4-d");
  SEAD_CHECK(query.scalar_type() == at::kBFloat16 && key.scalar_type() == at::kBFloat16 &&
                 value.scalar_type() == at::kBFloat16,
             "single_query_attention takes bf16 tensors");
  const int64_t rows = query.size(0), kv = query.size(1), group = query.size(2), dim = query.size(3);
  const int64_t positions = key.size(2);
  SEAD_CHECK(key.size(0) == rows && key.size(1) == kv && key.size(3) == dim, "key shape does not match query");
  SEAD_CHECK(value.sizes() == key.sizes(), "value shape does not match key");
  SEAD_CHECK(key.stride(3) == 1 && value.stride(3) == 1, "key/value need unit stride in the head dimension");
  SEAD_CHECK(dim == 64 || dim == 128, "head dimension must be 64 or 128, not ", dim);
  const bool masked = valid.numel() > 0;
  SEAD_CHECK(!masked || (valid.scalar_type() == at::kBool && valid.dim() == 2 && valid.size(0) == rows &&
                         valid.size(1) == positions && valid.is_contiguous()),
             "valid must be a contiguous (rows, positions) bool tensor");
  const at::Tensor q = query.contiguous();
  auto f32 = query.options().dtype(at::kFloat);
  at::Tensor out = at::empty({rows, kv, group, dim}, f32);
  at::Tensor m = at::empty({rows, kv, group}, f32), l = at::empty({rows, kv, group}, f32);
  std::vector<int64_t> first(rows, 0), last(rows, positions);
  if (masked) {
    const bool* v = valid.data_ptr<bool>();
    for (int64_t r = 0; r < rows; ++r) valid_span(v + r * positions, positions, first[r], last[r]);
  }
  const auto* qp = q.data_ptr<at::BFloat16>();
  const auto* kp = key.data_ptr<at::BFloat16>();
  const auto* vp = value.data_ptr<at::BFloat16>();
  const bool* mp = masked ? valid.data_ptr<bool>() : nullptr;
  float *op = out.data_ptr<float>(), *mm = m.data_ptr<float>(), *lp = l.data_ptr<float>();
  const float s = static_cast<float>(scale);
  at::parallel_for(0, rows * kv, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scratch;
    for (int64_t i = begin; i < end; ++i) {
      const int64_t r = i / kv, h = i % kv;
      Task t{qp + i * group * dim,
             kp + r * key.stride(0) + h * key.stride(1),
             vp + r * value.stride(0) + h * value.stride(1),
             key.stride(2),
             value.stride(2),
             first[r],
             last[r],
             mp ? mp + r * positions : nullptr,
             op + i * group * dim,
             mm + i * group,
             lp + i * group};
      run_task_dim(t, dim, static_cast<int>(group), s, scratch);
    }
  });
  return {out, m, l};
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(sead, lib) {
  lib.def("single_query_attention(Tensor query, Tensor key, Tensor value, Tensor valid, float scale) -> "
          "(Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(sead, CPU, lib) { lib.impl("single_query_attention", &single_query_attention); }
