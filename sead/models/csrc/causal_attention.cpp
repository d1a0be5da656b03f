// Causal attention of training forwards, forward and backward, bf16 on CPUs with AVX512-BF16
// (sead/models/decode_kernel.py builds it; sead/models/training_attention.py calls it).
//
// A training forward runs several sequences' own positions after a prompt they all share (the SOP prompt, from a
// cache). Here they come packed one after another in one row, without padding: query i of a segment sees the
// `prefix` shared positions and its own segment up to i, nothing of the other segments. torch's CPU flash kernel
// would get this as a boolean mask: it cannot skip the blocks above the diagonal or of other segments, reads the
// mask, and runs its backward at about a quarter of the machine's bf16 matmul rate (measured 2026-11-27). Here
// the mask is two numbers per segment (start and length): a query tile reads only the keys it sees, and every
// product is an AVX512-BF16 dot product with fp32 sums.
//
// Layout: each (segment, query head) is one task; the keys and values each (segment, key/value head) sees (the
// prefix's, then its own) are packed once for the query heads that share them: "pairs along dim" (16 keys x one
// bf16 pair of dims per register: a query's dot products with 16 keys) and "pairs along keys" (16 dims x two keys:
// weighted sums of key/value rows). Each tile of 16 queries computes its scores against every key it sees into a
// scratch row (two passes, no running rescale), the softmax in fp32, and the weighted values from the weights
// rounded to bf16, as torch's flash kernel rounds them.
// The backward recomputes a tile's weights from the saved log-sum-exp (P = exp(scale s - lse)), then
// dS = P (dP - D), D = rowsum(dO * O); the query's gradient is complete within its tile, the keys' and values'
// gradients are fp32 sums per task, returned per query head, the prefix's per segment (the caller sums them).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include "check.h"

#include "single_query_attention.h"  // exp16

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

namespace {

using at::BFloat16;
using sead::attention::exp16;

constexpr int kDim = 64;             // the head size served (SmolLM2's); others take torch's kernel
constexpr int kPairs = kDim / 2;     // bf16 pairs in a row
constexpr int kChunks = kDim / 16;   // fp32 registers in a row
constexpr int kTile = 16;            // query rows per tile: the keys' data is streamed once per tile
constexpr int kSub = 4;              // query rows per register tile
constexpr int64_t kKeyGranule = 64;  // keys are padded to this (4 blocks of 16 per register tile)
const float kNegInf = -std::numeric_limits<float>::infinity();

inline uint32_t word(const BFloat16* p) {
  uint32_t w;
  std::memcpy(&w, p, sizeof w);
  return w;
}
inline __m512bh bcast(uint32_t w) { return reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(w))); }
inline __m512bh load_words(const uint32_t* p) { return reinterpret_cast<__m512bh>(_mm512_loadu_si512(p)); }
inline uint32_t pair(BFloat16 lo, BFloat16 hi) {
  return static_cast<uint32_t>(lo.x) | (static_cast<uint32_t>(hi.x) << 16);
}
inline int64_t round_up(int64_t n, int64_t to) { return (n + to - 1) / to * to; }

// The key (or value) rows a segment sees, in its own numbering: the shared prefix's `prefix` rows, then its own.
struct Rows {
  const BFloat16* prefix;  // row j < prefix_rows at prefix + j * stride
  const BFloat16* own;     // row j >= prefix_rows at own + (j - prefix_rows) * stride
  int64_t prefix_rows, stride;
  const BFloat16* operator()(int64_t j) const { return j < prefix_rows ? prefix + j * stride : own + (j - prefix_rows) * stride; }
};

// rows x[0..n) "pairs along dim": dst[(j / 16) * kPairs * 16 + c * 16 + j % 16] = dims 2c, 2c+1 of row j; zero from
// n to npad
void pack_along_dim(const Rows& x, int64_t n, int64_t npad, uint32_t* dst) {
  for (int64_t j = 0; j < npad; ++j) {
    uint32_t* d = dst + (j / 16) * kPairs * 16 + j % 16;
    const BFloat16* row = j < n ? x(j) : nullptr;
    for (int c = 0; c < kPairs; ++c) d[c * 16] = row ? word(row + 2 * c) : 0u;
  }
}

