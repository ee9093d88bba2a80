// The engine's thread team (engine/base/thread_team.h) and the row loop
// over it (engine/base/parallel.h): who runs, how often, and what happens
// when the team is busy or its workers asleep.
#include "base/thread_team.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "base/parallel.h"
#include "base/workspace.h"

namespace attnscore::internal {
namespace {

std::unique_ptr<ThreadTeam> Team(int threads) {
  std::unique_ptr<ThreadTeam> team;
  const Status s = ThreadTeam::Create(threads, &team);
  EXPECT_TRUE(s.ok()) << s.message();
  return team;
}

// The caller is thread 0 and runs work every time; a worker that joins has
// its own index below the region's threads and runs it once; the thread
// that is not a worker of any team says 0.
TEST(ThreadTeam, CallerIsThreadZeroAndWorkersRunOnceEachWithTheirIndex) {
  std::unique_ptr<ThreadTeam> team = Team(4);
  ASSERT_EQ(team->threads(), 4);
  EXPECT_EQ(ThreadTeam::ThisThread(), 0);
  for (int threads : {1, 2, 3, 4, 9}) {
    for (int round = 0; round < 200; ++round) {
      std::atomic<int> runs[4] = {};
      std::atomic<bool> caller_was_zero{false};
      const std::thread::id caller = std::this_thread::get_id();
      auto work = [&](int t) {
        ASSERT_GE(t, 0);
        ASSERT_LT(t, std::min(threads, 4));
        EXPECT_EQ(ThreadTeam::ThisThread(), t);
        if (std::this_thread::get_id() == caller) caller_was_zero = t == 0;
        runs[t].fetch_add(1);
      };
      ASSERT_TRUE(team->TryRun(threads, work));
      EXPECT_TRUE(caller_was_zero);
      EXPECT_EQ(runs[0].load(), 1);
      for (int t = 1; t < 4; ++t) EXPECT_LE(runs[t].load(), t < threads ? 1 : 0) << t;
    }
  }
}

// A region inside a region, or one asked for while another thread's runs,
// is refused at once: its caller then runs the work alone.
TEST(ThreadTeam, IsRefusedWhileBusy) {
  std::unique_ptr<ThreadTeam> team = Team(2);
  bool nested = true;
  auto inner = [](int) {};
  auto outer = [&](int t) {
    if (t == 0) nested = team->TryRun(2, inner);
  };
  ASSERT_TRUE(team->TryRun(2, outer));
  EXPECT_FALSE(nested);

  std::atomic<bool> inside{false}, tried{false};
  bool other = true;
  auto hold = [&](int t) {
    if (t != 0) return;
    inside = true;
    while (!tried) std::this_thread::yield();
  };
  std::thread holder([&] { EXPECT_TRUE(team->TryRun(2, hold)); });
  while (!inside) std::this_thread::yield();
  auto none = [](int) {};
  other = team->TryRun(2, none);
  tried = true;
  holder.join();
  EXPECT_FALSE(other);
  EXPECT_TRUE(team->TryRun(2, none)) << "free again once the region ended";
}

// Every row once, whatever the balance, thread count (more threads than
// shares of rows too: kRowShares) and number of rows, over many regions;
// some regions start after the workers went to sleep, so that the threads
// awake take the rows of the shares of those still waking.
TEST(ThreadTeam, ForEachRowRunsEveryRowExactlyOnce) {
  static_assert(kRowShares < 20);
  for (int threads : {2, 3, 8, 20}) {
    std::unique_ptr<ThreadTeam> team = Team(threads);
    Workspace workspace(threads, team.get());
    for (Balance balance : {Balance::kRuns, Balance::kOneAtATime}) {
      for (int64_t rows : {int64_t{0}, int64_t{1}, int64_t{2}, int64_t{7}, int64_t{1000}}) {
        for (int round = 0; round < 50; ++round) {
          if (round % 10 == 9) {
            std::this_thread::sleep_for(std::chrono::microseconds(3 * ThreadTeam::kSpinMicros));
          }
          std::vector<std::atomic<int>> seen(static_cast<size_t>(rows));
          std::atomic<int> afters{0};
          const Status s = ForEachRowInParallel(
              workspace, threads, rows, ScratchSlot::kRowBuffer, 16,
              [&](int64_t r, float* scratch) {
                scratch[15] = 1.0f;  // each thread's own scratch
                seen[static_cast<size_t>(r)].fetch_add(1);
              },
              [&] { afters.fetch_add(1); }, balance);
          ASSERT_TRUE(s.ok()) << s.message();
          for (int64_t r = 0; r < rows; ++r) {
            ASSERT_EQ(seen[static_cast<size_t>(r)].load(), 1) << "row " << r << " of " << rows;
          }
          EXPECT_GE(afters.load(), 1);
          EXPECT_LE(afters.load(), threads);
        }
      }
    }
  }
}

// Teams are independent: two callers, each with a team of its own and of a
// different size, run regions at the same time (ThreadSanitizer runs this).
TEST(ThreadTeam, TwoTeamsOfDifferentSizesRunAtOnce) {
  std::unique_ptr<ThreadTeam> a = Team(2), b = Team(3);
  const auto serve = [](ThreadTeam* team) {
    Workspace workspace(team->threads(), team);
    for (int round = 0; round < 300; ++round) {
      std::vector<int64_t> out(257, 0);
      const Status s = ForEachRowInParallel(
          workspace, team->threads(), 257, ScratchSlot::kRowBuffer, 0,
          [&](int64_t r, float*) { out[static_cast<size_t>(r)] = r * r; }, [] {});
      ASSERT_TRUE(s.ok());
      for (int64_t r = 0; r < 257; ++r) ASSERT_EQ(out[static_cast<size_t>(r)], r * r);
    }
  };
  std::thread first(serve, a.get()), second(serve, b.get());
  first.join();
  second.join();
}

// A team whose workers sleep is destroyed (its workers woken and joined),
// and so is one that was never used; a hang here fails by ctest's timeout.
TEST(ThreadTeam, StopsWhetherItsWorkersSleepOrWereNeverUsed) {
  std::unique_ptr<ThreadTeam> used = Team(3), unused = Team(3);
  auto none = [](int) {};
  ASSERT_TRUE(used->TryRun(3, none));
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  used.reset();
  unused.reset();
  EXPECT_EQ(used, nullptr);
}

}  // namespace
}  // namespace attnscore::internal
