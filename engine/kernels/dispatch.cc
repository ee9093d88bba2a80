#include "kernels/dispatch.h"

#include <atomic>

namespace attnscore::kernels {
namespace {

// 0 until narrowed: every target of the CPU.
std::atomic<int64_t> narrowed{0};

}  // namespace

int64_t CpuTargets() {
  static const int64_t targets = hwy::SupportedTargets();
  return targets;
}

int64_t DispatchTargets() {
  const int64_t targets = narrowed.load(std::memory_order_relaxed);
  return targets != 0 ? targets : CpuTargets();
}

void SetDispatchTargets(int64_t targets) { narrowed.store(targets, std::memory_order_relaxed); }

}  // namespace attnscore::kernels