// rows x[0..n) "pairs along rows": dst[(j / 2) * kDim + d] = (x[j][d], x[j + 1][d]); zero from n to npad (even)
void pack_along_rows(const Rows& x, int64_t n, int64_t npad, uint32_t* dst) {
  const BFloat16 zero(0.f);
  for (int64_t j = 0; j < npad; j += 2) {
    const BFloat16 *a = j < n ? x(j) : nullptr, *b = j + 1 < n ? x(j + 1) : nullptr;
    for (int d = 0; d < kDim; ++d) dst[(j / 2) * kDim + d] = pair(a ? a[d] : zero, b ? b[d] : zero);
  }
}

// s[r][j] = x_r . key_j for kSub rows and keys [0, keys) (a multiple of kKeyGranule), keys packed along dim
inline void dot_keys(const BFloat16* const* x, const uint32_t* packed, int64_t keys, float* s, int64_t ss) {
  for (int64_t b0 = 0; b0 < keys / 16; b0 += 4) {
    __m512 acc[kSub][4];
#pragma GCC unroll 4
    for (int r = 0; r < kSub; ++r)
#pragma GCC unroll 4
      for (int b = 0; b < 4; ++b) acc[r][b] = _mm512_setzero_ps();
    const uint32_t* kb = packed + b0 * kPairs * 16;
#pragma GCC unroll 2
    for (int c = 0; c < kPairs; ++c) {
      __m512bh k[4];
#pragma GCC unroll 4
      for (int b = 0; b < 4; ++b) k[b] = load_words(kb + (b * kPairs + c) * 16);
#pragma GCC unroll 4
      for (int r = 0; r < kSub; ++r) {
        const __m512bh q = bcast(word(x[r] + 2 * c));
#pragma GCC unroll 4
        for (int b = 0; b < 4; ++b) acc[r][b] = _mm512_dpbf16_ps(acc[r][b], q, k[b]);
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < kSub; ++r)
#pragma GCC unroll 4
      for (int b = 0; b < 4; ++b) _mm512_storeu_ps(s + r * ss + (b0 + b) * 16, acc[r][b]);
  }
}

// acc[r] = sum_j w[r][j] x_j for kSub rows of bf16 weights (pairs along keys), x packed along rows; keys even
inline void weigh_rows(const BFloat16* const* w, const uint32_t* packed, int64_t keys, __m512 acc[kSub][kChunks]) {
#pragma GCC unroll 4
  for (int r = 0; r < kSub; ++r)
#pragma GCC unroll 4
    for (int c = 0; c < kChunks; ++c) acc[r][c] = _mm512_setzero_ps();
  for (int64_t jp = 0; jp < keys / 2; ++jp) {
    __m512bh x[kChunks];
#pragma GCC unroll 4
    for (int c = 0; c < kChunks; ++c) x[c] = load_words(packed + jp * kDim + 16 * c);
#pragma GCC unroll 4
    for (int r = 0; r < kSub; ++r) {
      const __m512bh wv = bcast(word(w[r] + 2 * jp));
#pragma GCC unroll 4
      for (int c = 0; c < kChunks; ++c) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], wv, x[c]);
    }
  }
}

