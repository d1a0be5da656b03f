// Every decoder layer of one decoding step in one call, for fp32 Llama-family models (SmolLM2) on CPUs with AVX2 and
// FMA (sead/models/decode_kernel.py builds it; sead/models/decode_step.py calls it up to `FUSED_ROWS_FP32` rows).
// The fp32 counterpart of decode_layers.cpp, for the CPUs without AVX512-BF16, where SEAD computes in fp32.
//
// Written with torch's operators, a step at few rows spends more time between the weights than reading them: about
// 35 operator calls a layer, each a few microseconds of dispatch and a parallel region whose threads must all meet.
// Here one call runs all layers: the linears through the fp32 decoding linear kernel (small_rows_linear_fp32.h), the
// attention through the fp32 single-query kernel (single_query_attention_fp32.h) over each row's own positions and
// over pieces of the shared prefix (merged by their maxima), and the norms, rotary turn, cache write, residuals and
// SiLU as AVX2 loops. All in fp32, as transformers computes an fp32 model: the result differs from the operator path
// only by the order of sums and the exponential's last bits.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include "check.h"

#include "single_query_attention_fp32.h"
#include "small_rows_linear_fp32.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace {

using sead::fp32::kLanes;
using Floats = std::vector<float>;

constexpr int64_t kPiece = 256;         // prefix positions per attention task
constexpr int64_t kRowsPerThread = 8;   // elementwise work over rows: one thread below this many rows

struct Packed {  // a weight in small_rows_linear_fp32's layout
  const float* w;
  int64_t blocks;
};

Packed packed_weight(const at::Tensor& t, int64_t out, int64_t in, const char* name, size_t layer) {
  using sead::small_rows_fp32::kBlockOut;
  SEAD_CHECK(t.scalar_type() == at::kFloat && t.dim() == 3 && t.size(2) == kBlockOut && t.is_contiguous(), name, "[",
             layer, "] must be a contiguous fp32 (blocks, in, 16) pack");
  const int64_t blocks = t.size(0);
  SEAD_CHECK(out > (blocks - 1) * kBlockOut && out <= blocks * kBlockOut && t.size(1) == in, name, "[", layer,
             "] is packed for another shape than ", out, " x ", in);
  return {t.data_ptr<float>(), blocks};
}

void linear(const Floats& x, int64_t rows, int64_t in, const Packed& w, Floats& y, int64_t out) {
  sead::small_rows_fp32::linear_rows(x.data(), rows, in, w.w, w.blocks, y.data(), out);
}

// transformers' LlamaRMSNorm in fp32: x / sqrt(mean(x^2) + eps), times the weight. Widths are multiples of 8.
void rms_norm(const Floats& x, int64_t rows, int64_t hidden, const float* weight, float eps, Floats& out) {
  at::parallel_for(0, rows, kRowsPerThread, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* row = x.data() + r * hidden;
      __m256 squares = _mm256_setzero_ps();
      for (int64_t i = 0; i < hidden; i += kLanes) {
        const __m256 v = _mm256_loadu_ps(row + i);
        squares = _mm256_fmadd_ps(v, v, squares);
      }
      const __m256 inv = _mm256_set1_ps(1.f / std::sqrt(sead::fp32::sum8(squares) / hidden + eps));
      for (int64_t i = 0; i < hidden; i += kLanes)
        _mm256_storeu_ps(out.data() + r * hidden + i,
                         _mm256_mul_ps(_mm256_loadu_ps(weight + i), _mm256_mul_ps(_mm256_loadu_ps(row + i), inv)));
    }
  });
}

void add_into(Floats& x, const Floats& y, int64_t n) {
  for (int64_t i = 0; i < n; i += kLanes)
    _mm256_storeu_ps(x.data() + i, _mm256_add_ps(_mm256_loadu_ps(x.data() + i), _mm256_loadu_ps(y.data() + i)));
}

// act = silu(gate) * up; gate_up (rows, 2 * inner)
void silu_mul(const Floats& gate_up, int64_t rows, int64_t inner, Floats& act) {
  at::parallel_for(0, rows, kRowsPerThread, [&](int64_t begin, int64_t end) {
    const __m256 one = _mm256_set1_ps(1.f);
    for (int64_t r = begin; r < end; ++r)
      for (int64_t i = 0; i < inner; i += kLanes) {
        const __m256 g = _mm256_loadu_ps(gate_up.data() + r * 2 * inner + i);
        const __m256 e = sead::fp32::exp8(_mm256_sub_ps(_mm256_setzero_ps(), g));
        const __m256 up = _mm256_loadu_ps(gate_up.data() + r * 2 * inner + inner + i);
        _mm256_storeu_ps(act.data() + r * inner + i, _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(one, e)), up));
      }
  });
}

