// Which compiled target each Highway kernel runs: the best one this CPU has
// among the targets the process's ISA cap allows.
//
// HWY_DYNAMIC_DISPATCH indexes an HWY_EXPORT table by Highway's own chosen
// target, which follows hwy::SupportedTargets(): every call of it, by
// attnscore or by any other user of Highway in the process, re-chooses from
// all the CPU's targets (Highway 1.0.3's DisableTargets is applied after
// that choice, so it does not reach dispatch). The kernels index the same
// tables by a mask of their own instead (ATTNSCORE_DISPATCH), set once by
// the first engine's cap: a process-wide setting, as oneDNN's ISA is, and
// nothing Highway's test hook (SetSupportedTargetsForTest) is needed for.
#ifndef ATTNSCORE_KERNELS_DISPATCH_H_
#define ATTNSCORE_KERNELS_DISPATCH_H_

#include <cstdint>

#include "hwy/targets.h"

namespace attnscore::kernels {

// The Highway targets this CPU supports and the library was built for
// (HWY_TARGETS bits), detected once.
int64_t CpuTargets();

// The targets the kernels may run: the CPU's, until SetDispatchTargets
// narrows them.
int64_t DispatchTargets();

// Narrows the kernels to `targets` (the cap, or one target a test forces);
// 0 gives back every target of the CPU.
void SetDispatchTargets(int64_t targets);

// The index of the best allowed target in an HWY_EXPORT table of a
// translation unit whose compiled targets are `compiled_mask`
// (HWY_CHOSEN_TARGET_MASK_TARGETS there): as hwy::ChosenTarget::GetIndex,
// with the mask laid out as ChosenTarget::Update lays it.
inline size_t DispatchIndex(int64_t compiled_mask) {
  const int64_t chosen = HWY_CHOSEN_TARGET_SHIFT(DispatchTargets()) | HWY_CHOSEN_TARGET_MASK_SCALAR;
  return hwy::Num0BitsBelowLS1Bit_Nonzero64(static_cast<uint64_t>(chosen & compiled_mask));
}

}  // namespace attnscore::kernels

// HWY_DYNAMIC_DISPATCH(FUNC), by the kernels' own mask.
#define ATTNSCORE_DISPATCH(FUNC_NAME) \
  (*(HWY_DISPATCH_TABLE(              \
      FUNC_NAME)[::attnscore::kernels::DispatchIndex(HWY_CHOSEN_TARGET_MASK_TARGETS)]))

#endif  // ATTNSCORE_KERNELS_DISPATCH_H_