// acc[j] += sum_p wt[p][j] . rows[p] for the tile's kTile / 2 row pairs: wt[p * ws + j] the bf16 pair (w[2p][j],
// w[2p + 1][j]), rows[p * kChunks + c] the tile's rows 2p, 2p + 1 packed along rows; keys a multiple of 4
inline void accumulate_keys(const uint32_t* wt, int64_t ws, const __m512bh* rows, float* acc, int64_t keys) {
  constexpr int kRowPairs = kTile / 2;
  for (int64_t j0 = 0; j0 < keys; j0 += 4)
#pragma GCC unroll 2
    for (int h = 0; h < kChunks; h += 2) {
      __m512 a[4][2];
#pragma GCC unroll 4
      for (int jj = 0; jj < 4; ++jj)
#pragma GCC unroll 2
        for (int c = 0; c < 2; ++c) a[jj][c] = _mm512_loadu_ps(acc + (j0 + jj) * kDim + 16 * (h + c));
#pragma GCC unroll 8
      for (int p = 0; p < kRowPairs; ++p)
#pragma GCC unroll 4
        for (int jj = 0; jj < 4; ++jj) {
          const __m512bh w = bcast(wt[p * ws + j0 + jj]);
#pragma GCC unroll 2
          for (int c = 0; c < 2; ++c) a[jj][c] = _mm512_dpbf16_ps(a[jj][c], w, rows[p * kChunks + h + c]);
        }
#pragma GCC unroll 4
      for (int jj = 0; jj < 4; ++jj)
#pragma GCC unroll 2
        for (int c = 0; c < 2; ++c) _mm512_storeu_ps(acc + (j0 + jj) * kDim + 16 * (h + c), a[jj][c]);
    }
}

// the bf16 pairs (w[2p][j], w[2p + 1][j]) of fp32 rows w (stride ws) into wt[p * ws + j], keys a multiple of 16
inline void pair_rows(const float* w, int64_t ws, int rows, int64_t keys, uint32_t* wt) {
  const __m512i interleave = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7,
                                              22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  for (int p = 0; p < rows / 2; ++p)
    for (int64_t j = 0; j < keys; j += 16) {
      const __m512bh both = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(w + (2 * p + 1) * ws + j),
                                                _mm512_loadu_ps(w + 2 * p * ws + j));
      _mm512_storeu_si512(wt + p * ws + j, _mm512_permutexvar_epi16(interleave, reinterpret_cast<__m512i>(both)));
    }
}

// fp32 rows to bf16 rows, keys a multiple of 16
inline void round_rows(const float* w, int64_t ws, int rows, int64_t keys, BFloat16* out) {
  for (int r = 0; r < rows; ++r)
    for (int64_t j = 0; j < keys; j += 16)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + r * ws + j),
                          reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(_mm512_loadu_ps(w + r * ws + j))));
}

// the dot products of a tile's `rows` rows (x_i = xh + i * xs, from i0) with keys [0, keys), packed along dim, into
// sc (stride `most`)
inline void tile_dots(const BFloat16* xh, int64_t xs, int64_t i0, int rows, const uint32_t* packed, int64_t keys,
                      float* sc, int64_t most) {
  for (int r0 = 0; r0 < rows; r0 += kSub) {
    const BFloat16* x[kSub];
    for (int k = 0; k < kSub; ++k) x[k] = xh + (i0 + std::min(r0 + k, rows - 1)) * xs;
    dot_keys(x, packed, keys, sc + r0 * most, most);
  }
}

// keys a tile's queries see: query i0 + k sees [0, offset + i0 + k]; padded to the key granule
inline int64_t keys_seen(int64_t offset, int64_t i0, int rows) { return round_up(offset + i0 + rows, kKeyGranule); }

// scores of keys a query does not see -> -inf
inline void hide_future(float* sc, int64_t most, int rows, int64_t offset, int64_t i0, int64_t seen) {
  for (int k = 0; k < rows; ++k)
    for (int64_t j = offset + i0 + k + 1; j < seen; ++j) sc[k * most + j] = kNegInf;
}

// p = exp(scale * s - lse) in place over `keys` scores (the -inf ones give 0)
inline void weights_from(float* row, int64_t keys, float scale, float lse) {
  const __m512 sv = _mm512_set1_ps(scale), shift = _mm512_set1_ps(lse);
  for (int64_t j = 0; j < keys; j += 16)
    _mm512_storeu_ps(row + j, exp16(_mm512_fmsub_ps(_mm512_loadu_ps(row + j), sv, shift)));
}