// head (dim values) turned in place: x * cos + roll(x, dim / 2) * sin, sin's first half negated by the caller (the
// rotate-half form decode_step.py uses)
void rotate(float* head, const float* cos, const float* sin, int64_t dim) {
  __m256 x[16];  // dim <= 128
  const int64_t chunks = dim / kLanes;
  for (int64_t c = 0; c < chunks; ++c) x[c] = _mm256_loadu_ps(head + kLanes * c);
  for (int64_t c = 0; c < chunks; ++c) {
    const __m256 a = _mm256_mul_ps(x[c], _mm256_loadu_ps(cos + kLanes * c));
    const __m256 b = _mm256_mul_ps(x[(c + chunks / 2) % chunks], _mm256_loadu_ps(sin + kLanes * c));
    _mm256_storeu_ps(head + kLanes * c, _mm256_add_ps(a, b));
  }
}

struct Step {  // the shapes of one call
  int64_t rows, hidden, heads, kv, dim, group, inner, width, capacity, prefix;
};

// One layer's attention for every row: a task per (row, key/value head, part); part 0 is the row's own positions
// (masked), parts 1.. the shared prefix in pieces of `kPiece` positions (so that one row's prefix spreads over the
// threads); merged by their maxima into `out` (rows, heads * dim).
void attend(const Step& s, const Floats& qkv, const at::Tensor& keys, const at::Tensor& values,
            const at::Tensor* prefix_k, const at::Tensor* prefix_v, const bool* valid, const int64_t* first,
            const int64_t* last, float scale, Floats& parts, Floats& out) {
  using sead::attention_fp32::Task;
  const int64_t pieces = prefix_k ? (s.prefix + kPiece - 1) / kPiece : 0, n_parts = 1 + pieces;
  const int64_t per = s.group * s.dim + 2 * s.group;  // out, m, l of one task
  const int64_t tasks = s.rows * s.kv * n_parts;
  parts.resize(tasks * per);
  const auto* kp = keys.data_ptr<float>();
  const auto* vp = values.data_ptr<float>();
  at::parallel_for(0, tasks, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scratch;
    for (int64_t i = begin; i < end; ++i) {
      const int64_t part = i % n_parts, h = (i / n_parts) % s.kv, r = i / n_parts / s.kv;
      float* o = parts.data() + i * per;
      Task t{qkv.data() + r * s.width + h * s.group * s.dim, nullptr, nullptr, 0, 0, 0, 0, nullptr, o,
             o + s.group * s.dim, o + s.group * s.dim + s.group};
      if (part == 0) {
        t.k = kp + r * keys.stride(0) + h * keys.stride(1);
        t.v = vp + r * values.stride(0) + h * values.stride(1);
        t.ks = keys.stride(2);
        t.vs = values.stride(2);
        t.first = first[r];
        t.last = last[r];
        t.mask = valid + r * s.capacity;
      } else {
        t.k = prefix_k->data_ptr<float>() + h * prefix_k->stride(1);
        t.v = prefix_v->data_ptr<float>() + h * prefix_v->stride(1);
        t.ks = prefix_k->stride(2);
        t.vs = prefix_v->stride(2);
        t.first = (part - 1) * kPiece;
        t.last = std::min(s.prefix, part * kPiece);
      }
      sead::attention_fp32::run_task_dim(t, s.dim, static_cast<int>(s.group), scale, scratch);
    }
  });
  const float neg_inf = -std::numeric_limits<float>::infinity();
  for (int64_t r = 0; r < s.rows; ++r)
    for (int64_t h = 0; h < s.kv; ++h) {
      const float* base = parts.data() + (r * s.kv + h) * n_parts * per;
      for (int64_t g = 0; g < s.group; ++g) {
        float top = neg_inf;
        for (int64_t p = 0; p < n_parts; ++p) top = std::max(top, base[p * per + s.group * s.dim + g]);
        float* dst = out.data() + r * s.heads * s.dim + (h * s.group + g) * s.dim;
        std::fill_n(dst, s.dim, 0.f);
        float total = 0.f;
        for (int64_t p = 0; p < n_parts; ++p) {
          const float m = base[p * per + s.group * s.dim + g];
          if (m == neg_inf) continue;  // a part with nothing to attend weighs 0
          const float w = std::exp((m - top) * scale);
          total += base[p * per + s.group * s.dim + s.group + g] * w;
          const float* o = base + p * per + g * s.dim;
          for (int64_t d = 0; d < s.dim; ++d) dst[d] += o[d] * w;
        }
        for (int64_t d = 0; d < s.dim; ++d) dst[d] /= total;
      }
    }
}

