// The threads an engine owns, and how one call's work is shared among them.
#ifndef ATTNSCORE_BASE_THREAD_TEAM_H_
#define ATTNSCORE_BASE_THREAD_TEAM_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "attnscore/status.h"

namespace attnscore::internal {

// A calling thread (thread 0) and `threads` - 1 workers the team starts and
// keeps until it is destroyed. One region runs on it at a time:
//
//   work(t) runs once on each thread that joins the region, t its index in
//   the team: the caller always (t = 0), and each worker t < `threads` that
//   wakes while the caller is still working. A worker that wakes later, held
//   off its core by the scheduler, is not waited for, so work(t) must share
//   its tasks through a counter (ForEachRowInParallel does) rather than
//   count on t's share being done by t.
//
// Run returns when every thread that joined has left work(). Workers spin
// for about kSpinMicros after a region, so back-to-back calls do not pay a
// wake-up, then sleep on a futex: an idle engine takes no CPU.
class ThreadTeam {
 public:
  // How long a worker polls for the next region before it sleeps, and how
  // long the caller polls for the workers to leave before it sleeps.
  static constexpr int kSpinMicros = 100;

  // Starts `threads` - 1 workers. A system that cannot start them gets an
  // Unsupported Status naming the reason, and no team.
  static Status Create(int threads, std::unique_ptr<ThreadTeam>* team);
  ~ThreadTeam();  // stops and joins the workers
  ThreadTeam(const ThreadTeam&) = delete;
  ThreadTeam& operator=(const ThreadTeam&) = delete;

  int threads() const { return threads_; }

  // Runs work(t) on the caller and up to `threads` - 1 workers (as above),
  // and returns true; or returns false at once, running nothing, when a
  // region is running already: a call made at the same time by another
  // thread, or from inside a region. Such a caller runs its tasks alone,
  // which gives the same bits (results never depend on the thread count)
  // and keeps the process at the team's threads.
  template <class Work>
  bool TryRun(int threads, Work& work) {
    return TryRun(threads, &Call<Work>, &work);
  }

  // The index of the calling thread in the team that started it; 0 for a
  // thread no team started.
  static int ThisThread();

 private:
  explicit ThreadTeam(int threads) : threads_(threads) {}
  template <class Work>
  static void Call(void* work, int t) {
    (*static_cast<Work*>(work))(t);
  }
  bool TryRun(int threads, void (*work)(void*, int), void* context);
  void Serve(int index);

  // state_: the region's generation (high 32 bits), whether it is open to
  // joiners (bit 31), and how many workers are inside it (low 31 bits). A
  // worker joins by one compare-exchange that checks the first two, so it
  // reads the region's fields only while the caller waits for it.
  static constexpr uint64_t kOpen = uint64_t{1} << 31;
  static constexpr uint64_t kInside = kOpen - 1;

  const int threads_;
  std::vector<std::thread> workers_;
  std::atomic<bool> busy_{false};  // a region is running
  std::atomic<uint64_t> state_{0};
  std::atomic<uint32_t> generation_{0};  // what sleeping workers wait on
  std::atomic<int> sleepers_{0};
  std::atomic<bool> stopping_{false};
  // The running region's fields: written by its caller before it opens.
  void (*work_)(void*, int) = nullptr;
  void* context_ = nullptr;
  int region_threads_ = 0;
};

}  // namespace attnscore::internal

#endif  // ATTNSCORE_BASE_THREAD_TEAM_H_