// log(sum_j exp(scale * s_j)) of a row of scores
inline float log_sum_exp(const float* row, int64_t keys, float scale) {
  __m512 top = _mm512_set1_ps(kNegInf);
  for (int64_t j = 0; j < keys; j += 16) top = _mm512_max_ps(top, _mm512_loadu_ps(row + j));
  const float m = _mm512_reduce_max_ps(top) * scale;
  const __m512 sv = _mm512_set1_ps(scale), shift = _mm512_set1_ps(m);
  __m512 total = _mm512_setzero_ps();
  for (int64_t j = 0; j < keys; j += 16)
    total = _mm512_add_ps(total, exp16(_mm512_fmsub_ps(_mm512_loadu_ps(row + j), sv, shift)));
  return m + std::log(_mm512_reduce_add_ps(total));
}

inline void store_row(BFloat16* dst, const __m512* acc) {
#pragma GCC unroll 4
  for (int c = 0; c < kChunks; ++c)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 16 * c), reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(acc[c])));
}

// out + k * os = sum_j w[k][j] x_j for a tile's `rows` fp32 weight rows (stride `most`, rounded to bf16 into
// `rounded` first), x packed along rows
inline void weigh_tile(const float* w, int64_t most, int rows, int64_t seen, BFloat16* rounded, const uint32_t* x,
                       BFloat16* out, int64_t os) {
  round_rows(w, most, rows, seen, rounded);
  for (int r0 = 0; r0 < rows; r0 += kSub) {
    const BFloat16* wr[kSub];
    for (int k = 0; k < kSub; ++k) wr[k] = rounded + std::min(r0 + k, rows - 1) * most;
    __m512 acc[kSub][kChunks];
    weigh_rows(wr, x, seen, acc);
    for (int k = 0; k < kSub && r0 + k < rows; ++k) store_row(out + (r0 + k) * os, acc[k]);
  }
}

struct Shape {
  int64_t heads, kv_heads, queries, prefix, segments;
  const int64_t *start, *length;
};

// query (heads, queries, 64), key/value (kv heads, prefix + queries, 64): one packed row of segments after a shared
// prefix; starts/lengths: each segment's queries [start, start + length), in order, covering the row
Shape check(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& starts,
            const at::Tensor& lengths) {
  SEAD_CHECK(q.dim() == 3 && k.dim() == 3 && v.dim() == 3, "query, key and value must be 3-d (heads, positions, 64)");
  for (const auto* t : {&q, &k, &v}) {
    SEAD_CHECK(t->scalar_type() == at::kBFloat16, "causal_attention takes bf16 tensors");
    SEAD_CHECK(t->size(2) == kDim && t->stride(2) == 1, "causal_attention takes head size 64 with unit stride");
  }
  SEAD_CHECK(v.sizes() == k.sizes(), "key and value shapes differ");
  SEAD_CHECK(k.size(0) > 0 && q.size(0) % k.size(0) == 0, "query heads must be a multiple of key/value heads");
  SEAD_CHECK(k.size(1) >= q.size(1), "fewer key positions than queries");
  for (const auto* t : {&starts, &lengths})
    SEAD_CHECK(t->scalar_type() == at::kLong && t->dim() == 1 && t->is_contiguous() && t->size(0) == starts.size(0),
               "starts and lengths must be contiguous int64 tensors, one per segment");
  const Shape s{q.size(0), k.size(0), q.size(1), k.size(1) - q.size(1), starts.size(0), starts.data_ptr<int64_t>(),
                lengths.data_ptr<int64_t>()};
  int64_t next = 0;
  for (int64_t r = 0; r < s.segments; ++r) {
    SEAD_CHECK(s.start[r] == next && s.length[r] > 0, "segments must be non-empty and follow each other from 0");
    next += s.length[r];
  }
  SEAD_CHECK(next == s.queries, "the segments' lengths must add up to the queries (", next, " != ", s.queries, ")");
  return s;
}