void check_list(at::TensorList list, size_t layers, const char* name) {
  SEAD_CHECK(list.size() == layers, name, " has ", list.size(), " tensors for ", layers, " layers");
}

// x (rows, hidden) fp32: the step's token embeddings; cos/sin (rows, dim) fp32, sin with its first half negated.
// Per layer: the norms' weights (hidden), the packs of q/k/v, o, gate/up and down (decode_kernel.pack_small_rows_fp32),
// the cache's keys/values (rows, kv, capacity, dim; this step's written at `column`), the shared prefix's
// (1, kv, prefix, dim) or no prefix lists. valid (rows, capacity) bool: the own positions each row attends, this
// step's included. -> the hidden state after the last layer (rows, hidden) fp32, before the final norm.
at::Tensor decode_layers_fp32(const at::Tensor& x_in, const at::Tensor& cos, const at::Tensor& sin,
                              at::TensorList norm_in, at::TensorList qkv_w, at::TensorList o_w, at::TensorList norm_post,
                              at::TensorList gate_up_w, at::TensorList down_w, at::TensorList keys,
                              at::TensorList values, at::TensorList prefix_keys, at::TensorList prefix_values,
                              const at::Tensor& valid, int64_t column, int64_t heads, int64_t kv_heads, int64_t inner,
                              double eps, double scale) {
  const size_t layers = norm_in.size();
  SEAD_CHECK(x_in.scalar_type() == at::kFloat && x_in.dim() == 2, "x must be a (rows, hidden) fp32 tensor");
  SEAD_CHECK(kv_heads > 0 && heads % kv_heads == 0, heads, " query heads do not group over ", kv_heads,
             " key/value heads");
  for (auto [list, name] : {std::pair{qkv_w, "qkv"}, {o_w, "o"}, {norm_post, "norm_post"}, {gate_up_w, "gate_up"},
                            {down_w, "down"}, {keys, "keys"}, {values, "values"}})
    check_list(list, layers, name);
  const bool has_prefix = !prefix_keys.empty();
  if (has_prefix) {
    check_list(prefix_keys, layers, "prefix_keys");
    check_list(prefix_values, layers, "prefix_values");
  }
  SEAD_CHECK(layers > 0, "no layers");
  const at::Tensor x0 = x_in.contiguous();
  Step s{x0.size(0), x0.size(1), heads, kv_heads, keys[0].size(3), heads / kv_heads, inner, 0, keys[0].size(2), 0};
  s.width = (heads + 2 * kv_heads) * s.dim;
  s.prefix = has_prefix ? prefix_keys[0].size(2) : 0;
  SEAD_CHECK(s.dim == 64 || s.dim == 128, "head dimension must be 64 or 128, not ", s.dim);
  SEAD_CHECK(s.hidden % kLanes == 0 && inner % kLanes == 0, "hidden (", s.hidden, ") and inner (", inner,
             ") widths must be multiples of 8");
  SEAD_CHECK(cos.scalar_type() == at::kFloat && sin.scalar_type() == at::kFloat && cos.is_contiguous() &&
                 sin.is_contiguous() && cos.numel() == s.rows * s.dim && sin.numel() == s.rows * s.dim,
             "cos and sin must be contiguous fp32 (rows, ", s.dim, ") tensors");
  SEAD_CHECK(valid.scalar_type() == at::kBool && valid.dim() == 2 && valid.size(0) == s.rows &&
                 valid.size(1) == s.capacity && valid.is_contiguous(),
             "valid must be a contiguous (rows, ", s.capacity, ") bool tensor");
  SEAD_CHECK(column >= 0 && column < s.capacity, "column ", column, " is outside the cache's ", s.capacity,
             " positions");
  std::vector<Packed> qkv_p, o_p, gu_p, down_p;
  for (size_t l = 0; l < layers; ++l) {
    for (const at::Tensor& t : {keys[l], values[l]})
      SEAD_CHECK(t.scalar_type() == at::kFloat && t.dim() == 4 && t.size(0) == s.rows && t.size(1) == s.kv &&
                     t.size(2) == s.capacity && t.size(3) == s.dim && t.stride(3) == 1,
                 "keys/values[", l, "] must be fp32 (", s.rows, ", ", s.kv, ", ", s.capacity, ", ", s.dim,
                 ") with unit stride in the head dimension");
    if (has_prefix)
      for (const at::Tensor& t : {prefix_keys[l], prefix_values[l]})
        SEAD_CHECK(t.scalar_type() == at::kFloat && t.dim() == 4 && t.size(0) == 1 && t.size(1) == s.kv &&
                       t.size(2) == s.prefix && t.size(3) == s.dim && t.stride(3) == 1,
                   "prefix keys/values[", l, "] must be fp32 (1, ", s.kv, ", ", s.prefix, ", ", s.dim, ")");
    for (const at::Tensor& t : {norm_in[l], norm_post[l]})
      SEAD_CHECK(t.scalar_type() == at::kFloat && t.numel() == s.hidden && t.is_contiguous(), "norm weights[", l,
                 "] must be contiguous fp32 of ", s.hidden);
    qkv_p.push_back(packed_weight(qkv_w[l], s.width, s.hidden, "qkv", l));
    o_p.push_back(packed_weight(o_w[l], s.hidden, s.heads * s.dim, "o", l));
    gu_p.push_back(packed_weight(gate_up_w[l], 2 * inner, s.hidden, "gate_up", l));
    down_p.push_back(packed_weight(down_w[l], s.hidden, inner, "down", l));
  }
  const bool* vp = valid.data_ptr<bool>();
  std::vector<int64_t> first(s.rows), last(s.rows);
  for (int64_t r = 0; r < s.rows; ++r) sead::valid_span(vp + r * s.capacity, s.capacity, first[r], last[r]);

  const int64_t rows = s.rows, hidden = s.hidden;
  const float* x_src = x0.data_ptr<float>();
  Floats x(x_src, x_src + rows * hidden), h(rows * hidden), qkv(rows * s.width), attn(rows * heads * s.dim),
      gate_up(rows * 2 * inner), act(rows * inner), y(rows * hidden), parts;
  const auto* cp = cos.data_ptr<float>();
  const auto* sp = sin.data_ptr<float>();
  const float e = static_cast<float>(eps), sc = static_cast<float>(scale);
  for (size_t l = 0; l < layers; ++l) {
    rms_norm(x, rows, hidden, norm_in[l].data_ptr<float>(), e, h);
    linear(h, rows, hidden, qkv_p[l], qkv, s.width);
    auto* kp = keys[l].data_ptr<float>();
    auto* vvp = values[l].data_ptr<float>();
    at::parallel_for(0, rows, kRowsPerThread, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        float* row = qkv.data() + r * s.width;
        for (int64_t hd = 0; hd < heads + kv_heads; ++hd)
          rotate(row + hd * s.dim, cp + r * s.dim, sp + r * s.dim, s.dim);
        for (int64_t hd = 0; hd < kv_heads; ++hd) {  // this step's key and value into the cache at `column`
          float* kd = kp + r * keys[l].stride(0) + hd * keys[l].stride(1) + column * keys[l].stride(2);
          float* vd = vvp + r * values[l].stride(0) + hd * values[l].stride(1) + column * values[l].stride(2);
          std::copy_n(row + (heads + hd) * s.dim, s.dim, kd);
          std::copy_n(row + (heads + kv_heads + hd) * s.dim, s.dim, vd);
        }
      }
    });
    attend(s, qkv, keys[l], values[l], has_prefix ? &prefix_keys[l] : nullptr,
           has_prefix ? &prefix_values[l] : nullptr, vp, first.data(), last.data(), sc, parts, attn);
    linear(attn, rows, heads * s.dim, o_p[l], y, hidden);
    add_into(x, y, rows * hidden);
    rms_norm(x, rows, hidden, norm_post[l].data_ptr<float>(), e, h);
    linear(h, rows, hidden, gu_p[l], gate_up, 2 * inner);
    silu_mul(gate_up, rows, inner, act);
    linear(act, rows, inner, down_p[l], y, hidden);
    add_into(x, y, rows * hidden);
  }
  at::Tensor result = at::empty({rows, hidden}, x0.options());
  std::copy(x.begin(), x.end(), result.data_ptr<float>());
  return result;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(sead, lib) {
  lib.def("decode_layers_fp32(Tensor x, Tensor cos, Tensor sin, Tensor[] norm_in, Tensor[] qkv, Tensor[] o, "
          "Tensor[] norm_post, Tensor[] gate_up, Tensor[] down, Tensor(a!)[] keys, Tensor(b!)[] values, "
          "Tensor[] prefix_keys, Tensor[] prefix_values, Tensor valid, int column, int heads, int kv_heads, "
          "int inner, float eps, float scale) -> Tensor");
}

TORCH_LIBRARY_IMPL(sead, CPU, lib) { lib.impl("decode_layers_fp32", &decode_layers_fp32); }
