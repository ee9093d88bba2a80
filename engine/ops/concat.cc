// Concat attention (docs/semantics.md section 4): the model's parameters,
// loading them from a state_dict, and its forward pass.
//
// [q; k] and [q; applied] are never built: a linear layer over a
// concatenation is the sum of its column blocks' products, so
//   scores  = Q · Aqᵀ + attn.bias,          then += K · Akᵀ
//   out     = Q · Cqᵀ + attn_combine.bias,  then += applied · Caᵀ
// with each block packed once, at creation, as oneDNN's plain (in, out)
// matrix and shared by every batch entry. Between the two: the masked
// softmax (shared code) and applied = W V, each query over its own valid
// positions: row by row (kernels/attention_row) when entries have few
// queries, else by oneDNN over each entry's widest, with the rows that NaN
// or Inf past a query's own width reached redone (ops/remix_rows.h).
#include "ops/concat.h"

#include <algorithm>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "base/checks.h"
#include "base/parallel.h"
#include "base/valid_lens.h"
#include "base/workspace.h"
#include "io/safetensors.h"
#include "kernels/attention_row.h"
#include "matmul/matmul.h"
#include "ops/masked_softmax.h"
#include "ops/model_params.h"
#include "ops/remix_rows.h"

namespace attnscore::ops {

using internal::CheckTensor;
using internal::kAnyDim;

namespace {

constexpr const char* kOp = "ConcatAttention";

// Up to this many queries per entry (a decoder step has one), W V runs row
// by row as matrix-vector products, each over exactly its row's valid
// positions: per-entry oneDNN calls cost more in set-up than in arithmetic
// there. Measured on a decoder step (B 64, N 1; M 64, Dv 256, random
// lengths): 272 us for the op with oneDNN per entry, 227 us row by row.
constexpr int64_t kRowMixMaxQueries = 3;

// Up to this many rows (B · N) in all, as in a single decoder step or the
// tutorial's toy, the whole pass runs row by row without oneDNN: each layer
// is a matrix-vector product, and oneDNN's four calls cost more than the
// arithmetic (the tutorial's toy, Dq = Dk = M = 32, Dv = 64: 4.0 us with
// them).
constexpr int64_t kFewRows = 3;

// The state_dict names, as PyTorch's Attn module calls its parameters.
constexpr const char* kScoreWeight = "attn.weight";
constexpr const char* kScoreBias = "attn.bias";
constexpr const char* kCombineWeight = "attn_combine.weight";
constexpr const char* kCombineBias = "attn_combine.bias";

}  // namespace

Status MakeConcatParams(int64_t query_size, ConstTensor attn_weight, ConstTensor attn_bias,
                        ConstTensor combine_weight, ConstTensor combine_bias,
                        ConcatParams* params) {
  ATTNSCORE_RETURN_IF_ERROR(
      CheckTensor(kOp, kScoreWeight, attn_weight, {kAnyDim, kAnyDim}, "(M, Dq + Dk)"));
  const int64_t rows = attn_weight.dims[0], score_inputs = attn_weight.dims[1];
  ATTNSCORE_RETURN_IF_ERROR(CheckTensor(kOp, kScoreBias, attn_bias, {rows}, "(M)"));
  ATTNSCORE_RETURN_IF_ERROR(
      CheckTensor(kOp, kCombineWeight, combine_weight, {kAnyDim, kAnyDim}, "(O, Dq + Dv)"));
  const int64_t outputs = combine_weight.dims[0], combine_inputs = combine_weight.dims[1];
  ATTNSCORE_RETURN_IF_ERROR(CheckTensor(kOp, kCombineBias, combine_bias, {outputs}, "(O)"));
  // Both layers see q first; each must have at least one column past it.
  for (auto [name, columns, rest] :
       {std::tuple{kScoreWeight, score_inputs, "Dk"}, {kCombineWeight, combine_inputs, "Dv"}}) {
    if (query_size < 1 || query_size >= columns) {
      return Status::InvalidArgument(std::string(kOp) + ": query_size is " +
                                     std::to_string(query_size) + " but " + name + " has " +
                                     std::to_string(columns) + " columns = Dq + " + rest +
                                     "; want 1 <= Dq < " + std::to_string(columns));
    }
  }
  for (auto [name, view] : {std::pair{kScoreWeight, attn_weight},
                            {kScoreBias, attn_bias},
                            {kCombineWeight, combine_weight},
                            {kCombineBias, combine_bias}}) {
    ATTNSCORE_RETURN_IF_ERROR(CheckFinite(kOp, name, view));
  }
  params->query_size = query_size;
  params->key_size = score_inputs - query_size;
  params->value_rows = rows;
  params->value_size = combine_inputs - query_size;
  params->output_size = outputs;
  params->score = CopyMatrix(attn_weight, /*transpose=*/true);
  params->score_bias = CopyMatrix(attn_bias, /*transpose=*/false);
  params->combine = CopyMatrix(combine_weight, /*transpose=*/true);
  params->combine_bias = CopyMatrix(combine_bias, /*transpose=*/false);
  return Status::Ok();
}

Status LoadConcatParams(const std::string& path, int64_t query_size, ConcatParams* params) {
  std::vector<io::SafetensorsTensor> tensors;
  ATTNSCORE_RETURN_IF_ERROR(io::ReadSafetensors(path, &tensors));
  ATTNSCORE_RETURN_IF_ERROR(
      CheckOnlyTensors(path, tensors, {kScoreWeight, kScoreBias, kCombineWeight, kCombineBias},
                       "a concat attention (Attn)"));
  const io::SafetensorsTensor *score_w = nullptr, *score_b = nullptr, *combine_w = nullptr,
                              *combine_b = nullptr;
  ATTNSCORE_RETURN_IF_ERROR(io::FindTensor(path, tensors, kScoreWeight, {-1, -1}, &score_w));
  ATTNSCORE_RETURN_IF_ERROR(
      io::FindTensor(path, tensors, kScoreBias, {score_w->shape[0]}, &score_b));
  ATTNSCORE_RETURN_IF_ERROR(io::FindTensor(path, tensors, kCombineWeight, {-1, -1}, &combine_w));
  ATTNSCORE_RETURN_IF_ERROR(
      io::FindTensor(path, tensors, kCombineBias, {combine_w->shape[0]}, &combine_b));
  Status s = MakeConcatParams(query_size, ViewOf(*score_w), ViewOf(*score_b), ViewOf(*combine_w),
                              ViewOf(*combine_b), params);
  if (!s.ok()) return Status(s.code(), path + ": " + s.message());
  return s;
}

Status CheckConcatInputs(const ConcatParams& m, const ConstTensor& q, const ConstTensor& k,
                         const ConstTensor& v, internal::AttentionShape* shape) {
  ATTNSCORE_RETURN_IF_ERROR(
      CheckTensor(kOp, "queries", q, {kAnyDim, kAnyDim, m.query_size}, "(B, N, Dq)"));
  const int64_t batch = q.dims[0], queries = q.dims[1];
  ATTNSCORE_RETURN_IF_ERROR(
      CheckTensor(kOp, "keys", k, {batch, queries, m.key_size}, "(B, N, Dk)"));
  ATTNSCORE_RETURN_IF_ERROR(
      CheckTensor(kOp, "values", v, {batch, m.value_rows, m.value_size}, "(B, M, Dv)"));
  *shape = {batch, queries, m.value_rows, m.output_size, "(B, N, O)"};
  return Status::Ok();
}

namespace {

Status CheckArguments(const ConcatParams& m, const ConstTensor& q, const ConstTensor& k,
                      const ConstTensor& v, const ValidLens& lens, const ConstTensor& out,
                      const Tensor& attention) {
  internal::AttentionShape shape;
  ATTNSCORE_RETURN_IF_ERROR(CheckConcatInputs(m, q, k, v, &shape));
  return internal::CheckAttentionOutputs(kOp, {{"queries", q}, {"keys", k}, {"values", v}}, shape,
                                         lens, out, attention);
}

matmul::Layout LayoutOf(const ConstTensor& t) {
  // One row per entry (a decoder step): its row stride means nothing, so
  // take the batch stride, which lets Shared() see the batch as one matrix.
  const int64_t row_stride = t.dims[1] == 1 ? t.strides[0] : t.strides[1];
  return {t.dims[1], t.dims[2], t.strides[0], row_stride, t.strides[2]};
}

class ForwardPass {
 public:
  ForwardPass(const internal::CallContext& call, const ConcatParams& m, const ConstTensor& q,
              const ConstTensor& k, const ConstTensor& v, const internal::RowLengths& lens,
              const Tensor& out, const Tensor& attention)
      : call_(call),
        m_(m),
        q_(q),
        k_(k),
        v_(v),
        lens_(lens),
        out_(out),
        attention_(attention),
        batch_(q.dims[0]),
        queries_(q.dims[1]) {}

