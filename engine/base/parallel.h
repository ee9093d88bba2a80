// Rows of work shared among the threads of a call's team.
#ifndef ATTNSCORE_BASE_PARALLEL_H_
#define ATTNSCORE_BASE_PARALLEL_H_

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <new>

#include "attnscore/status.h"
#include "base/call_scope.h"
#include "base/thread_team.h"
#include "base/workspace.h"

namespace attnscore::internal {

// The threads worth waking for `work` of a call: a second thread costs
// 1-3 µs to wake, share the rows with and join (a Zen 5 under KVM, where a
// cache line takes about 250 ns from one core to the other), so work under
// `bar` (in the same unit) stays on the caller's thread. The default bar,
// kMinSharedFlops, is only 0.5-2 µs of work at the kernels' rates: the dot
// product's row and tile paths and additive attention's scores pass bars
// of their own, measured (ops/dot_product_paths.h, ops/additive.cc).
constexpr double kMinSharedFlops = 1e5;
inline int ThreadsFor(int threads, double work, double bar = kMinSharedFlops) {
  return work < bar ? 1 : threads;
}

// Runs body(row, scratch) for every row in [0, rows) on up to `threads`
// threads of the call's team (at most the engine's), each with denormals
// flushed and its own scratch of `scratch_floats` in `slot` of the call's
// `workspace` (a null pointer when 0); then after() once on each thread
// that ran. With `Balance::kRuns`, for rows of about equal cost, the rows
// are cut into contiguous shares, one for each thread (up to kRowShares),
// each with a counter of its own: a thread takes runs of about a quarter
// of a share from its own, then from the others' in turn. So a call's rows
// go to the same threads from one call to the next, whose caches hold what
// those rows read and wrote last time, and neighbouring rows share a core's
// caches and prefetch streams. With `Balance::kOneAtATime`, for rows of
// very unequal cost, every thread takes one row at a time from one counter
// (shares cut in advance made additive attention's 4 entries of unequal
// lengths 1.25x slower on 2 threads). Either way a thread the scheduler
// holds off costs the call only the rows it took. Each row's result never
// depends on which thread ran it, so the bits are the same for any thread
// count and any schedule. Where the team is busy (a concurrent call on
// the same engine, or a region inside a region) the caller runs every row
// itself. No exception may leave a thread: one that cannot allocate its
// scratch takes no rows and the call reports it (the other rows stay
// written). Each thread checks the call's cancel token before each row;
// once it is set, no thread starts another row, and the loop returns
// StatusCode::kCancelled if any row was left.
enum class Balance { kRuns, kOneAtATime };
constexpr int kRowShares = 16;
// A share of a loop's rows: the next row to take, and the end; a cache line
// of its own, so that each thread counts on its own line.
struct alignas(64) RowShare {
  std::atomic<int64_t> next;
  int64_t end;
};
template <class Body, class After>
Status ForEachRowInParallel(Workspace& workspace, int threads, int64_t rows, ScratchSlot slot,
                            size_t scratch_floats, Body body, After after,
                            Balance balance = Balance::kRuns) {
  std::atomic<bool> out_of_memory{false};
  const auto scratch_or_null = [&](float** scratch) {
    *scratch = nullptr;
    try {
      if (scratch_floats > 0) *scratch = workspace.Floats(slot, scratch_floats);
      return true;
    } catch (const std::bad_alloc&) {
      out_of_memory.store(true, std::memory_order_relaxed);
      return false;
    }
  };
  std::atomic<bool> skipped{false};
  const CancelToken* const cancel = workspace.cancel_token();
  const auto run_rows = [&](int64_t first, int64_t last, float* scratch) {
    for (int64_t r = first; r < last; ++r) {
      if (cancel != nullptr && cancel->cancelled()) {
        skipped.store(true, std::memory_order_relaxed);
        return false;
      }
      body(r, scratch);
    }
    return true;
  };
  const auto result = [&] {
    if (out_of_memory) return Status::Internal("out of memory for per-thread scratch");
    if (skipped) return Status::Cancelled("cancelled");
    return Status::Ok();
  };
  ThreadTeam* team = workspace.team();
  threads = static_cast<int>(std::min<int64_t>(threads, rows));
  if (threads > 1 && team != nullptr) {
    const int64_t grain =
        balance == Balance::kOneAtATime ? 1 : std::max<int64_t>(1, rows / (4 * int64_t{threads}));
    // Threads t and t + shares share one share; kOneAtATime, one for all.
    const int shares = balance == Balance::kRuns ? std::min(threads, kRowShares) : 1;
    RowShare share[kRowShares];
    for (int s = 0; s < shares; ++s) {
      share[s].next.store(rows * s / shares, std::memory_order_relaxed);
      share[s].end = rows * (s + 1) / shares;
    }
    auto work = [&](int t) {
      FlushDenormals flush;  // MXCSR is per thread
      float* scratch;
      if (!scratch_or_null(&scratch)) return;
      const auto take_all = [&](RowShare& from) {
        for (int64_t first;
             (first = from.next.fetch_add(grain, std::memory_order_relaxed)) < from.end;) {
          if (!run_rows(first, std::min(from.end, first + grain), scratch)) return false;
        }
        return true;
      };
      for (int i = 0; i < shares; ++i) {
        if (!take_all(share[(t + i) % shares])) break;  // cancelled
      }
      after();
    };
    if (team->TryRun(threads, work)) return result();
  }
  // Alone: no counter, no other thread.
  FlushDenormals flush;
  float* scratch;
  if (!scratch_or_null(&scratch)) return Status::Internal("out of memory for per-thread scratch");
  run_rows(0, rows, scratch);
  after();
  return result();
}

}  // namespace attnscore::internal

#endif  // ATTNSCORE_BASE_PARALLEL_H_
