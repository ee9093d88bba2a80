// Additive attention (docs/semantics.md section 3): its checks and forward
// pass (its parameters: ops/additive_params.cc).
//
// Per batch entry: Qh = Q W_qᵀ and Khᵀ = W_k Kᵀ by oneDNN (Khᵀ holds each
// key's features as a column, so the score kernel loads vectors of keys);
// then the score kernel (kernels/additive_scores) over blocks of query rows,
// chunk by chunk of keys; then the masked softmax and W V by oneDNN. Keys
// past the entry's longest valid length are never read, and a query's
// output depends on its own keys and values alone.
#include "ops/additive.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "base/checks.h"
#include "base/parallel.h"
#include "base/valid_lens.h"
#include "base/workspace.h"
#include "kernels/additive_scores.h"
#include "kernels/attention_row.h"
#include "matmul/matmul.h"
#include "ops/masked_softmax.h"
#include "ops/model_params.h"
#include "ops/remix_rows.h"

namespace attnscore::ops {

using internal::CheckTensor;
using internal::kAnyDim;

namespace {

constexpr const char* kOp = "AdditiveAttention";

int64_t RoundUp(int64_t n, int64_t multiple) { return (n + multiple - 1) / multiple * multiple; }

// Calls whose products total fewer FLOPs than this run them on the row
// kernels (kernels/attention_row.h) instead of oneDNN, which costs about a
// microsecond a call before any arithmetic: d2l's toy took 5.6 µs with its
// six oneDNN calls.
constexpr double kRowProductMaxFlops = 65536;

// Keys per chunk for M keys: a chunk's features (H × chunk floats) should
// stay in L2 (512 KiB of it) while every block of query rows walks them,
// and M keys make about kKeyChunks chunks of at least kMinKeyChunk keys, so
// that threads share an entry's projections and tanh factors, not only its
// scores (a chunk is a task; the chunk depends on M alone, not on the
// threads). With one chunk of 1,024 keys, N 16 and H 64, the key projection
// and factors were 2/3 of the time, on one thread: 2 threads took 1.02x the
// time of 1.
constexpr int64_t kKeyChunks = 4, kMinKeyChunk = 256;
// Score FLOPs of a chunk below which its blocks of query rows stay on one
// thread (ScoreChunk says why).
constexpr double kMinSharedScoreFlops = 4e6;
int64_t KeyChunk(int64_t hidden, int64_t keys) {
  const int64_t in_l2 = std::max<int64_t>(64, (int64_t{128} << 10) / hidden / 64 * 64);
  const int64_t quarter = RoundUp((keys + kKeyChunks - 1) / kKeyChunks, 64);
  return std::min(in_l2, std::max(kMinKeyChunk, quarter));
}

}  // namespace

Status CheckAdditiveInputs(const AdditiveParams& m, const ConstTensor& q, const ConstTensor& k,
                           const ConstTensor& v, internal::AttentionShape* shape) {
  ATTNSCORE_RETURN_IF_ERROR(
      CheckTensor(kOp, "queries", q, {kAnyDim, kAnyDim, m.query_size}, "(B, N, Dq)"));
  const int64_t batch = q.dims[0];
  ATTNSCORE_RETURN_IF_ERROR(
      CheckTensor(kOp, "keys", k, {batch, kAnyDim, m.key_size}, "(B, M, Dk)"));
  const int64_t keys = k.dims[1];
  ATTNSCORE_RETURN_IF_ERROR(CheckTensor(kOp, "values", v, {batch, keys, kAnyDim}, "(B, M, Dv)"));
  *shape = {batch, q.dims[1], keys, v.dims[2], "(B, N, Dv)"};
  return Status::Ok();
}

namespace {

Status CheckArguments(const AdditiveParams& m, const ConstTensor& q, const ConstTensor& k,
                      const ConstTensor& v, const ValidLens& lens, const ConstTensor& out,
                      const Tensor& attention) {
  internal::AttentionShape shape;
  ATTNSCORE_RETURN_IF_ERROR(CheckAdditiveInputs(m, q, k, v, &shape));
  return internal::CheckAttentionOutputs(kOp, {{"queries", q}, {"keys", k}, {"values", v}}, shape,
                                         lens, out, attention);
}

class ForwardPass {
 public:
  ForwardPass(const internal::CallContext& call, const AdditiveParams& m, const ConstTensor& q,
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
        queries_(q.dims[1]),
        keys_(k.dims[1]),
        hidden_(m.hidden),
        chunk_(KeyChunk(m.hidden, k.dims[1])),
        chunk_stride_(RoundUp(std::min(chunk_, keys_), kernels::kAdditivePadFloats)),
        score_stride_(RoundUp(keys_, kernels::kAdditivePadFloats)),
        row_products_(UseRowProducts()) {}

  Status Prepare() {
    if (row_products_) return Status::Ok();  // no oneDNN plans to make
    matmul::Problem project;
    project.a = {queries_, m_.query_size, 0, q_.strides[1], q_.strides[2]};
    project.b = {m_.query_size, hidden_, 0, hidden_, 1};
    project.c = {queries_, hidden_, 0, hidden_, 1};
    ATTNSCORE_RETURN_IF_ERROR(matmul::GetPlan(project, &project_queries_));
    mix_plans_.resize(static_cast<size_t>(q_.dims[0]));
    for (int64_t b = 0; b < q_.dims[0]; ++b) {
      // Every plan exists before anything is written.
      const internal::EntryWidths& e = lens_.entry(b);
      for (int64_t j = 0; j < e.longest; j += chunk_) {
        ATTNSCORE_RETURN_IF_ERROR(KeyPlan(std::min(chunk_, e.longest - j)));
      }
      matmul::Problem mix;
      mix.a = want_attention()
                  ? matmul::Layout{queries_, e.mix, 0, attention_.strides[1], attention_.strides[2]}
                  : matmul::Layout{queries_, e.mix, 0, score_stride_, 1};
      mix.b = {e.mix, v_.dims[2], 0, v_.strides[1], v_.strides[2]};
      mix.c = {queries_, out_.dims[2], 0, out_.strides[1], out_.strides[2]};
      ATTNSCORE_RETURN_IF_ERROR(matmul::GetPlan(mix, &mix_plans_[static_cast<size_t>(b)]));
    }
    return Status::Ok();
  }

  Status Run() {
    const int64_t batch = q_.dims[0];
    const int threads = internal::ThreadsFor(call_.threads(), Flops());
    if (threads <= 1 || batch < threads) {
      // One entry after another, each shared by the threads.
      Workspace w(call_.workspace.Floats(internal::ScratchSlot::kWorkspace, WorkspaceFloats()),
                  queries_ * hidden_, hidden_ * chunk_stride_);
      for (int64_t b = 0; b < batch; ++b)
        ATTNSCORE_RETURN_IF_ERROR(RunEntry(b, w, call_.threads()));
      return Status::Ok();
    }
    // Whole entries per thread: an entry's projections and W V are single
    // products too small to split (8-17 MFLOP on the big shape), which left
    // the second thread idle. Each entry runs exactly as on one thread.
    std::mutex mutex;
    Status first_error = Status::Ok();
    const Status s = internal::ForEachRowInParallel(
        call_.workspace, threads, batch, internal::ScratchSlot::kWorkspace, WorkspaceFloats(),
        [&](int64_t b, float* scratch) {
          {
            std::lock_guard<std::mutex> lock(mutex);
            if (!first_error.ok()) return;
          }
          Workspace w(scratch, queries_ * hidden_, hidden_ * chunk_stride_);
          // No exception may leave a team thread (oneDNN's bindings and
          // scratchpads allocate on a thread's first run of a primitive).
          Status entry;
          try {
            entry = RunEntry(b, w, /*threads=*/1);
          } catch (...) {
            entry = Status::Internal(
                "AdditiveAttention: an entry's computation failed (out of memory?)");
          }
          if (entry.ok()) return;
          std::lock_guard<std::mutex> lock(mutex);
          if (first_error.ok()) first_error = std::move(entry);
        },
        [] {}, internal::Balance::kOneAtATime);  // entries' lengths differ
    return first_error.ok() ? s : first_error;
  }

 private:
  // One thread's buffers for an entry: raw query projections, their tanh
  // factors, one chunk of key features, the scores.
  struct Workspace {
    float *q_raw, *q_factors, *k_cols, *scores;
    Workspace(float* scratch, int64_t q_floats, int64_t k_floats)
        : q_raw(scratch),
          q_factors(q_raw + q_floats),
          k_cols(q_factors + q_floats),
          scores(k_cols + k_floats) {}
  };
  size_t WorkspaceFloats() const {
    return static_cast<size_t>(2 * queries_ * hidden_ + hidden_ * chunk_stride_ +
                               queries_ * score_stride_);
  }

  // The FLOPs of the call's three products (projections and W V).
  double ProductFlops() const {
    return 2.0 * static_cast<double>(q_.dims[0]) *
           static_cast<double>(queries_ * m_.query_size * hidden_ + keys_ * m_.key_size * hidden_ +
                               queries_ * keys_ * v_.dims[2]);
  }
  // The call's arithmetic, roughly: the products and ~4 per score triple.
  double Flops() const {
    return ProductFlops() + 4.0 * static_cast<double>(q_.dims[0] * queries_ * keys_ * hidden_);
  }
  bool want_attention() const { return !attention_.empty(); }

  // Whether every product is small enough for the row kernels, and every
  // view they read or write has unit column strides.
  bool UseRowProducts() const {
    return ProductFlops() <= kRowProductMaxFlops && q_.strides[2] == 1 && k_.strides[2] == 1 &&
           v_.strides[2] == 1 && out_.strides[2] == 1 &&
           (!want_attention() || attention_.strides[2] == 1);
  }

  // Qh = Q W_qᵀ for entry b, into w.q_raw.
  Status ProjectQueries(int64_t b, const Workspace& w) const {
    const float* q = q_.data + b * q_.strides[0];
    if (!row_products_) return project_queries_->Run(call_.workspace, q, m_.w_q_t.data(), w.q_raw);
    for (int64_t i = 0; i < queries_; ++i) {
      // Row i of Q times w_q_t (Dq, H): a weighted sum of w_q_t's rows.
      kernels::MixRow(q + i * q_.strides[1], static_cast<size_t>(m_.query_size), m_.w_q_t.data(),
                      hidden_, static_cast<size_t>(hidden_), w.q_raw + i * hidden_);
    }
    return Status::Ok();
  }

  // Khᵀ = W_k Kᵀ for `width` keys of entry b from `first`, into w.k_cols.
  Status ProjectKeys(int64_t b, int64_t first, int64_t width, const Workspace& w) const {
    const float* k = k_.data + b * k_.strides[0] + first * k_.strides[1];
    if (!row_products_) {
      for (const auto& [known, plan] : key_plans_) {
        if (known == width) return plan->Run(call_.workspace, m_.w_k.data(), k, w.k_cols);
      }
      return Status::Internal("AdditiveAttention: no key plan for a chunk of " +
                              std::to_string(width));
    }
    for (int64_t h = 0; h < hidden_; ++h) {
      // Row h of W_k against every key: row h of Khᵀ.
      kernels::ScoreRow(m_.w_k.data() + h * m_.key_size, static_cast<size_t>(m_.key_size), k,
                        k_.strides[1], static_cast<size_t>(width), 1.0f,
                        w.k_cols + h * chunk_stride_);
    }
    return Status::Ok();
  }

  // out = W V for entry b: by oneDNN's `mix` over the entry's mix width,
  // then a shorter query's row that a NaN or Inf past its own width made
  // non-finite redone over its own keys (ops/remix_rows.h); or row by row.
  Status Mix(int64_t b, const Tensor& probabilities, const matmul::Plan* mix, int threads) const {
    const float* v = v_.data + b * v_.strides[0];
    float* out = out_.data + b * out_.strides[0];
    if (!row_products_) {
      ATTNSCORE_RETURN_IF_ERROR(mix->Run(call_.workspace, probabilities.data, v, out));
      return RemixNonFiniteRows(
          call_.workspace, probabilities,
          ConstTensor(v, {1, keys_, v_.dims[2]}, {0, v_.strides[1], v_.strides[2]}),
          Tensor(out, {1, queries_, out_.dims[2]}, {0, out_.strides[1], out_.strides[2]}), lens_, b,
          /*first_query=*/0, /*bf16=*/false, threads);
    }
    for (int64_t i = 0; i < queries_; ++i) {
      // Each row reads only its own valid keys (all M when L = 0).
      const int64_t valid = lens_.row(b, i);
      kernels::MixRow(probabilities.data + i * probabilities.strides[1],
                      static_cast<size_t>(valid > 0 ? valid : keys_), v, v_.strides[1],
                      static_cast<size_t>(v_.dims[2]), out + i * out_.strides[1]);
    }
    return Status::Ok();
  }

  // Makes the plan of Khᵀ for `width` keys ((H, width) columns chunk_stride_
  // apart) unless there is one.
  Status KeyPlan(int64_t width) {
    for (const auto& known : key_plans_) {
      if (known.first == width) return Status::Ok();
    }
    matmul::Problem project;
    project.a = {hidden_, m_.key_size, 0, m_.key_size, 1};
    project.b = {m_.key_size, width, 0, k_.strides[2], k_.strides[1]};  // Kᵀ by strides
    project.c = {hidden_, width, 0, chunk_stride_, 1};
    std::shared_ptr<const matmul::Plan> created;
    ATTNSCORE_RETURN_IF_ERROR(matmul::GetPlan(project, &created));
    key_plans_.emplace_back(width, created);
    return Status::Ok();
  }

  // Entry b with the workspace `w` on up to `threads`: its chunks of keys
  // shared among them, or with one chunk, its blocks of query rows.
  Status RunEntry(int64_t b, const Workspace& w, int threads) const {
    const internal::EntryWidths& widths = lens_.entry(b);
    if (widths.longest > 0) {
      ATTNSCORE_RETURN_IF_ERROR(ProjectQueries(b, w));
      const float largest_query = kernels::MaxAbs(w.q_raw, static_cast<size_t>(queries_ * hidden_));
      std::memcpy(w.q_factors, w.q_raw, sizeof(float) * static_cast<size_t>(queries_ * hidden_));
      kernels::ToTanhFactors(w.q_factors, static_cast<size_t>(queries_ * hidden_));
      const int64_t chunks = (widths.longest + chunk_ - 1) / chunk_;
      if (threads <= 1 || chunks < 2) {
        for (int64_t first = 0; first < widths.longest; first += chunk_) {
          ATTNSCORE_RETURN_IF_ERROR(ScoreKeys(b, first, largest_query, w, threads));
        }
      } else {
        // A chunk of keys per task, each thread with key features of its
        // own: projecting a chunk's keys and taking their tanh factors is
        // as much work as its scores, and would leave the other thread
        // idle. Each chunk is computed as on one thread: the same bits.
        std::vector<Status> results(static_cast<size_t>(chunks));
        ATTNSCORE_RETURN_IF_ERROR(internal::ForEachRowInParallel(
            call_.workspace, threads, chunks, internal::ScratchSlot::kKeyFeatures,
            static_cast<size_t>(hidden_ * chunk_stride_),
            [&](int64_t c, float* k_cols) {
              Workspace own = w;
              own.k_cols = k_cols;
              // No exception may leave a team thread (oneDNN's bindings
              // and scratchpads allocate on a thread's first run).
              try {
                results[static_cast<size_t>(c)] =
                    ScoreKeys(b, c * chunk_, largest_query, own, /*threads=*/1);
              } catch (...) {
                results[static_cast<size_t>(c)] = Status::Internal(
                    "AdditiveAttention: a chunk's computation failed (out of memory?)");
              }
            },
            [] {}));
        for (const Status& result : results) ATTNSCORE_RETURN_IF_ERROR(result);
      }
    }
    const ConstTensor scores(w.scores, {1, queries_, score_stride_});
    const Tensor probabilities =
        want_attention()
            ? Tensor(attention_.data + b * attention_.strides[0], {1, queries_, keys_},
                     {attention_.strides[0], attention_.strides[1], attention_.strides[2]})
            : Tensor(w.scores, {1, queries_, widths.mix},
                     {queries_ * score_stride_, score_stride_, 1});
    ATTNSCORE_RETURN_IF_ERROR(ops::SoftmaxRows(call_.workspace, scores, probabilities, lens_, b, 0,
                                               threads, /*stream=*/false));
    return Mix(b, probabilities, row_products_ ? nullptr : mix_plans_[static_cast<size_t>(b)].get(),
               threads);
  }

  // Scores of entry b's chunk of keys from `first`: their features Khᵀ
  // into w.k_cols, then the fast tanh's factors where it is exact, then
  // every query row's scores.
  Status ScoreKeys(int64_t b, int64_t first, float largest_query, const Workspace& w,
                   int threads) const {
    const int64_t width = std::min(chunk_, lens_.entry(b).longest - first);
    const int64_t padded = RoundUp(width, kernels::kAdditivePadFloats);
    ATTNSCORE_RETURN_IF_ERROR(ProjectKeys(b, first, width, w));
    float largest_key = 0;
    for (int64_t h = 0; h < hidden_; ++h) {
      float* row = w.k_cols + h * chunk_stride_;
      // The kernel reads whole vectors; keep the padding finite and fixed.
      std::fill(row + width, row + padded, 0.0f);
      largest_key = std::max(largest_key, kernels::MaxAbs(row, static_cast<size_t>(width)));
    }
    // The fast tanh is exact unless a clamped factor can meet a large one
    // of the other side (kernels/additive_scores.h). A NaN, whether
    // MaxAbs returns or skips it, gives NaN scores on either path.
    const float clamp = kernels::kTanhFactorClamp, bound = kernels::kTanhFactorExactBound;
    const bool fast = (largest_query <= clamp && largest_key <= clamp) ||
                      largest_query <= bound || largest_key <= bound;
    if (fast) {
      for (int64_t h = 0; h < hidden_; ++h) {
        kernels::ToTanhFactors(w.k_cols + h * chunk_stride_, static_cast<size_t>(padded));
      }
    }
    return ScoreChunk(b, first, width, fast, w, threads);
  }

  // Scores of keys [first, first + width) for every query row of entry b,
  // each block of rows up to the longest valid length among them.
  Status ScoreChunk(int64_t b, int64_t first, int64_t width, bool fast, const Workspace& w,
                    int threads) const {
    constexpr int64_t kBlock = kernels::kAdditiveRowBlock;
    const float* q_source = fast ? w.q_factors : w.q_raw;
    const auto mode = fast ? kernels::TanhMode::kExpProduct : kernels::TanhMode::kHighway;
    const int64_t blocks = (queries_ + kBlock - 1) / kBlock;
    // About 4 operations per (query, key, feature) triple. Blocks of rows
    // are shared only past kMinSharedScoreFlops: the projection and factors
    // before are one thread's, and each thread reads the chunk's features,
    // which that thread wrote. One chunk of 256 keys, H 64, 2 threads against
    // 1: N 16 (1 MFLOP of scores) and 32 took 1.1-1.15x the time, N 64 the
    // same, N 128 0.85x.
    const double flops = 4.0 * static_cast<double>(queries_ * width * hidden_);
    return internal::ForEachRowInParallel(
        call_.workspace, internal::ThreadsFor(threads, flops, kMinSharedScoreFlops), blocks,
        internal::ScratchSlot::kRowBuffer,
        /*scratch_floats=*/0,
        [&](int64_t block, float*) {
          const int64_t i0 = block * kBlock, rows = std::min(kBlock, queries_ - i0);
          int64_t longest = 0;
          const float* q_rows[kBlock];
          float* out_rows[kBlock];
          for (int64_t r = 0; r < rows; ++r) {
            longest = std::max(longest, lens_.row(b, i0 + r));
            q_rows[r] = q_source + (i0 + r) * hidden_;
            out_rows[r] = w.scores + (i0 + r) * score_stride_ + first;
          }
          const int64_t columns = std::min(longest - first, width);
          if (columns <= 0) return;
          kernels::AdditiveScoreBlock(mode, q_rows, static_cast<size_t>(rows), w.k_cols,
                                      static_cast<size_t>(chunk_stride_),
                                      static_cast<size_t>(hidden_), m_.w_v.data(), m_.w_sum,
                                      static_cast<size_t>(columns), out_rows);
        },
        [] {});
  }

  const internal::CallContext& call_;
  const AdditiveParams& m_;
  const ConstTensor &q_, &k_, &v_;
  const internal::RowLengths& lens_;
  const Tensor &out_, &attention_;
  const int64_t queries_, keys_, hidden_, chunk_, chunk_stride_, score_stride_;
  const bool row_products_;
  std::shared_ptr<const matmul::Plan> project_queries_;
  std::vector<std::pair<int64_t, std::shared_ptr<const matmul::Plan>>> key_plans_;
  // Entry b's W V (oneDNN products only).
  std::vector<std::shared_ptr<const matmul::Plan>> mix_plans_;
};

}  // namespace

Status AdditiveForward(const internal::CallContext& call, const AdditiveParams& params,
                       ConstTensor queries, ConstTensor keys, ConstTensor values,
                       const ValidLens& valid_lens, Tensor out, Tensor attention_weights) {
  return RunForward<ForwardPass>(CheckArguments, call, params, queries, keys, values, valid_lens,
                                 out, attention_weights);
}

}  // namespace attnscore::ops