  // Every plan, before anything is written.
  Status Prepare() {
    const int64_t rows = m_.value_rows;
    // Scores go straight into the caller's weights when asked for them; the
    // softmax then runs in place.
    scratch_scores_ = attention_.empty() ? batch_ * queries_ * rows : 0;
    const matmul::Layout scores = attention_.empty()
                                      ? matmul::Layout{queries_, rows, queries_ * rows, rows, 1}
                                      : LayoutOf(attention_);
    const matmul::Layout applied{queries_, m_.value_size, queries_ * m_.value_size, m_.value_size,
                                 1};

    // W V reads only the positions some query of the entry attends to (all
    // M when a query has L = 0), so NaN in values past them stays out (and
    // out of a shorter query's row: see Run). Row by row for few queries;
    // else one batched oneDNN call when every entry has the same width, or
    // one per entry.
    const int64_t attention_column_stride = attention_.empty() ? 1 : attention_.strides[2];
    row_mix_ = queries_ <= kRowMixMaxQueries && v_.strides[2] == 1 && attention_column_stride == 1;
    few_rows_ = row_mix_ && batch_ * queries_ <= kFewRows;
    if (few_rows_) return Status::Ok();
    ATTNSCORE_RETURN_IF_ERROR(Shared(LayoutOf(q_), scores, Epilogue::kAddBias, &score_q_));
    ATTNSCORE_RETURN_IF_ERROR(Shared(LayoutOf(k_), scores, Epilogue::kAccumulate, &score_k_));
    ATTNSCORE_RETURN_IF_ERROR(
        Shared(LayoutOf(q_), LayoutOf(out_), Epilogue::kAddBias, &combine_q_));
    ATTNSCORE_RETURN_IF_ERROR(
        Shared(applied, LayoutOf(out_), Epilogue::kAccumulate, &combine_applied_));
    if (row_mix_) return Status::Ok();
    widths_.resize(static_cast<size_t>(batch_));
    for (int64_t b = 0; b < batch_; ++b) {
      widths_[static_cast<size_t>(b)] = lens_.entry(b).mix;
    }
    const bool uniform =
        std::all_of(widths_.begin(), widths_.end(), [&](int64_t w) { return w == widths_[0]; });
    mix_.resize(uniform ? 1 : static_cast<size_t>(batch_));
    for (size_t n = 0; n < mix_.size(); ++n) {
      matmul::Problem mix;
      mix.batch = uniform ? batch_ : 1;
      mix.a = scores;
      mix.a.cols = widths_[n];
      mix.b = {widths_[n], m_.value_size, v_.strides[0], v_.strides[1], v_.strides[2]};
      mix.c = applied;
      ATTNSCORE_RETURN_IF_ERROR(matmul::GetPlan(mix, &mix_[n]));
    }
    return Status::Ok();
  }

