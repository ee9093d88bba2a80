// What a query's product with a key becomes before the softmax
// (docs/semantics.md sections 5.1 and 5.5 to 5.7), for every path of the
// dot product: the factor, the soft cap, ALiBi, a bias or a mask, and the
// sinks in the softmax's denominators. Private to the ops.
#ifndef ATTNSCORE_OPS_SCORE_FORM_H_
#define ATTNSCORE_OPS_SCORE_FORM_H_

#include <cstdint>

#include "attnscore/tensor.h"

namespace attnscore::ops {

// Where a path's rows sit in the multi-head op's (B, Hq, N, M) problem, for
// the options given per head, query or key: row i of group g of the path's
// entry b, scored against its key j, is entry batch0 + b, query head head0
// + g · head_per_group + i · head_per_row, query query0 + i · query_per_row,
// key key0 + j. (A head's dot product: rows are queries; the grouped row
// path's: rows are a K/V head's query heads, all at one query.)
struct RowPlace {
  int64_t batch0 = 0, head0 = 0, head_per_group = 0, head_per_row = 0;
  int64_t query0 = 0, query_per_row = 1, key0 = 0;
};

struct ScoreForm {
  // s = scale · q·k, then, with a soft cap c > 0, c · tanh(s / c)
  // (kernels::SoftCap).
  float scale;
  float softcap = 0.0f;  // 0: none
  // Then the terms (AddTerms): ALiBi's -slope_h · |p - j| with query q at p
  // = q + position_shift (M - N), the bias (B, Hq, N, M) by strides (0 along
  // a broadcast dim), and the mask's -Inf where its byte is 0.
  const float* slopes = nullptr;  // none; head h's at slopes[h · slopes_stride]
  int64_t slopes_stride = 0;
  TensorView<const float> bias = {};    // empty: none
  TensorView<const uint8_t> mask = {};  // empty: none
  int64_t position_shift = 0;
  // A window's left side as a term, where a path's keys start before it (a
  // cache's, read by whole key groups): keys j < p - window_left become
  // -Inf. -1: none.
  int64_t window_left = -1;
  // Each row's softmax with head h's sink logit at sinks[h · sinks_stride].
  const float* sinks = nullptr;  // none
  int64_t sinks_stride = 0;
  RowPlace place = {};

  // Whether the tile kernels, which keep their scores in registers, can run
  // this form: the factor alone.
  bool ScaleOnly() const { return softcap == 0.0f && sinks == nullptr && !HasTerms(); }
  bool HasTerms() const {
    return slopes != nullptr || !bias.empty() || !mask.empty() || window_left >= 0;
  }
  // Row (g, i)'s sink, or null.
  const float* Sink(int64_t g, int64_t i) const {
    return sinks ? sinks + Head(g, i) * sinks_stride : nullptr;
  }
  int64_t Head(int64_t g, int64_t i) const {
    return place.head0 + g * place.head_per_group + i * place.head_per_row;
  }
  // Adds the terms to row i of group g of entry b: x[t] is its score against
  // the path's key first_key + t, for t < count.
  void AddTerms(int64_t b, int64_t g, int64_t i, int64_t first_key, float* x, int64_t count) const;
  // The same form for a part of a head's problem (rows are queries): its
  // entry b, queries from `query`, keys from `key` as entry 0, row 0, key 0.
  ScoreForm Part(int64_t b, int64_t query, int64_t key) const {
    ScoreForm part = *this;
    part.place.batch0 += b;
    part.place.query0 += query;
    part.place.key0 += key;
    return part;
  }
};

}  // namespace attnscore::ops

#endif  // ATTNSCORE_OPS_SCORE_FORM_H_
