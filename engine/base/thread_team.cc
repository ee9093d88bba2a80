#include "base/thread_team.h"

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <system_error>

namespace attnscore::internal {
namespace {

// The index of this thread in the team that started it (0 for a thread no
// team started): the thread's identity, set once when it starts, so it
// carries nothing from one call to the next.
thread_local int this_thread_index = 0;

// Polls done() with pause instructions for about ThreadTeam::kSpinMicros;
// true if it held within that time.
template <class Done>
bool SpinFor(Done done) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::microseconds(ThreadTeam::kSpinMicros);
  for (int i = 1;; ++i) {
    if (done()) return true;
    _mm_pause();
    // The clock costs about 20 ns: read it every 64 pauses (a pause is
    // 10-70 cycles, by CPU).
    if (i % 64 == 0 && std::chrono::steady_clock::now() > deadline) return false;
  }
}

}  // namespace

int ThreadTeam::ThisThread() { return this_thread_index; }

Status ThreadTeam::Create(int threads, std::unique_ptr<ThreadTeam>* team) {
  std::unique_ptr<ThreadTeam> made(new ThreadTeam(threads));
  made->workers_.reserve(static_cast<size_t>(threads - 1));
  for (int t = 1; t < threads; ++t) {
    try {
      made->workers_.emplace_back([raw = made.get(), t] { raw->Serve(t); });
    } catch (const std::system_error& e) {
      const size_t started = made->workers_.size() + 1;
      made.reset();  // stops and joins the workers started
      return Status::Unsupported("cannot start " + std::to_string(threads) + " threads (" +
                                 std::to_string(started) + " started): " + e.code().message());
    }
  }
  *team = std::move(made);
  return Status::Ok();
}

ThreadTeam::~ThreadTeam() {
  stopping_.store(true);
  generation_.fetch_add(1);
  generation_.notify_all();
  for (std::thread& worker : workers_) worker.join();
}

bool ThreadTeam::TryRun(int threads, void (*work)(void*, int), void* context) {
  if (busy_.load(std::memory_order_relaxed) || busy_.exchange(true, std::memory_order_acquire)) {
    return false;
  }
  work_ = work;
  context_ = context;
  region_threads_ = std::min(threads, threads_);
  // Only the caller holding busy_ changes the generation.
  const uint32_t generation = generation_.load(std::memory_order_relaxed) + 1;
  state_.store(uint64_t{generation} << 32 | kOpen, std::memory_order_release);
  // Sequentially consistent with the sleepers' count: either a worker going
  // to sleep sees the new generation, or this sees it counted and wakes it.
  generation_.store(generation);
  if (sleepers_.load() > 0) generation_.notify_all();

  work(context, 0);

  // Closed: no worker joins from here on. Wait for those inside to leave.
  uint64_t state = state_.fetch_and(~kOpen, std::memory_order_acq_rel) & ~kOpen;
  const auto none_inside = [&] {
    state = state_.load(std::memory_order_acquire);
    return (state & kInside) == 0;
  };
  if (!SpinFor(none_inside)) {
    while (!none_inside()) state_.wait(state, std::memory_order_acquire);
  }
  busy_.store(false, std::memory_order_release);
  return true;
}

void ThreadTeam::Serve(int index) {
  this_thread_index = index;
  uint32_t seen = 0;  // the last generation this worker looked at
  for (;;) {
    uint32_t generation = seen;
    const auto changed = [&] {
      generation = generation_.load(std::memory_order_acquire);
      return generation != seen;
    };
    if (!SpinFor(changed)) {
      sleepers_.fetch_add(1);
      while (!changed()) generation_.wait(seen);
      sleepers_.fetch_sub(1);
    }
    if (stopping_.load()) return;
    seen = generation;
    // Join the region if it is still this generation's and open.
    uint64_t state = state_.load(std::memory_order_acquire);
    bool joined = false;
    while (state >> 32 == generation && (state & kOpen) != 0 && !joined) {
      joined = state_.compare_exchange_weak(state, state + 1, std::memory_order_acq_rel,
                                            std::memory_order_acquire);
    }
    if (!joined) continue;
    if (index < region_threads_) work_(context_, index);
    const uint64_t left = state_.fetch_sub(1, std::memory_order_acq_rel) - 1;
    if ((left & (kInside | kOpen)) == 0) state_.notify_all();  // the caller may sleep on it
  }
}

}  // namespace attnscore::internal