  Status Run() {
    const int64_t rows = m_.value_rows;
    float* scratch = call_.workspace.Floats(
        internal::ScratchSlot::kWorkspace,
        static_cast<size_t>(scratch_scores_ + batch_ * queries_ * m_.value_size));
    float* scores = attention_.empty() ? scratch : attention_.data;
    float* applied = scratch + scratch_scores_;
    if (few_rows_) return RunFewRows(scores);
    ATTNSCORE_RETURN_IF_ERROR(
        score_q_->Run(call_.workspace, q_.data, m_.score_q(), scores, m_.score_bias.data()));
    ATTNSCORE_RETURN_IF_ERROR(score_k_->Run(call_.workspace, k_.data, m_.score_k(), scores));
    const Tensor probabilities =
        attention_.empty() ? Tensor(scores, {batch_, queries_, rows}) : attention_;
    ATTNSCORE_RETURN_IF_ERROR(ops::SoftmaxRows(call_.workspace, probabilities, probabilities, lens_,
                                               0, 0, call_.threads(), /*stream=*/false));
    if (row_mix_) {
      ATTNSCORE_RETURN_IF_ERROR(MixRows(probabilities, applied));
    } else {
      if (mix_.size() == 1) {
        ATTNSCORE_RETURN_IF_ERROR(mix_[0]->Run(call_.workspace, scores, v_.data, applied));
      } else {
        for (int64_t b = 0; b < batch_; ++b) {
          ATTNSCORE_RETURN_IF_ERROR(mix_[static_cast<size_t>(b)]->Run(
              call_.workspace, scores + b * probabilities.strides[0], v_.data + b * v_.strides[0],
              applied + b * queries_ * m_.value_size));
        }
      }
      // Each entry's W V ran over its mix width: a shorter query's row that
      // a NaN or Inf past its own width made non-finite is redone over its own.
      ATTNSCORE_RETURN_IF_ERROR(
          RemixNonFiniteRows(call_.workspace, probabilities, v_,
                             Tensor(applied, {batch_, queries_, m_.value_size}), lens_, 0, 0,
                             /*bf16=*/false, call_.threads()));
    }
    ATTNSCORE_RETURN_IF_ERROR(combine_q_->Run(call_.workspace, q_.data, m_.combine_q(), out_.data,
                                              m_.combine_bias.data()));
    return combine_applied_->Run(call_.workspace, applied, m_.combine_applied(), out_.data);
  }