// the rows of key/value head h that segment r sees
Rows rows_of(const at::Tensor& x, const Shape& s, int64_t r, int64_t h) {
  const BFloat16* base = x.data_ptr<BFloat16>() + h * x.stride(0);
  return {base, base + (s.prefix + s.start[r]) * x.stride(1), s.prefix, x.stride(1)};
}

// keys (or values) of every (segment, key/value head) packed by `pack` into one buffer, `per` words each
template <typename Pack>
std::vector<uint32_t> pack_all(const at::Tensor& x, const Shape& s, int64_t per, Pack pack) {
  std::vector<uint32_t> out(static_cast<size_t>(s.segments * s.kv_heads * per));
  at::parallel_for(0, s.segments * s.kv_heads, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t r = t / s.kv_heads, h = t % s.kv_heads, seen = s.prefix + s.length[r];
      pack(rows_of(x, s, r, h), seen, round_up(seen, kKeyGranule), out.data() + t * per);
    }
  });
  return out;
}

// a task per (segment, query head), segments interleaved so that each thread's contiguous share mixes long and
// short ones
template <typename Task>
void for_each_head(const Shape& s, Task task) {
  at::parallel_for(0, s.segments * s.heads, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) task(t % s.segments, t / s.segments);
  });
}

int64_t longest(const Shape& s) { return *std::max_element(s.length, s.length + s.segments); }

// -> (out (queries, heads, 64) bf16, lse (heads, queries) fp32). Query i of a segment sees the prefix and the
// segment's queries up to i.
std::tuple<at::Tensor, at::Tensor> causal_attention_forward(const at::Tensor& query, const at::Tensor& key,
                                                           const at::Tensor& value, const at::Tensor& starts,
                                                           const at::Tensor& lengths, double scale) {
  const Shape s = check(query, key, value, starts, lengths);
  at::Tensor out = at::empty({s.queries, s.heads, kDim}, query.options());
  at::Tensor lse = at::empty({s.heads, s.queries}, query.options().dtype(at::kFloat));
  if (s.segments == 0) return {out, lse};
  const int64_t most = round_up(s.prefix + longest(s), kKeyGranule), per = most * kPairs;
  const auto keys = pack_all(key, s, per, pack_along_dim);
  const auto values = pack_all(value, s, per, pack_along_rows);
  const float scl = static_cast<float>(scale);
  const int64_t group = s.heads / s.kv_heads;
  for_each_head(s, [&](int64_t r, int64_t h) {
    std::vector<float> sc(static_cast<size_t>(kTile * most));
    std::vector<BFloat16> w(static_cast<size_t>(kTile * most));
    const int64_t kv = r * s.kv_heads + h / group, n = s.length[r];
    const BFloat16* qh = query.data_ptr<BFloat16>() + h * query.stride(0) + s.start[r] * query.stride(1);
    float* lh = lse.data_ptr<float>() + h * s.queries + s.start[r];
    BFloat16* oh = out.data_ptr<BFloat16>() + (s.start[r] * s.heads + h) * kDim;
    for (int64_t i0 = 0; i0 < n; i0 += kTile) {
      const int rows = static_cast<int>(std::min<int64_t>(kTile, n - i0));
      const int64_t seen = keys_seen(s.prefix, i0, rows);
      tile_dots(qh, query.stride(1), i0, rows, keys.data() + kv * per, seen, sc.data(), most);
      hide_future(sc.data(), most, rows, s.prefix, i0, seen);
      for (int k = 0; k < rows; ++k) {
        lh[i0 + k] = log_sum_exp(sc.data() + k * most, seen, scl);
        weights_from(sc.data() + k * most, seen, scl, lh[i0 + k]);  // normalised: rounded to bf16 as such
      }
      weigh_tile(sc.data(), most, rows, seen, w.data(), values.data() + kv * per, oh + i0 * s.heads * kDim,
                 s.heads * kDim);
    }
  });
  return {out, lse};
}

