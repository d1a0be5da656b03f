// Every decoder layer of one decoding step in one call, for bf16 Llama-family models (SmolLM2) on CPUs with
// AVX512-BF16 (sead/models/decode_kernel.py builds it; sead/models/decode_step.py calls it up to `FUSED_ROWS` rows).
//
// Written with torch's operators, a step at few rows spends more time between the weights than reading them: about
// 35 operator calls a layer, each a few microseconds of dispatch, and the shared prompt's attention as batched
// matmuls of 3 query rows (about 90 us where reading its keys takes 10; measured 2026-11-27). Here one call runs
// all layers: the linears through the decoding linear kernel (small_rows_linear.h), each row's own positions
// through the single-query attention kernel, the shared prompt through the same kernel (or, from
// `prefix_matmul_rows` rows, two matmuls per key/value head for all rows at once), merged by their maxima, and the
// norms, rotary turn, cache write, residuals and SiLU as AVX-512 loops. Each elementwise step rounds to bf16 where
// transformers' does (the norm's statistics, softmax and SiLU's exponential in fp32), so the result differs from
// the operator path only by the order of sums and the exponential's last bits.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include "check.h"

#include "single_query_attention.h"
#include "small_rows_linear.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace {

using at::BFloat16;

inline BFloat16 bf(float v) { return BFloat16(v); }  // round to nearest even, as torch's bf16 results

struct Packed {  // a weight in small_rows_linear's layout
  const BFloat16* w;
  int64_t blocks, pairs;
};

Packed packed_weight(const at::Tensor& t, int64_t out, int64_t in, const char* name, size_t layer) {
  using namespace sead::small_rows;
  SEAD_CHECK(t.scalar_type() == at::kBFloat16 && t.dim() == 5 && t.size(2) == kGroups && t.size(3) == 16 &&
                 t.size(4) == 2 && t.is_contiguous(),
             name, "[", layer, "] must be a contiguous bf16 (blocks, pairs, 2, 16, 2) pack");
  const int64_t blocks = t.size(0), pairs = t.size(1);
  SEAD_CHECK(out > (blocks - 1) * kBlockOut && out <= blocks * kBlockOut && (in + 1) / 2 == pairs, name, "[", layer,
             "] is packed for another shape than ", out, " x ", in);
  return {t.data_ptr<BFloat16>(), blocks, pairs};
}

void linear(const std::vector<BFloat16>& x, int64_t rows, int64_t in, const Packed& w, std::vector<BFloat16>& y,
            int64_t out) {
  sead::small_rows::linear_rows(x.data(), rows, in, w.w, w.blocks, w.pairs, y.data(), out);
}

// 16 floats rounded to bf16 (nearest even, as torch's bf16 results), kept as bf16 or widened back to floats
inline __m256i bf16x16(__m512 v) { return reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v)); }
inline __m512 rounded(__m512 v) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bf16x16(v)), 16));
}
inline void store16(BFloat16* p, __m512 v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), bf16x16(v)); }

// Elementwise work over rows: one thread below this many rows (a parallel region costs more than it saves there)
constexpr int64_t kRowsPerThread = 8;

// transformers' LlamaRMSNorm: fp32 statistics, the normalised row rounded to bf16, then times the bf16 weight.
// Widths are multiples of 16 (checked by the caller).
void rms_norm(const std::vector<BFloat16>& x, int64_t rows, int64_t hidden, const BFloat16* weight, float eps,
              std::vector<BFloat16>& out) {
  at::parallel_for(0, rows, kRowsPerThread, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const BFloat16* row = x.data() + r * hidden;
      __m512 squares = _mm512_setzero_ps();
      for (int64_t i = 0; i < hidden; i += 16) {
        const __m512 v = sead::widen16(row + i);
        squares = _mm512_fmadd_ps(v, v, squares);
      }
      const __m512 inv = _mm512_set1_ps(1.f / std::sqrt(_mm512_reduce_add_ps(squares) / hidden + eps));
      for (int64_t i = 0; i < hidden; i += 16) {
        const __m512 normed = rounded(_mm512_mul_ps(sead::widen16(row + i), inv));
        store16(out.data() + r * hidden + i, _mm512_mul_ps(sead::widen16(weight + i), normed));
      }
    }
  });
}