 private:
  // applied[b, i] = Σ_j W[b, i, j] V[b, j] over row (b, i)'s valid positions
  // (all M when L = 0).
  Status MixRows(const Tensor& probabilities, float* applied) const {
    const int64_t rows = m_.value_rows, dv = m_.value_size;
    const double flops = 2.0 * static_cast<double>(batch_ * queries_ * rows * dv);
    return internal::ForEachRowInParallel(
        call_.workspace, internal::ThreadsFor(call_.threads(), flops), batch_ * queries_,
        internal::ScratchSlot::kRowBuffer, /*scratch_floats=*/0,
        [&](int64_t r, float*) {
          const int64_t b = r / queries_, i = r % queries_;
          const int64_t valid = lens_.row(b, i);
          kernels::MixRow(
              probabilities.data + b * probabilities.strides[0] + i * probabilities.strides[1],
              static_cast<size_t>(valid == 0 ? rows : valid), v_.data + b * v_.strides[0],
              v_.strides[1], static_cast<size_t>(dv), applied + r * dv);
        },
        [] {});
  }

  // The whole pass row by row, each layer x · W + bias as a matrix-vector
  // product over the transposed weights (kernels::MixRow), x = [q; k] or
  // [q; applied] gathered into a row buffer. Scores are contiguous rows here
  // (Prepare takes this path only then); q, k and out may have any strides.
  Status RunFewRows(float* scores) const {
    const int64_t rows = m_.value_rows, dq = m_.query_size, dk = m_.key_size;
    const int64_t dv = m_.value_size, outputs = m_.output_size;
    const int64_t score_row_stride = attention_.empty() ? rows : attention_.strides[1];
    const int64_t score_batch_stride = attention_.empty() ? queries_ * rows : attention_.strides[0];
    // x, then y = the layer's output row. Taken again after the softmax,
    // which may grow this slot for its own rows.
    const auto row_buffer = [&] {
      return call_.workspace.Floats(internal::ScratchSlot::kRowBuffer,
                                    static_cast<size_t>(dq + std::max(dk, dv) + outputs));
    };
    float* x = row_buffer();
    const auto gather = [](const ConstTensor& t, int64_t b, int64_t i, float* to) {
      const float* from = t.data + b * t.strides[0] + i * t.strides[1];
      for (int64_t c = 0; c < t.dims[2]; ++c) to[c] = from[c * t.strides[2]];
    };
    for (int64_t b = 0; b < batch_; ++b) {
      for (int64_t i = 0; i < queries_; ++i) {
        float* score = scores + b * score_batch_stride + i * score_row_stride;
        gather(q_, b, i, x);
        gather(k_, b, i, x + dq);
        kernels::MixRow(x, static_cast<size_t>(dq + dk), m_.score.data(), rows,
                        static_cast<size_t>(rows), score);
        for (int64_t j = 0; j < rows; ++j) score[j] += m_.score_bias[static_cast<size_t>(j)];
      }
    }
    const Tensor probabilities =
        attention_.empty() ? Tensor(scores, {batch_, queries_, rows}) : attention_;
    ATTNSCORE_RETURN_IF_ERROR(ops::SoftmaxRows(call_.workspace, probabilities, probabilities, lens_,
                                               0, 0,
                                               /*threads=*/1, /*stream=*/false));
    x = row_buffer();
    float* y = x + dq + std::max(dk, dv);
    for (int64_t b = 0; b < batch_; ++b) {
      for (int64_t i = 0; i < queries_; ++i) {
        const int64_t valid = lens_.row(b, i);
        gather(q_, b, i, x);
        kernels::MixRow(scores + b * score_batch_stride + i * score_row_stride,
                        static_cast<size_t>(valid == 0 ? rows : valid), v_.data + b * v_.strides[0],
                        v_.strides[1], static_cast<size_t>(dv), x + dq);
        kernels::MixRow(x, static_cast<size_t>(dq + dv), m_.combine.data(), outputs,
                        static_cast<size_t>(outputs), y);
        float* out = out_.data + b * out_.strides[0] + i * out_.strides[1];
        for (int64_t c = 0; c < outputs; ++c) {
          out[c * out_.strides[2]] = y[c] + m_.combine_bias[static_cast<size_t>(c)];
        }
      }
    }
    return Status::Ok();
  }

