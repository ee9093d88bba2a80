#include "ops/dot_product.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "api/call_scope.h"
#include "api/checks.h"
#include "api/valid_lens.h"
#include "matmul/matmul.h"
#include "ops/masked_softmax.h"

namespace attnscore::ops {
namespace {

constexpr const char* kOp = "DotProductAttention";

struct Plans {
  std::shared_ptr<const matmul::Plan> scores, mix;
};

// Consecutive batch entries that need the same matmul widths, so one batched
// oneDNN call serves them all.
struct Group {
  int64_t first = 0, count = 0;
  // Key columns of Q Kᵀ: the longest valid length among the group's queries.
  // Keys past every query's length are never computed.
  int64_t score_width = 0;
  // Key columns of W V: score_width, or all M when a query has length 0,
  // since the reference gives such a query uniform weights over all M keys.
  int64_t mix_width = 0;
  int64_t row = 0;    // floats between score rows in scratch
  int64_t block = 0;  // queries per block
  Plans full, last;   // for whole blocks and the last, shorter one
};

std::vector<Group> GroupBatches(const ValidLens& lens, int64_t batch,
                                int64_t queries, int64_t keys) {
  std::vector<Group> groups;
  for (int64_t b = 0; b < batch; ++b) {
    int64_t longest = 0;
    bool has_empty = false;
    for (int64_t i = 0; i < queries; ++i) {
      const int64_t valid = RowValidLength(lens, b, i, keys);
      longest = std::max(longest, valid);
      has_empty |= valid == 0;
      if (lens.kind != ValidLens::Kind::kPerQuery) break;  // same for every i
    }
    const int64_t mix = has_empty ? keys : longest;
    if (!groups.empty() && groups.back().score_width == longest &&
        groups.back().mix_width == mix) {
      ++groups.back().count;
    } else {
      groups.push_back(Group{b, 1, longest, mix, 0, 0, {}, {}});
    }
  }
  return groups;
}

matmul::Layout LayoutOf(const ConstTensor& t, int64_t rows, int64_t cols) {
  return {rows, cols, t.strides[0], t.strides[1], t.strides[2]};
}

Status CheckArguments(const ConstTensor& q, const ConstTensor& k,
                      const ConstTensor& v, const ValidLens& lens,
                      const ConstTensor& out, const Tensor& weights) {
  ATTNSCORE_RETURN_IF_ERROR(CheckTensor(kOp, "queries", q, {kAnyDim, kAnyDim, kAnyDim}, "(B, N, D)"));
  const int64_t batch = q.dims[0], queries = q.dims[1], depth = q.dims[2];
  ATTNSCORE_RETURN_IF_ERROR(CheckTensor(kOp, "keys", k, {batch, kAnyDim, depth}, "(B, M, D)"));
  const int64_t keys = k.dims[1];
  ATTNSCORE_RETURN_IF_ERROR(CheckTensor(kOp, "values", v, {batch, keys, kAnyDim}, "(B, M, Dv)"));
  ATTNSCORE_RETURN_IF_ERROR(CheckTensor(kOp, "out", out, {batch, queries, v.dims[2]}, "(B, N, Dv)"));
  ATTNSCORE_RETURN_IF_ERROR(CheckWritable(kOp, "out", out));
  for (auto [name, input] : {std::pair{"queries", q}, {"keys", k}, {"values", v}}) {
    ATTNSCORE_RETURN_IF_ERROR(CheckDisjoint(kOp, "out", out, name, input));
  }
  if (!weights.empty()) {
    ATTNSCORE_RETURN_IF_ERROR(CheckTensor(kOp, "weights", weights, {batch, queries, keys}, "(B, N, M)"));
    ATTNSCORE_RETURN_IF_ERROR(CheckWritable(kOp, "weights", weights));
    for (auto [name, other] : {std::pair{"queries", q}, {"keys", k}, {"values", v}, {"out", out}}) {
      ATTNSCORE_RETURN_IF_ERROR(CheckDisjoint(kOp, "weights", weights, name, other));
    }
  }
  return CheckValidLens(lens, batch, queries, kOp);
}

// Queries are processed in blocks whose scores fit in L2 (1 MiB per core
// here), so the softmax and W V read them from cache, not from memory. Blocks
// of whole 16-row multiples keep oneDNN's kernels on full tiles.
int64_t QueryBlock(int64_t batch_count, int64_t queries, int64_t row_floats) {
  constexpr int64_t kScoreBlockBytes = 512 << 10;
  const int64_t rows = kScoreBlockBytes / (4 * std::max<int64_t>(row_floats, 1) * batch_count);
  if (rows >= queries) return queries;
  return std::max<int64_t>(16, rows / 16 * 16);
}

}  // namespace

Status DotProductAttention(const EngineOptions& options, ConstTensor q,
                           ConstTensor k, ConstTensor v,
                           const ValidLens& valid_lens, Tensor out,
                           Tensor weights) {
  ATTNSCORE_RETURN_IF_ERROR(CheckArguments(q, k, v, valid_lens, out, weights));
  const int64_t queries = q.dims[1], depth = q.dims[2], keys = k.dims[1];
  const bool want_weights = !weights.empty();
  std::vector<Group> groups = GroupBatches(valid_lens, q.dims[0], queries, keys);

  // Every primitive exists before anything is written, so a failure here
  // leaves the outputs untouched.
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(depth)));
  int64_t scratch_floats = 0;
  for (Group& g : groups) {
    // Scores go to scratch; without a weights output the softmax then runs in
    // place there, so rows are mix_width apart to leave room for it.
    g.row = want_weights ? g.score_width : g.mix_width;
    g.block = QueryBlock(g.count, queries, g.row);
    scratch_floats = std::max(scratch_floats, g.count * g.block * g.row);
    // One plan for the whole blocks and one for the last, shorter block.
    for (int64_t rows : {g.block, queries % g.block}) {
      if (rows == 0) continue;
      Plans& plans = rows == g.block ? g.full : g.last;
      if (g.score_width > 0) {
        matmul::Problem scores;
        scores.batch = g.count;
        scores.a = LayoutOf(q, rows, depth);
        // Kᵀ by swapping the strides of K: no copy.
        scores.b = {depth, g.score_width, k.strides[0], k.strides[2], k.strides[1]};
        scores.c = {rows, g.score_width, rows * g.row, g.row, 1};
        scores.scale = scale;
        ATTNSCORE_RETURN_IF_ERROR(matmul::GetPlan(scores, &plans.scores));
      }
      matmul::Problem mix;
      mix.batch = g.count;
      mix.a = want_weights ? LayoutOf(weights, rows, g.mix_width)
                           : matmul::Layout{rows, g.mix_width, rows * g.row, g.row, 1};
      mix.b = LayoutOf(v, g.mix_width, v.dims[2]);
      mix.c = LayoutOf(out, rows, out.dims[2]);
      ATTNSCORE_RETURN_IF_ERROR(matmul::GetPlan(mix, &plans.mix));
    }
  }

  float* scratch = ThreadScratch(1, static_cast<size_t>(scratch_floats));
  for (const Group& g : groups) {
    for (int64_t first = 0; first < queries; first += g.block) {
      const int64_t rows = std::min(g.block, queries - first);
      const Plans& plans = rows == g.block ? g.full : g.last;
      const float* q_block = q.data + g.first * q.strides[0] + first * q.strides[1];
      if (plans.scores) {
        ATTNSCORE_RETURN_IF_ERROR(
            plans.scores->Run(q_block, k.data + g.first * k.strides[0], scratch));
      }
      const ConstTensor scores(scratch, {g.count, rows, g.row});
      Tensor probabilities =
          want_weights
              ? Tensor(weights.data + g.first * weights.strides[0] + first * weights.strides[1],
                       {g.count, rows, keys},
                       {weights.strides[0], weights.strides[1], weights.strides[2]})
              : Tensor(scratch, {g.count, rows, g.mix_width});
      SoftmaxRows(scores, probabilities, valid_lens, g.first, first, options.threads);
      ATTNSCORE_RETURN_IF_ERROR(plans.mix->Run(
          probabilities.data, v.data + g.first * v.strides[0],
          out.data + g.first * out.strides[0] + first * out.strides[1]));
    }
  }
  return Status::Ok();
}

}  // namespace attnscore::ops