// x = x + y, rounded as a bf16 add
void add_into(std::vector<BFloat16>& x, const std::vector<BFloat16>& y, int64_t n) {
  for (int64_t i = 0; i < n; i += 16)
    store16(x.data() + i, _mm512_add_ps(sead::widen16(x.data() + i), sead::widen16(y.data() + i)));
}

// act = silu(gate) * up, each rounded to bf16 as torch's F.silu and product are; gate_up (rows, 2 * inner)
void silu_mul(const std::vector<BFloat16>& gate_up, int64_t rows, int64_t inner, std::vector<BFloat16>& act) {
  at::parallel_for(0, rows, kRowsPerThread, [&](int64_t begin, int64_t end) {
    const __m512 one = _mm512_set1_ps(1.f);
    for (int64_t r = begin; r < end; ++r)
      for (int64_t i = 0; i < inner; i += 16) {
        const __m512 g = sead::widen16(gate_up.data() + r * 2 * inner + i);
        const __m512 e = sead::attention::exp16(_mm512_sub_ps(_mm512_setzero_ps(), g));
        const __m512 silu = _mm512_div_ps(g, _mm512_add_ps(one, e));
        const __m512 up = sead::widen16(gate_up.data() + r * 2 * inner + inner + i);
        store16(act.data() + r * inner + i, _mm512_mul_ps(rounded(silu), up));
      }
  });
}

// head (dim values) turned in place: x * cos + roll(x, dim / 2) * sin, sin's first half negated by the caller (the
// rotate-half form decode_step.py uses), each product and the sum rounded to bf16
void rotate(BFloat16* head, const BFloat16* cos, const BFloat16* sin, int64_t dim) {
  __m512 x[8];  // dim <= 128
  const int64_t chunks = dim / 16;
  for (int64_t c = 0; c < chunks; ++c) x[c] = sead::widen16(head + 16 * c);
  for (int64_t c = 0; c < chunks; ++c) {
    const __m512 a = rounded(_mm512_mul_ps(x[c], sead::widen16(cos + 16 * c)));
    const __m512 b = rounded(_mm512_mul_ps(x[(c + chunks / 2) % chunks], sead::widen16(sin + 16 * c)));
    store16(head + 16 * c, _mm512_add_ps(a, b));
  }
}

struct Step {  // the shapes of one call
  int64_t rows, hidden, heads, kv, dim, group, inner, width, capacity, prefix;
};

// The prefix's part of `layer` for every row: per key/value head the scores of all rows' query heads against the
// prefix's keys in one bf16 matmul (rounded to bf16 as attention.py's are), their exponentials against each query's
// own maximum in fp32, rounded to bf16 for one matmul with the values; into `parts` as a task would write them.
void prefix_by_matmul(const Step& s, const std::vector<BFloat16>& qkv, const at::Tensor& pk, const at::Tensor& pv,
                      float scale, std::vector<float>& parts, int64_t per, int64_t n_parts) {
  const int64_t queries = s.rows * s.group, gd = s.group * s.dim;
  for (int64_t h = 0; h < s.kv; ++h) {
    at::Tensor q = at::empty({queries, s.dim}, pk.options());
    for (int64_t r = 0; r < s.rows; ++r)
      std::copy_n(qkv.data() + r * s.width + h * gd, gd, q.data_ptr<BFloat16>() + r * gd);
    const at::Tensor scores = at::matmul(q, pk[0][h].transpose(0, 1)).contiguous();  // (queries, prefix) bf16
    at::Tensor weights = at::empty_like(scores);
    at::parallel_for(0, queries, 16, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const BFloat16* row = scores.data_ptr<BFloat16>() + i * s.prefix;
        BFloat16* w = weights.data_ptr<BFloat16>() + i * s.prefix;
        __m512 top = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
        for (int64_t j = 0; j < s.prefix; j += 16) {
          const __mmask16 m = s.prefix - j >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (s.prefix - j)) - 1u);
          top = _mm512_mask_max_ps(top, m, top, sead::widen16_masked(row + j, m));
        }
        const float mx = _mm512_reduce_max_ps(top);
        const __m512 shift = _mm512_set1_ps(mx), scl = _mm512_set1_ps(scale);
        __m512 total = _mm512_setzero_ps();
        for (int64_t j = 0; j < s.prefix; j += 16) {
          const __mmask16 m = s.prefix - j >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (s.prefix - j)) - 1u);
          const __m512 x = sead::widen16_masked(row + j, m);
          const __m512 e = sead::attention::exp16(_mm512_mul_ps(_mm512_sub_ps(x, shift), scl));
          total = _mm512_mask_add_ps(total, m, total, e);
          _mm256_mask_storeu_epi16(w + j, m, bf16x16(e));
        }
        const int64_t r = i / s.group, g = i % s.group;
        float* o = parts.data() + ((r * s.kv + h) * n_parts + 1) * per;
        o[gd + g] = mx;
        o[gd + s.group + g] = _mm512_reduce_add_ps(total);
      }
    });
    const at::Tensor out = at::matmul(weights, pv[0][h]).to(at::kFloat).contiguous();  // (queries, dim)
    const float* op = out.data_ptr<float>();
    for (int64_t r = 0; r < s.rows; ++r)
      std::copy_n(op + r * gd, gd, parts.data() + ((r * s.kv + h) * n_parts + 1) * per);
  }
}