  // What a column block's product adds: the layer's bias (the first block)
  // or what C already holds (the second).
  enum class Epilogue { kAddBias, kAccumulate };

  // C = A · B + (bias or C) for every batch entry, B being one packed
  // weight block that all entries share. When A's and C's entries lie one
  // after another, the batch is one matrix of B·N rows: oneDNN runs that far
  // faster than B products of N rows (the whole op on a decoder step, B 64
  // and N 1: 550 us as B products, 272 us as one matrix).
  Status Shared(matmul::Layout a, matmul::Layout c, Epilogue epilogue,
                std::shared_ptr<const matmul::Plan>* plan) {
    matmul::Problem p;
    p.batch = batch_;
    const auto contiguous = [](const matmul::Layout& l) {
      return l.batch_stride == l.rows * l.row_stride;
    };
    if (batch_ > 1 && contiguous(a) && contiguous(c)) {
      p.batch = 1;
      a.rows *= batch_;
      c.rows *= batch_;
    }
    p.a = a;
    p.b = {a.cols, c.cols, 0, c.cols, 1};
    p.c = c;
    p.shared_b = true;
    p.bias = epilogue == Epilogue::kAddBias;
    p.accumulate = epilogue == Epilogue::kAccumulate;
    return matmul::GetPlan(p, plan);
  }

  const internal::CallContext& call_;
  const ConcatParams& m_;
  const ConstTensor &q_, &k_, &v_;
  const internal::RowLengths& lens_;
  const Tensor &out_, &attention_;
  const int64_t batch_, queries_;
  int64_t scratch_scores_ = 0;
  bool row_mix_ = false;
  bool few_rows_ = false;  // the whole pass row by row (RunFewRows)
  std::vector<int64_t> widths_;
  std::shared_ptr<const matmul::Plan> score_q_, score_k_, combine_q_, combine_applied_;
  std::vector<std::shared_ptr<const matmul::Plan>> mix_;
};

}  // namespace

Status ConcatForward(const internal::CallContext& call, const ConcatParams& params,
                     ConstTensor queries, ConstTensor keys, ConstTensor values,
                     const ValidLens& valid_lens, Tensor out, Tensor attention_weights) {
  return RunForward<ForwardPass>(CheckArguments, call, params, queries, keys, values, valid_lens,
                                 out, attention_weights);
}

}  // namespace attnscore::ops
