// The dot product's gemm path: see dot_product_paths.h.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include "base/parallel.h"
#include "base/workspace.h"
#include "kernels/bf16.h"
#include "matmul/matmul.h"
#include "ops/dot_product_gemm_chunks.h"
#include "ops/dot_product_paths.h"
#include "ops/masked_softmax.h"
#include "ops/remix_rows.h"

namespace attnscore::ops::dot_product {
namespace {

matmul::Layout LayoutOf(const ConstTensor& t, int64_t rows, int64_t cols) {
  return {rows, cols, t.strides[0], t.strides[1], t.strides[2]};
}

// A dense batch of (rows, cols) matrices.
matmul::Layout Dense(int64_t rows, int64_t cols) { return {rows, cols, rows * cols, cols, 1}; }

// The bf16 mode's copies of the matmul inputs, dense, carved from one
// per-thread buffer: K and V for the chunk's entries (made once, reused by
// every query block of them), Q for the chunk's queries and its weights P.
// Their elements are bf16 words where oneDNN has bf16 arithmetic; elsewhere,
// the same rounded values widened back to floats, for f32 matmuls (see
// matmul::NativeBf16).
struct Bf16Inputs {
  bool words = true;
  void *k = nullptr, *v = nullptr, *q = nullptr, *p = nullptr;
  int64_t k_size = 0, v_size = 0, q_size = 0, p_size = 0;  // capacities, in elements

  int64_t element_bytes() const { return words ? 2 : 4; }
  void Fit(const Chunk& c, int64_t score_width, int64_t mix_width, int64_t depth,
           int64_t value_dim) {
    // Whole cache lines each, so every copy starts on one.
    const int64_t per_line = 64 / element_bytes();
    const auto lines = [&](int64_t n) { return (n + per_line - 1) / per_line * per_line; };
    k_size = std::max(k_size, lines(c.entries * score_width * depth));
    v_size = std::max(v_size, lines(c.entries * mix_width * value_dim));
    q_size = std::max(q_size, lines(c.entries * c.rows * depth));
    p_size = std::max(p_size, lines(c.entries * c.rows * mix_width));
  }
  int64_t floats() const { return ((k_size + v_size + q_size + p_size) * element_bytes() + 3) / 4; }
  void Carve(float* buffer) {
    char* const base = reinterpret_cast<char*>(buffer);
    k = base;
    v = base + k_size * element_bytes();
    q = base + (k_size + v_size) * element_bytes();
    p = base + (k_size + v_size + q_size) * element_bytes();
  }
};

// Rounds `t` (E, R, C), any strides, to bf16 as a dense (E, R, C) in `out`:
// bf16 words, or with `words` false the rounded values as floats. With
// `normals`, t holds no subnormal (a softmax's weights), and the words may
// come from the CPU's own conversion (kernels::RoundNormalsToBf16).
Status RoundToBf16(internal::Workspace& workspace, int threads, const ConstTensor& t, bool words,
                   void* out, bool normals = false) {
  const int64_t rows = t.dims[0] * t.dims[1], cols = t.dims[2];
  const bool contiguous = t.strides[2] == 1;
  return internal::ForEachRowInParallel(
      workspace, internal::ThreadsFor(threads, static_cast<double>(rows * cols)), rows,
      internal::ScratchSlot::kRowBuffer, contiguous ? 0 : static_cast<size_t>(cols),
      [&](int64_t r, float* gathered) {
        const float* row = t.data + r / t.dims[1] * t.strides[0] + r % t.dims[1] * t.strides[1];
        if (!contiguous) {
          for (int64_t j = 0; j < cols; ++j) gathered[j] = row[j * t.strides[2]];
          row = gathered;
        }
        if (words) {
          uint16_t* const words_row = static_cast<uint16_t*>(out) + r * cols;
          if (normals) {
            kernels::RoundNormalsToBf16(row, static_cast<size_t>(cols), words_row);
          } else {
            kernels::RoundToBf16(row, static_cast<size_t>(cols), words_row);
          }
        } else {
          kernels::RoundThroughBf16(row, static_cast<size_t>(cols),
                                    static_cast<float*>(out) + r * cols);
        }
      },
      [] {});
}

// One gemm-path call in named steps: MakePlans, then Run, chunk by chunk
// (RoundInputs, Scores, Softmax, Mix).
class GemmRun {
 public:
  GemmRun(const internal::CallContext& call, const ConstTensor& q, const ConstTensor& k,
          const ConstTensor& v, const internal::RowLengths& lens, const ScoreForm& form,
          const Tensor& out, const Tensor& attention)
      : call_(call),
        q_(q),
        k_(k),
        v_(v),
        lens_(lens),
        form_(form),
        out_(out),
        attention_(attention),
        depth_(q.dims[2]),
        keys_(k.dims[1]),
        value_dim_(v.dims[2]),
        want_attention_(!attention.empty()),
        bf16_(call.options.precision == Precision::kBf16),
        groups_(GroupBatches(lens, q.dims[0], depth_, value_dim_)) {
    if (bf16_) rounded_.words = matmul::NativeBf16();
    bf16_words_ = bf16_ && rounded_.words;  // else fp32 matmuls, on rounded floats
  }