// one layer's attention for every row: a task per (row, key/value head, part), part 0 each row's own positions
// (masked), part 1 the shared prefix (from `matmul_rows` rows by `prefix_by_matmul` instead: a task reads the
// prefix's keys once per row, a matmul once for all); merged by their maxima into
// `out` (rows, heads * dim) bf16
void attend(const Step& s, const std::vector<BFloat16>& qkv, const at::Tensor& keys, const at::Tensor& values,
            const at::Tensor* prefix_k, const at::Tensor* prefix_v, const bool* valid, const int64_t* first,
            const int64_t* last, float scale, int64_t matmul_rows, std::vector<float>& parts,
            std::vector<BFloat16>& out) {
  using sead::attention::Task;
  const int64_t n_parts = prefix_k ? 2 : 1, per = s.group * s.dim + 2 * s.group;  // out, m, l of one task
  const bool matmul_prefix = prefix_k && s.rows >= matmul_rows;
  if (matmul_prefix) prefix_by_matmul(s, qkv, *prefix_k, *prefix_v, scale, parts, per, n_parts);
  const int64_t tasks = s.rows * s.kv * n_parts;
  const auto* kp = keys.data_ptr<BFloat16>();
  const auto* vp = values.data_ptr<BFloat16>();
  at::parallel_for(0, tasks, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scratch;
    for (int64_t i = begin; i < end; ++i) {
      const int64_t part = i % n_parts, h = (i / n_parts) % s.kv, r = i / n_parts / s.kv;
      if (part == 1 && matmul_prefix) continue;
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
        t.k = prefix_k->data_ptr<BFloat16>() + h * prefix_k->stride(1);
        t.v = prefix_v->data_ptr<BFloat16>() + h * prefix_v->stride(1);
        t.ks = prefix_k->stride(2);
        t.vs = prefix_v->stride(2);
        t.last = s.prefix;
      }
      sead::attention::run_task_dim(t, s.dim, static_cast<int>(s.group), scale, scratch);
    }
  });
  const float neg_inf = -std::numeric_limits<float>::infinity();
  for (int64_t r = 0; r < s.rows; ++r)
    for (int64_t h = 0; h < s.kv; ++h)
      for (int64_t g = 0; g < s.group; ++g) {
        const float* own = parts.data() + (r * s.kv + h) * n_parts * per;
        const float* pre = n_parts == 2 ? own + per : nullptr;
        const float m_own = own[s.group * s.dim + g], l_own = own[s.group * s.dim + s.group + g];
        const float m_pre = pre ? pre[s.group * s.dim + g] : neg_inf;
        const float top = std::max(m_own, m_pre);
        // a part with nothing to attend has maximum -inf: weight 0 (and its output is zeros)
        const float w_own = m_own == neg_inf ? 0.f : std::exp((m_own - top) * scale);
        const float w_pre = m_pre == neg_inf ? 0.f : std::exp((m_pre - top) * scale);
        const float total = l_own * w_own + (pre ? pre[s.group * s.dim + s.group + g] * w_pre : 0.f);
        BFloat16* dst = out.data() + r * s.heads * s.dim + (h * s.group + g) * s.dim;
        for (int64_t d = 0; d < s.dim; ++d) {
          float v = own[g * s.dim + d] * w_own;
          if (pre) v += pre[g * s.dim + d] * w_pre;
          dst[d] = bf(v / total);
        }
      }
}

