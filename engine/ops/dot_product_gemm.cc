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
#include "ops/dot_product_paths.h"
#include "ops/masked_softmax.h"
#include "ops/remix_rows.h"

namespace attnscore::ops::dot_product {
namespace {

struct Plans {
  std::shared_ptr<const matmul::Plan> scores, mix;
};

// Consecutive batch entries that need the same matmul widths, so one batched
// oneDNN call serves them all. (Widening entries to share calls was faster
// for decode, 116 -> 76-79 us on (8, 1, 1024), but computes keys past an
// entry's own lengths, which the contract rules out: a NaN there leaks.)
//
// An entry whose queries' lengths differ enough (per-query lengths, the
// causal lengths 1..N among them) is cut instead into blocks of
// kQueryBlock queries, a group each, whose widths are the block's own: the
// work then follows the lengths, not N times the longest.
struct Group {
  int64_t first = 0, count = 0;
  int64_t first_query = 0, queries = 0;  // the queries of each entry it covers
  // Key columns of Q Kᵀ: the longest valid length among the group's queries.
  // Keys past every query's length are never computed.
  int64_t score_width = 0;
  // Key columns of W V: score_width, or all M when a query has length 0,
  // since the reference gives such a query uniform weights over all M keys.
  int64_t mix_width = 0;
  int64_t row = 0;  // floats between score rows in scratch
  // Plans by chunk shape (entries, rows); a group has at most two shapes.
  std::vector<std::pair<std::pair<int64_t, int64_t>, Plans>> plans;
};

// A piece of a group small enough for its scores to stay in cache.
struct Chunk {
  int64_t first_batch, entries, first_query, rows;
};

// Queries per block of a cut entry: 64 rows keep oneDNN's kernels on full
// tiles, and cut the causal (1, 1024, 1024) to 1.06x its unmasked half.
constexpr int64_t kQueryBlock = 64;
// An entry is cut when its blocks' work is at most this share of the whole
// entry's: each block costs its own oneDNN calls.
constexpr double kCutWhenBelow = 0.8;

// The widths of queries [first, first + count) of entry b: the longest
// length among them rounded up to 16 columns (fewer distinct plans) but
// never past the entry's own longest, and the mix width likewise, or all M
// keys when one of them has length 0.
std::pair<int64_t, int64_t> BlockWidths(const internal::RowLengths& lens, int64_t b, int64_t first,
                                        int64_t count) {
  const internal::EntryWidths& entry = lens.entry(b);
  int64_t longest = 0;
  bool uniform = false;  // a query with length 0
  for (int64_t i = first; i < first + count; ++i) {
    longest = std::max(longest, lens.row(b, i));
    uniform = uniform || lens.row(b, i) == 0;
  }
  const int64_t score = std::min(CeilDiv(longest, 16) * 16, entry.longest);
  return {score, uniform ? lens.keys() : score};
}

std::vector<Group> GroupBatches(const internal::RowLengths& lens, int64_t batch, int64_t depth,
                                int64_t value_dim) {
  const int64_t queries = lens.queries();
  std::vector<Group> groups;
  for (int64_t b = 0; b < batch; ++b) {
    const auto [longest, mix] = lens.entry(b);
    if (queries > kQueryBlock) {
      // The work of the blocks against the whole entry's.
      double whole =
          static_cast<double>(queries) * static_cast<double>(longest * depth + mix * value_dim);
      double cut = 0;
      for (int64_t i = 0; i < queries; i += kQueryBlock) {
        const int64_t rows = std::min(kQueryBlock, queries - i);
        const auto [score, block_mix] = BlockWidths(lens, b, i, rows);
        cut +=
            static_cast<double>(rows) * static_cast<double>(score * depth + block_mix * value_dim);
      }
      if (cut < kCutWhenBelow * whole) {
        for (int64_t i = 0; i < queries; i += kQueryBlock) {
          const int64_t rows = std::min(kQueryBlock, queries - i);
          const auto [score, block_mix] = BlockWidths(lens, b, i, rows);
          groups.push_back(Group{b, 1, i, rows, score, block_mix, 0, {}});
        }
        continue;
      }
    }
    const Group* last = groups.empty() ? nullptr : &groups.back();
    if (last != nullptr && last->queries == queries && last->score_width == longest &&
        last->mix_width == mix) {
      ++groups.back().count;
    } else {
      groups.push_back(Group{b, 1, 0, queries, longest, mix, 0, {}});
    }
  }
  return groups;
}

}  // namespace

double GemmFlops(const internal::RowLengths& lens, int64_t batch, int64_t depth,
                 int64_t value_dim) {
  double flops = 0;
  for (const Group& g : GroupBatches(lens, batch, depth, value_dim)) {
    flops += 2.0 * static_cast<double>(g.count * g.queries) *
             static_cast<double>(g.score_width * depth + g.mix_width * value_dim);
  }
  return flops;
}

namespace {

// Calls fn(chunk) for pieces of `g` whose scores take about kChunkBytes:
// whole batch entries while they fit, else blocks of queries (whole 16-row
// multiples keep oneDNN's kernels on full tiles). 2 MiB measured fastest on
// the long shape (1, 1024, 4096): smaller blocks make oneDNN's calls too
// short, larger ones spill the scores out of L2 before W V reads them.
template <class Fn>
void ForEachChunk(const Group& g, Fn fn) {
  const int64_t queries = g.queries;
  constexpr int64_t kChunkBytes = int64_t{2} << 20;
  const int64_t row_bytes = 4 * std::max<int64_t>(g.row, 1);
  // But a group of several entries gets about kGroupChunks chunks even when
  // it would fit in one: enough for threads to take whole ones (see
  // DotProductAttention). The cut must not depend on the thread count, or
  // the bits could.
  constexpr int64_t kGroupChunks = 8;
  const int64_t entries =
      std::clamp<int64_t>(kChunkBytes / (queries * row_bytes), 1, CeilDiv(g.count, kGroupChunks));
  int64_t rows = queries;
  if (queries * row_bytes > kChunkBytes) {
    rows = std::min(queries, std::max<int64_t>(16, kChunkBytes / row_bytes / 16 * 16));
  }
  for (int64_t b = 0; b < g.count; b += entries) {
    for (int64_t i = 0; i < queries; i += rows) {
      fn(Chunk{g.first + b, std::min(entries, g.count - b), g.first_query + i,
               std::min(rows, queries - i)});
    }
  }
}

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

}  // namespace

Status GemmPath(const internal::CallContext& call, const ConstTensor& q, const ConstTensor& k,
                const ConstTensor& v, const internal::RowLengths& lens, float scale,
                const Tensor& out, const Tensor& attention) {
  const int64_t depth = q.dims[2], keys = k.dims[1];
  const bool want_attention = !attention.empty();
  std::vector<Group> groups = GroupBatches(lens, q.dims[0], depth, v.dims[2]);

  // Every primitive exists before anything is written, so a failure here
  // leaves the outputs untouched.
  const int64_t value_dim = v.dims[2];
  const bool bf16 = call.options.precision == Precision::kBf16;
  Bf16Inputs rounded;
  if (bf16) rounded.words = matmul::NativeBf16();
  const bool bf16_words = bf16 && rounded.words;  // else fp32 matmuls, on rounded floats
  int64_t scratch_floats = 0;
  Status status;
  for (Group& g : groups) {
    // Scores go to scratch; without a weights output the softmax then runs in
    // place there, so rows are mix_width apart to leave room for it.
    g.row = want_attention ? g.score_width : g.mix_width;
    ForEachChunk(g, [&](const Chunk& c) {
      scratch_floats = std::max(scratch_floats, c.entries * c.rows * g.row);
      if (bf16) rounded.Fit(c, g.score_width, g.mix_width, depth, value_dim);
      const std::pair<int64_t, int64_t> shape{c.entries, c.rows};
      for (const auto& known : g.plans) {
        if (known.first == shape) return;
      }
      Plans plans;
      if (g.score_width > 0) {
        matmul::Problem scores;
        scores.batch = c.entries;
        scores.a = bf16 ? Dense(c.rows, depth) : LayoutOf(q, c.rows, depth);
        // Kᵀ by swapping the strides of K (or of its bf16 copy): no copy.
        scores.b =
            bf16 ? matmul::Layout{depth, g.score_width, g.score_width * depth, 1, depth}
                 : matmul::Layout{depth, g.score_width, k.strides[0], k.strides[2], k.strides[1]};
        scores.c = {c.rows, g.score_width, c.rows * g.row, g.row, 1};
        scores.scale = scale;
        scores.bf16 = bf16_words;
        if (status.ok()) status = matmul::GetPlan(scores, &plans.scores);
      }
      matmul::Problem mix;
      mix.batch = c.entries;
      mix.a = bf16             ? Dense(c.rows, g.mix_width)
              : want_attention ? LayoutOf(attention, c.rows, g.mix_width)
                               : matmul::Layout{c.rows, g.mix_width, c.rows * g.row, g.row, 1};
      mix.b = bf16 ? Dense(g.mix_width, value_dim) : LayoutOf(v, g.mix_width, value_dim);
      mix.c = LayoutOf(out, c.rows, out.dims[2]);
      mix.bf16 = bf16_words;
      if (status.ok()) status = matmul::GetPlan(mix, &plans.mix);
      g.plans.emplace_back(shape, std::move(plans));
    });
    ATTNSCORE_RETURN_IF_ERROR(status);
  }

  // One thread's working set for its chunks: the scores scratch, and in
  // bf16 mode its rounded copies with whose K and V they hold.
  struct ChunkState {
    float* scratch = nullptr;
    Bf16Inputs rounded;
    const Group* rounded_for = nullptr;  // the group whose K and V the copies hold
    int64_t rounded_first = -1, rounded_entries = 0;
  };
  // Runs chunk `c` of `g` on `threads`: scores, softmax, then W V.
  const auto run_chunk = [&](const Group& g, const Chunk& c, int threads,
                             ChunkState& state) -> Status {
    const Plans* plans = nullptr;
    for (const auto& known : g.plans) {
      if (known.first == std::pair{c.entries, c.rows}) plans = &known.second;
    }
    const float* q_chunk = q.data + c.first_batch * q.strides[0] + c.first_query * q.strides[1];
    const float* k_chunk = k.data + c.first_batch * k.strides[0];
    const float* v_chunk = v.data + c.first_batch * v.strides[0];
    Bf16Inputs& rounded = state.rounded;
    // The chunk's (entries, rows, cols) of t, from `data` on.
    const auto part = [&](const ConstTensor& t, const float* data, int64_t rows, int64_t cols) {
      return ConstTensor(data, {c.entries, rows, cols}, {t.strides[0], t.strides[1], t.strides[2]});
    };
    if (bf16) {
      // A cut entry's blocks have widths of their own: copies are per group.
      if (state.rounded_for != &g || state.rounded_first != c.first_batch ||
          state.rounded_entries != c.entries) {
        state.rounded_for = nullptr;  // until both copies are whole
        ATTNSCORE_RETURN_IF_ERROR(RoundToBf16(call.workspace, threads,
                                              part(k, k_chunk, g.score_width, depth), rounded.words,
                                              rounded.k));
        ATTNSCORE_RETURN_IF_ERROR(RoundToBf16(call.workspace, threads,
                                              part(v, v_chunk, g.mix_width, value_dim),
                                              rounded.words, rounded.v));
        state.rounded_for = &g;
        state.rounded_first = c.first_batch;
        state.rounded_entries = c.entries;
      }
      ATTNSCORE_RETURN_IF_ERROR(RoundToBf16(
          call.workspace, threads, part(q, q_chunk, c.rows, depth), rounded.words, rounded.q));
    }
    if (plans->scores) {
      ATTNSCORE_RETURN_IF_ERROR(
          bf16 ? plans->scores->Run(call.workspace, rounded.q, rounded.k, state.scratch)
               : plans->scores->Run(call.workspace, q_chunk, k_chunk, state.scratch));
    }
    const ConstTensor scores(state.scratch, {c.entries, c.rows, g.row});
    const Tensor probabilities =
        want_attention ? Tensor(attention.data + c.first_batch * attention.strides[0] +
                                    c.first_query * attention.strides[1],
                                {c.entries, c.rows, keys},
                                {attention.strides[0], attention.strides[1], attention.strides[2]})
                       : Tensor(state.scratch, {c.entries, c.rows, g.mix_width});
    // P's bf16 words, dense (rows, mix_width): from each softmax row as it
    // is made where the matmuls take bf16 words and the probabilities are
    // that wide (no weights output), else in a pass of their own.
    const bool words_from_rows = bf16_words && !want_attention;
    if (words_from_rows) {
      ATTNSCORE_RETURN_IF_ERROR(SoftmaxRowsAndBf16(call.workspace, scores, probabilities,
                                                   static_cast<uint16_t*>(rounded.p), lens,
                                                   c.first_batch, c.first_query, threads));
    } else {
      ATTNSCORE_RETURN_IF_ERROR(SoftmaxRows(call.workspace, scores, probabilities, lens,
                                            c.first_batch, c.first_query, threads,
                                            /*stream=*/false));
    }
    float* out_chunk = out.data + c.first_batch * out.strides[0] + c.first_query * out.strides[1];
    if (bf16) {
      if (!words_from_rows) {
        ConstTensor mixed = probabilities;
        mixed.dims[2] = g.mix_width;
        ATTNSCORE_RETURN_IF_ERROR(RoundToBf16(call.workspace, threads, mixed, rounded.words,
                                              rounded.p, /*normals=*/true));
      }
      ATTNSCORE_RETURN_IF_ERROR(plans->mix->Run(call.workspace, rounded.p, rounded.v, out_chunk));
    } else {
      ATTNSCORE_RETURN_IF_ERROR(
          plans->mix->Run(call.workspace, probabilities.data, v_chunk, out_chunk));
    }
    // W V ran over the group's mix width: a shorter query's row that a NaN
    // or Inf past its own width made non-finite is redone over its own keys.
    const Tensor out_part(out_chunk, {c.entries, c.rows, value_dim},
                          {out.strides[0], out.strides[1], out.strides[2]});
    return RemixNonFiniteRows(call.workspace, probabilities,
                              part(v, v_chunk, g.mix_width, value_dim), out_part, lens,
                              c.first_batch, c.first_query, bf16, threads);
  };

  std::vector<std::pair<const Group*, Chunk>> chunks;
  for (const Group& g : groups) {
    ForEachChunk(g, [&](const Chunk& c) { chunks.emplace_back(&g, c); });
  }
  double flops = 0;  // as the products count them
  for (const auto& [g, c] : chunks) {
    flops += 2.0 * static_cast<double>(c.entries * c.rows) *
             static_cast<double>(g->score_width * depth + g->mix_width * value_dim);
  }
  const int threads = call.threads();
  const auto chunk_count = static_cast<int64_t>(chunks.size());
  if (internal::ThreadsFor(threads, flops) == 1 || chunk_count < 2 * threads) {
    // Each product and softmax shared by the threads, chunk after chunk.
    ChunkState state;
    state.scratch = call.workspace.Floats(internal::ScratchSlot::kWorkspace,
                                          static_cast<size_t>(scratch_floats));
    state.rounded = rounded;
    if (bf16)
      state.rounded.Carve(call.workspace.Floats(internal::ScratchSlot::kBf16Copies,
                                                static_cast<size_t>(rounded.floats())));
    for (const auto& [g, c] : chunks) ATTNSCORE_RETURN_IF_ERROR(run_chunk(*g, c, threads, state));
    return Status::Ok();
  }
  // Enough chunks for every thread: whole chunks per thread, handed out one
  // at a time. No barrier between a chunk's steps, and its scores stay in
  // the cache of the core that made them (and a thread slowed by a busy
  // core simply takes fewer chunks). Chunks depend on the problem alone and
  // each is computed the same on any thread, so the bits do not change.
  std::vector<ChunkState> states(static_cast<size_t>(threads));
  std::vector<Status> results(chunks.size());
  ATTNSCORE_RETURN_IF_ERROR(internal::ForEachRowInParallel(
      call.workspace, threads, chunk_count, internal::ScratchSlot::kWorkspace,
      static_cast<size_t>(scratch_floats),
      [&](int64_t i, float* scratch) {
        ChunkState& state = states[static_cast<size_t>(internal::ThreadTeam::ThisThread())];
        if (state.scratch == nullptr) {
          state.rounded = rounded;
          try {
            if (bf16)
              state.rounded.Carve(call.workspace.Floats(internal::ScratchSlot::kBf16Copies,
                                                        static_cast<size_t>(rounded.floats())));
          } catch (...) {
            results[static_cast<size_t>(i)] =
                Status::Internal("out of memory for per-thread scratch");
            return;
          }
          state.scratch = scratch;
        }
        // No exception may leave a team thread (oneDNN's bindings and
        // scratchpads allocate on a thread's first run of a primitive).
        try {
          results[static_cast<size_t>(i)] =
              run_chunk(*chunks[static_cast<size_t>(i)].first,
                        chunks[static_cast<size_t>(i)].second, 1, state);
        } catch (...) {
          results[static_cast<size_t>(i)] =
              Status::Internal("a chunk's computation failed (out of memory?)");
        }
      },
      [] {}, internal::Balance::kOneAtATime));
  for (const Status& result : results) ATTNSCORE_RETURN_IF_ERROR(result);
  return Status::Ok();
}

}  // namespace attnscore::ops::dot_product