  // Every chunk's primitives, and the scratch sizes, before anything is
  // written: a failure here leaves the outputs untouched.
  Status MakePlans() {
    Status status;
    for (Group& g : groups_) {
      // Scores go to scratch; without a weights output the softmax then runs in
      // place there, so rows are mix_width apart to leave room for it.
      g.row = want_attention_ ? g.score_width : g.mix_width;
      ForEachChunk(g, [&](const Chunk& c) {
        scratch_floats_ = std::max(scratch_floats_, c.entries * c.rows * g.row);
        if (bf16_) rounded_.Fit(c, g.score_width, g.mix_width, depth_, value_dim_);
        if (status.ok()) status = MakeChunkPlans(g, c);
      });
      ATTNSCORE_RETURN_IF_ERROR(status);
    }
    return Status::Ok();
  }
  // Every chunk: each shared by the threads in turn where chunks are few,
  // else whole chunks handed to threads as they come free.
  Status Run() {
    std::vector<std::pair<const Group*, Chunk>> chunks;
    for (const Group& g : groups_) {
      ForEachChunk(g, [&](const Chunk& c) { chunks.emplace_back(&g, c); });
    }
    double flops = 0;  // as the products count them
    for (const auto& [g, c] : chunks) {
      flops += 2.0 * static_cast<double>(c.entries * c.rows) *
               static_cast<double>(g->score_width * depth_ + g->mix_width * value_dim_);
    }
    const int threads = call_.threads();
    if (internal::ThreadsFor(threads, flops) == 1 ||
        static_cast<int64_t>(chunks.size()) < 2 * threads) {
      return RunChunksInTurn(chunks, threads);
    }
    return RunChunksPerThread(chunks, threads);
  }

 private:
  // One thread's working set for its chunks: the scores scratch, and in
  // bf16 mode its rounded copies with whose K and V they hold.
  struct ChunkState {
    float* scratch = nullptr;
    Bf16Inputs rounded;
    const Group* rounded_for = nullptr;  // the group whose K and V the copies hold
    int64_t rounded_first = -1, rounded_entries = 0;
  };