void check_list(at::TensorList list, size_t layers, const char* name) {
  SEAD_CHECK(list.size() == layers, name, " has ", list.size(), " tensors for ", layers, " layers");
}

// x (rows, hidden) bf16: the step's token embeddings; cos/sin (rows, dim) bf16, sin with its first half negated.
// Per layer: the norms' weights (hidden), the packs of q/k/v, o, gate/up and down (decode_kernel.pack_small_rows),
// the cache's keys/values (rows, kv, capacity, dim; this step's written at `column`), the shared prefix's
// (1, kv, prefix, dim) or no prefix lists. valid (rows, capacity) bool: the own positions each row attends, this
// step's included. From `prefix_matmul_rows` rows the prefix is attended by matmuls. -> the hidden state after the
// last layer (rows, hidden) bf16, before the final norm.
at::Tensor decode_layers(const at::Tensor& x_in, const at::Tensor& cos, const at::Tensor& sin, at::TensorList norm_in,
                         at::TensorList qkv_w, at::TensorList o_w, at::TensorList norm_post, at::TensorList gate_up_w,
                         at::TensorList down_w, at::TensorList keys, at::TensorList values, at::TensorList prefix_keys,
                         at::TensorList prefix_values, const at::Tensor& valid, int64_t column, int64_t heads,
                         int64_t kv_heads, int64_t inner, double eps, double scale, int64_t prefix_matmul_rows) {
  const size_t layers = norm_in.size();
  SEAD_CHECK(x_in.scalar_type() == at::kBFloat16 && x_in.dim() == 2, "x must be a (rows, hidden) bf16 tensor");
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
  SEAD_CHECK(s.hidden % 16 == 0 && inner % 16 == 0, "hidden (", s.hidden, ") and inner (", inner,
             ") widths must be multiples of 16");
  SEAD_CHECK(cos.scalar_type() == at::kBFloat16 && sin.scalar_type() == at::kBFloat16 && cos.is_contiguous() &&
                 sin.is_contiguous() && cos.numel() == s.rows * s.dim && sin.numel() == s.rows * s.dim,
             "cos and sin must be contiguous bf16 (rows, ", s.dim, ") tensors");
  SEAD_CHECK(valid.scalar_type() == at::kBool && valid.dim() == 2 && valid.size(0) == s.rows &&
                 valid.size(1) == s.capacity && valid.is_contiguous(),
             "valid must be a contiguous (rows, ", s.capacity, ") bool tensor");
  SEAD_CHECK(column >= 0 && column < s.capacity, "column ", column, " is outside the cache's ", s.capacity,
             " positions");
  std::vector<Packed> qkv_p, o_p, gu_p, down_p;
  for (size_t l = 0; l < layers; ++l) {
    for (const at::Tensor& t : {keys[l], values[l]})
      SEAD_CHECK(t.scalar_type() == at::kBFloat16 && t.dim() == 4 && t.size(0) == s.rows && t.size(1) == s.kv &&
                     t.size(2) == s.capacity && t.size(3) == s.dim && t.stride(3) == 1,
                 "keys/values[", l, "] must be bf16 (", s.rows, ", ", s.kv, ", ", s.capacity, ", ", s.dim,
                 ") with unit stride in the head dimension");
    if (has_prefix)
      for (const at::Tensor& t : {prefix_keys[l], prefix_values[l]})
        SEAD_CHECK(t.scalar_type() == at::kBFloat16 && t.dim() == 4 && t.size(0) == 1 && t.size(1) == s.kv &&
                       t.size(2) == s.prefix && t.size(3) == s.dim && t.stride(3) == 1,
                   "prefix keys/values[", l, "] must be bf16 (1, ", s.kv, ", ", s.prefix, ", ", s.dim, ")");
    for (const at::Tensor& t : {norm_in[l], norm_post[l]})
      SEAD_CHECK(t.scalar_type() == at::kBFloat16 && t.numel() == s.hidden && t.is_contiguous(), "norm weights[", l,
                 "] must be contiguous bf16 of ", s.hidden);
    qkv_p.push_back(packed_weight(qkv_w[l], s.width, s.hidden, "qkv", l));
    o_p.push_back(packed_weight(o_w[l], s.hidden, s.heads * s.dim, "o", l));
    gu_p.push_back(packed_weight(gate_up_w[l], 2 * inner, s.hidden, "gate_up", l));
    down_p.push_back(packed_weight(down_w[l], s.hidden, inner, "down", l));
  }
  const bool* vp = valid.data_ptr<bool>();
  std::vector<int64_t> first(s.rows), last(s.rows);
  for (int64_t r = 0; r < s.rows; ++r) sead::attention::valid_span(vp + r * s.capacity, s.capacity, first[r], last[r]);

  const int64_t rows = s.rows, hidden = s.hidden;
  const BFloat16* x_src = x0.data_ptr<BFloat16>();
  std::vector<BFloat16> x(x_src, x_src + rows * hidden), h(rows * hidden), qkv(rows * s.width),
      attn(rows * heads * s.dim), gate_up(rows * 2 * inner), act(rows * inner), y(rows * hidden);
  std::vector<float> parts(rows * s.kv * (has_prefix ? 2 : 1) * (s.group * s.dim + 2 * s.group));
  const auto* cp = cos.data_ptr<BFloat16>();
  const auto* sp = sin.data_ptr<BFloat16>();
  const float e = static_cast<float>(eps), sc = static_cast<float>(scale);
  for (size_t l = 0; l < layers; ++l) {
    rms_norm(x, rows, hidden, norm_in[l].data_ptr<BFloat16>(), e, h);
    linear(h, rows, hidden, qkv_p[l], qkv, s.width);
    auto* kp = keys[l].data_ptr<BFloat16>();
    auto* vvp = values[l].data_ptr<BFloat16>();
    at::parallel_for(0, rows, kRowsPerThread, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        BFloat16* row = qkv.data() + r * s.width;
        for (int64_t hd = 0; hd < heads + kv_heads; ++hd)
          rotate(row + hd * s.dim, cp + r * s.dim, sp + r * s.dim, s.dim);
        for (int64_t hd = 0; hd < kv_heads; ++hd) {  // this step's key and value into the cache at `column`
          BFloat16* kd = kp + r * keys[l].stride(0) + hd * keys[l].stride(1) + column * keys[l].stride(2);
          BFloat16* vd = vvp + r * values[l].stride(0) + hd * values[l].stride(1) + column * values[l].stride(2);
          std::copy_n(row + (heads + hd) * s.dim, s.dim, kd);
          std::copy_n(row + (heads + kv_heads + hd) * s.dim, s.dim, vd);
        }
      }
    });
    attend(s, qkv, keys[l], values[l], has_prefix ? &prefix_keys[l] : nullptr,
           has_prefix ? &prefix_values[l] : nullptr, vp, first.data(), last.data(), sc, prefix_matmul_rows, parts,
           attn);
    linear(attn, rows, heads * s.dim, o_p[l], y, hidden);
    add_into(x, y, rows * hidden);
    rms_norm(x, rows, hidden, norm_post[l].data_ptr<BFloat16>(), e, h);
    linear(h, rows, hidden, gu_p[l], gate_up, 2 * inner);
    silu_mul(gate_up, rows, inner, act);
    linear(act, rows, inner, down_p[l], y, hidden);
    add_into(x, y, rows * hidden);
  }
  at::Tensor result = at::empty({rows, hidden}, x0.options());
  std::copy(x.begin(), x.end(), result.data_ptr<BFloat16>());
  return result;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(sead, lib) {
  lib.def("decode_layers(Tensor x, Tensor cos, Tensor sin, Tensor[] norm_in, Tensor[] qkv, Tensor[] o, "
          "Tensor[] norm_post, Tensor[] gate_up, Tensor[] down, Tensor(a!)[] keys, Tensor(b!)[] values, "
          "Tensor[] prefix_keys, Tensor[] prefix_values, Tensor valid, int column, int heads, int kv_heads, "
          "int inner, float eps, float scale, int prefix_matmul_rows) -> Tensor");
}

TORCH_LIBRARY_IMPL(sead, CPU, lib) { lib.impl("decode_layers", &decode_layers); }