// -> (d query (heads, queries, 64) bf16; d key and d value of the own positions (heads, queries, 64) and of the
// prefix per segment (segments, heads, prefix, 64), fp32, per query head: the caller sums each group and the
// segments' prefix parts)
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> causal_attention_backward(
    const at::Tensor& grad_out, const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
    const at::Tensor& out, const at::Tensor& lse, const at::Tensor& starts, const at::Tensor& lengths, double scale) {
  const Shape s = check(query, key, value, starts, lengths);
  SEAD_CHECK(grad_out.scalar_type() == at::kBFloat16 && out.scalar_type() == at::kBFloat16 &&
                 grad_out.sizes() == out.sizes() && out.dim() == 3 && out.size(0) == s.queries &&
                 out.size(1) == s.heads && out.size(2) == kDim && grad_out.stride(2) == 1 && out.stride(2) == 1,
             "grad_out and out must be bf16 (queries, heads, 64) with unit stride in the head dimension");
  SEAD_CHECK(lse.scalar_type() == at::kFloat && lse.is_contiguous() &&
                 lse.sizes() == at::IntArrayRef({s.heads, s.queries}),
             "lse must be the forward's contiguous fp32 (heads, queries)");
  auto f32 = query.options().dtype(at::kFloat);
  at::Tensor dq = at::empty({s.heads, s.queries, kDim}, query.options());
  at::Tensor dk = at::empty({s.heads, s.queries, kDim}, f32), dv = at::empty_like(dk);
  at::Tensor dk_prefix = at::empty({s.segments, s.heads, s.prefix, kDim}, f32), dv_prefix = at::empty_like(dk_prefix);
  if (s.segments == 0) return {dq, dk, dv, dk_prefix, dv_prefix};
  const int64_t most = round_up(s.prefix + longest(s), kKeyGranule), per = most * kPairs;
  const auto keys = pack_all(key, s, per, pack_along_dim);
  const auto keys_rows = pack_all(key, s, per, pack_along_rows);
  const auto values = pack_all(value, s, per, pack_along_dim);
  const float scl = static_cast<float>(scale);
  const int64_t group = s.heads / s.kv_heads;
  for_each_head(s, [&](int64_t r, int64_t h) {
    std::vector<float> p(static_cast<size_t>(kTile * most)), ds(static_cast<size_t>(kTile * most));
    std::vector<BFloat16> ds_rows(static_cast<size_t>(kTile * most));
    std::vector<uint32_t> p_pairs(static_cast<size_t>(kTile / 2 * most)), ds_pairs(p_pairs.size());
    std::vector<BFloat16> tile(static_cast<size_t>(kTile * kDim));
    std::vector<uint32_t> packed(kTile / 2 * kDim);
    __m512bh q_rows[kTile / 2 * kChunks], go_rows[kTile / 2 * kChunks];
    const int64_t kv = r * s.kv_heads + h / group, n = s.length[r], at0 = s.start[r];
    const BFloat16* qh = query.data_ptr<BFloat16>() + h * query.stride(0) + at0 * query.stride(1);
    const BFloat16* gh = grad_out.data_ptr<BFloat16>() + at0 * grad_out.stride(0) + h * grad_out.stride(1);
    const BFloat16* oh = out.data_ptr<BFloat16>() + at0 * out.stride(0) + h * out.stride(1);
    const float* lh = lse.data_ptr<float>() + h * s.queries + at0;
    BFloat16* dqh = dq.data_ptr<BFloat16>() + (h * s.queries + at0) * kDim;
    std::vector<float> dk_acc(static_cast<size_t>(most * kDim)), dv_acc(dk_acc.size());
    for (int64_t i0 = 0; i0 < n; i0 += kTile) {
      const int rows = static_cast<int>(std::min<int64_t>(kTile, n - i0));
      // P from the saved log-sum-exp; dP = dO . v_j; dS = P (dP - D), scaled for both products it enters
      const int64_t seen = keys_seen(s.prefix, i0, rows);
      tile_dots(qh, query.stride(1), i0, rows, keys.data() + kv * per, seen, p.data(), most);
      hide_future(p.data(), most, rows, s.prefix, i0, seen);
      tile_dots(gh, grad_out.stride(0), i0, rows, values.data() + kv * per, seen, ds.data(), most);
      for (int k = 0; k < rows; ++k) {
        const int64_t i = i0 + k;
        float* pr = p.data() + k * most;
        float* dr = ds.data() + k * most;
        weights_from(pr, seen, scl, lh[i]);
        float d = 0.f;
        for (int c = 0; c < kDim; ++c)
          d += static_cast<float>(gh[i * grad_out.stride(0) + c]) * static_cast<float>(oh[i * out.stride(0) + c]);
        const __m512 dd = _mm512_set1_ps(d), sv = _mm512_set1_ps(scl);
        for (int64_t j = 0; j < seen; j += 16) {
          const __m512 pj = _mm512_loadu_ps(pr + j);
          _mm512_storeu_ps(dr + j, _mm512_mul_ps(_mm512_mul_ps(pj, _mm512_sub_ps(_mm512_loadu_ps(dr + j), dd)), sv));
        }
      }
      for (int k = rows; k < kTile; ++k) {  // a short tile's missing rows weigh nothing
        std::fill_n(p.data() + k * most, seen, 0.f);
        std::fill_n(ds.data() + k * most, seen, 0.f);
      }
      // dq_i = sum_j dS_ij k_j (complete within the tile)
      weigh_tile(ds.data(), most, rows, seen, ds_rows.data(), keys_rows.data() + kv * per, dqh + i0 * kDim, kDim);
      // dk_j += sum_i dS_ij q_i, dv_j += sum_i P_ij dO_i: the tile's rows packed in pairs, the weights paired
      pair_rows(p.data(), most, kTile, seen, p_pairs.data());
      pair_rows(ds.data(), most, kTile, seen, ds_pairs.data());
      for (auto [src, stride, dst] : {std::tuple{qh, query.stride(1), q_rows}, std::tuple{gh, grad_out.stride(0), go_rows}}) {
        for (int k = 0; k < kTile; ++k)
          for (int c = 0; c < kDim; ++c) tile[k * kDim + c] = k < rows ? src[(i0 + k) * stride + c] : BFloat16(0.f);
        pack_along_rows(Rows{tile.data(), tile.data(), kTile, kDim}, kTile, kTile, packed.data());
        for (int m = 0; m < kTile / 2 * kChunks; ++m) dst[m] = load_words(packed.data() + 16 * m);
      }
      const int64_t touched = round_up(s.prefix + i0 + rows, 4);
      accumulate_keys(ds_pairs.data(), most, q_rows, dk_acc.data(), touched);
      accumulate_keys(p_pairs.data(), most, go_rows, dv_acc.data(), touched);
    }
    const int64_t before = s.prefix * kDim;
    std::copy_n(dk_acc.data(), before, dk_prefix.data_ptr<float>() + (r * s.heads + h) * before);
    std::copy_n(dv_acc.data(), before, dv_prefix.data_ptr<float>() + (r * s.heads + h) * before);
    std::copy_n(dk_acc.data() + before, n * kDim, dk.data_ptr<float>() + (h * s.queries + at0) * kDim);
    std::copy_n(dv_acc.data() + before, n * kDim, dv.data_ptr<float>() + (h * s.queries + at0) * kDim);
  });
  return {dq, dk, dv, dk_prefix, dv_prefix};
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(sead, lib) {
  lib.def("causal_attention_forward(Tensor query, Tensor key, Tensor value, Tensor starts, Tensor lengths, "
          "float scale) -> (Tensor, Tensor)");
  lib.def("causal_attention_backward(Tensor grad_out, Tensor query, Tensor key, Tensor value, Tensor out, "
          "Tensor lse, Tensor starts, Tensor lengths, float scale) -> (Tensor, Tensor, Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(sead, CPU, lib) {
  lib.impl("causal_attention_forward", &causal_attention_forward);
  lib.impl("causal_attention_backward", &causal_attention_backward);
}