  Status MakeChunkPlans(Group& g, const Chunk& c) {
    const std::pair<int64_t, int64_t> shape{c.entries, c.rows};
    for (const auto& known : g.plans) {
      if (known.first == shape) return Status::Ok();
    }
    Plans plans;
    if (g.score_width > 0) {
      matmul::Problem scores;
      scores.batch = c.entries;
      scores.a = bf16_ ? Dense(c.rows, depth_) : LayoutOf(q_, c.rows, depth_);
      // Kᵀ by swapping the strides of K (or of its bf16 copy): no copy.
      scores.b = bf16_ ? matmul::Layout{depth_, g.score_width, g.score_width * depth_, 1, depth_}
                       : matmul::Layout{depth_, g.score_width, k_.strides[0], k_.strides[2],
                                        k_.strides[1]};
      scores.c = {c.rows, g.score_width, c.rows * g.row, g.row, 1};
      scores.scale = form_.scale;
      scores.bf16 = bf16_words_;
      ATTNSCORE_RETURN_IF_ERROR(matmul::GetPlan(scores, &plans.scores));
    }
    matmul::Problem mix;
    mix.batch = c.entries;
    mix.a = bf16_             ? Dense(c.rows, g.mix_width)
            : want_attention_ ? LayoutOf(attention_, c.rows, g.mix_width)
                              : matmul::Layout{c.rows, g.mix_width, c.rows * g.row, g.row, 1};
    mix.b = bf16_ ? Dense(g.mix_width, value_dim_) : LayoutOf(v_, g.mix_width, value_dim_);
    mix.c = LayoutOf(out_, c.rows, out_.dims[2]);
    mix.bf16 = bf16_words_;
    ATTNSCORE_RETURN_IF_ERROR(matmul::GetPlan(mix, &plans.mix));
    g.plans.emplace_back(shape, std::move(plans));
    return Status::Ok();
  }
  const Plans& PlansOf(const Group& g, const Chunk& c) const {
    for (const auto& known : g.plans) {
      if (known.first == std::pair{c.entries, c.rows}) return known.second;
    }
    return g.plans.front().second;  // unreachable: MakePlans made every chunk's
  }
  // The chunk's (entries, rows, cols) of t, from `data` on.
  static ConstTensor Part(const Chunk& c, const ConstTensor& t, const float* data, int64_t rows,
                          int64_t cols) {
    return ConstTensor(data, {c.entries, rows, cols}, {t.strides[0], t.strides[1], t.strides[2]});
  }
  const float* QueriesOf(const Chunk& c) const {
    return q_.data + c.first_batch * q_.strides[0] + c.first_query * q_.strides[1];
  }
  const float* KeysOf(const Chunk& c) const { return k_.data + c.first_batch * k_.strides[0]; }
  const float* ValuesOf(const Chunk& c) const { return v_.data + c.first_batch * v_.strides[0]; }
  // Runs chunk `c` of `g` on `threads`: scores, softmax, then W V.
  Status RunChunk(const Group& g, const Chunk& c, int threads, ChunkState& state) const {
    if (bf16_) ATTNSCORE_RETURN_IF_ERROR(RoundInputs(g, c, threads, state));
    const Plans& plans = PlansOf(g, c);
    if (plans.scores) {
      ATTNSCORE_RETURN_IF_ERROR(
          bf16_
              ? plans.scores->Run(call_.workspace, state.rounded.q, state.rounded.k, state.scratch)
              : plans.scores->Run(call_.workspace, QueriesOf(c), KeysOf(c), state.scratch));
    }
    const Tensor probabilities =
        want_attention_
            ? Tensor(attention_.data + c.first_batch * attention_.strides[0] +
                         c.first_query * attention_.strides[1],
                     {c.entries, c.rows, keys_},
                     {attention_.strides[0], attention_.strides[1], attention_.strides[2]})
            : Tensor(state.scratch, {c.entries, c.rows, g.mix_width});
    ATTNSCORE_RETURN_IF_ERROR(Softmax(g, c, threads, state, probabilities));
    return Mix(g, c, threads, state, probabilities);
  }
  // bf16: the chunk's K and V (once per run of chunks of the same entries)
  // and Q rounded into the state's copies.
  Status RoundInputs(const Group& g, const Chunk& c, int threads, ChunkState& state) const {
    Bf16Inputs& rounded = state.rounded;
    // A cut entry's blocks have widths of their own: copies are per group.
    if (state.rounded_for != &g || state.rounded_first != c.first_batch ||
        state.rounded_entries != c.entries) {
      state.rounded_for = nullptr;  // until both copies are whole
      ATTNSCORE_RETURN_IF_ERROR(RoundToBf16(call_.workspace, threads,
                                            Part(c, k_, KeysOf(c), g.score_width, depth_),
                                            rounded.words, rounded.k));
      ATTNSCORE_RETURN_IF_ERROR(RoundToBf16(call_.workspace, threads,
                                            Part(c, v_, ValuesOf(c), g.mix_width, value_dim_),
                                            rounded.words, rounded.v));
      state.rounded_for = &g;
      state.rounded_first = c.first_batch;
      state.rounded_entries = c.entries;
    }
    return RoundToBf16(call_.workspace, threads, Part(c, q_, QueriesOf(c), c.rows, depth_),
                       rounded.words, rounded.q);
  }
  // The chunk's probabilities (the weights output, or the scratch in place)
  // from its scores, and in bf16 mode their words.
  Status Softmax(const Group& g, const Chunk& c, int threads, ChunkState& state,
                 const Tensor& probabilities) const {
    const ConstTensor scores(state.scratch, {c.entries, c.rows, g.row});
    // P's bf16 words, dense (rows, mix_width): from each softmax row as it is
    // made where the matmuls take bf16 words and the probabilities are that
    // wide (no weights output), else in a pass of their own.
    if (bf16_words_ && !want_attention_) {
      return SoftmaxRowsAndBf16(call_.workspace, scores, probabilities,
                                static_cast<uint16_t*>(state.rounded.p), lens_, c.first_batch,
                                c.first_query, threads, &form_);
    }
    ATTNSCORE_RETURN_IF_ERROR(SoftmaxRows(call_.workspace, scores, probabilities, lens_,
                                          c.first_batch, c.first_query, threads,
                                          /*stream=*/false, &form_));
    if (!bf16_) return Status::Ok();
    ConstTensor mixed = probabilities;
    mixed.dims[2] = g.mix_width;
    return RoundToBf16(call_.workspace, threads, mixed, state.rounded.words, state.rounded.p,
                       /*normals=*/true);
  }
  // out = P V over the group's mix width, then the rows that widths past
  // their own made non-finite redone over their own keys.
  Status Mix(const Group& g, const Chunk& c, int threads, ChunkState& state,
             const Tensor& probabilities) const {
    const Plans& plans = PlansOf(g, c);
    float* out_chunk =
        out_.data + c.first_batch * out_.strides[0] + c.first_query * out_.strides[1];
    ATTNSCORE_RETURN_IF_ERROR(
        bf16_ ? plans.mix->Run(call_.workspace, state.rounded.p, state.rounded.v, out_chunk)
              : plans.mix->Run(call_.workspace, probabilities.data, ValuesOf(c), out_chunk));
    // W V ran over the group's mix width: a shorter query's row that a NaN
    // or Inf past its own width made non-finite is redone over its own keys.
    const Tensor out_part(out_chunk, {c.entries, c.rows, value_dim_},
                          {out_.strides[0], out_.strides[1], out_.strides[2]});
    return RemixNonFiniteRows(call_.workspace, probabilities,
                              Part(c, v_, ValuesOf(c), g.mix_width, value_dim_), out_part, lens_,
                              c.first_batch, c.first_query, bf16_, threads);
  }
  // Each product and softmax shared by the threads, chunk after chunk.
  Status RunChunksInTurn(const std::vector<std::pair<const Group*, Chunk>>& chunks, int threads) {
    ChunkState state;
    state.scratch = call_.workspace.Floats(internal::ScratchSlot::kWorkspace,
                                           static_cast<size_t>(scratch_floats_));
    state.rounded = rounded_;
    if (bf16_)
      state.rounded.Carve(call_.workspace.Floats(internal::ScratchSlot::kBf16Copies,
                                                 static_cast<size_t>(rounded_.floats())));
    for (const auto& [g, c] : chunks) ATTNSCORE_RETURN_IF_ERROR(RunChunk(*g, c, threads, state));
    return Status::Ok();
  }
  // Enough chunks for every thread: whole chunks per thread, handed out one at
  // a time. No barrier between a chunk's steps, and its scores stay in the
  // cache of the core that made them (and a thread slowed by a busy core
  // simply takes fewer chunks). Chunks depend on the problem alone and each is
  // computed the same on any thread, so the bits do not change.
  Status RunChunksPerThread(const std::vector<std::pair<const Group*, Chunk>>& chunks,
                            int threads) {
    std::vector<ChunkState> states(static_cast<size_t>(threads));
    std::vector<Status> results(chunks.size());
    ATTNSCORE_RETURN_IF_ERROR(internal::ForEachRowInParallel(
        call_.workspace, threads, static_cast<int64_t>(chunks.size()),
        internal::ScratchSlot::kWorkspace, static_cast<size_t>(scratch_floats_),
        [&](int64_t i, float* scratch) {
          ChunkState& state = states[static_cast<size_t>(internal::ThreadTeam::ThisThread())];
          Status& result = results[static_cast<size_t>(i)];
          if (state.scratch == nullptr) {
            state.rounded = rounded_;
            try {
              if (bf16_)
                state.rounded.Carve(call_.workspace.Floats(internal::ScratchSlot::kBf16Copies,
                                                           static_cast<size_t>(rounded_.floats())));
            } catch (...) {
              result = Status::Internal("out of memory for per-thread scratch");
              return;
            }
            state.scratch = scratch;
          }
          // No exception may leave a team thread (oneDNN's bindings and
          // scratchpads allocate on a thread's first run of a primitive).
          try {
            const auto& [g, c] = chunks[static_cast<size_t>(i)];
            result = RunChunk(*g, c, 1, state);
          } catch (...) {
            result = Status::Internal("a chunk's computation failed (out of memory?)");
          }
        },
        [] {}, internal::Balance::kOneAtATime));
    for (const Status& result : results) ATTNSCORE_RETURN_IF_ERROR(result);
    return Status::Ok();
  }

  const internal::CallContext& call_;
  const ConstTensor &q_, &k_, &v_;
  const internal::RowLengths& lens_;
  const ScoreForm form_;
  const Tensor &out_, &attention_;
  const int64_t depth_, keys_, value_dim_;
  const bool want_attention_, bf16_;
  bool bf16_words_ = false;
  std::vector<Group> groups_;
  Bf16Inputs rounded_;  // sized for the largest chunk; each thread carves its own
  int64_t scratch_floats_ = 0;
};

}  // namespace

Status GemmPath(const internal::CallContext& call, const ConstTensor& q, const ConstTensor& k,
                const ConstTensor& v, const internal::RowLengths& lens, const ScoreForm& form,
                const Tensor& out, const Tensor& attention) {
  GemmRun run(call, q, k, v, lens, form, out, attention);
  ATTNSCORE_RETURN_IF_ERROR(run.MakePlans());
  return run.Run();
}

}  // namespace attnscore::ops::dot_product
