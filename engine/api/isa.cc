#include "api/isa.h"

#include <cstdlib>
#include <mutex>
#include <optional>

#include "hwy/highway.h"
#include "hwy/targets.h"
#include "kernels/dispatch.h"
#include "matmul/matmul.h"

namespace attnscore::internal {
namespace {

// Highway targets that a cap allows. Scalar keeps only the portable targets.
int64_t AllowedTargets(Isa isa) {
  const int64_t portable = HWY_SCALAR | HWY_EMU128;
  switch (isa) {
    case Isa::kScalar: return portable;
    case Isa::kSse4: return portable | HWY_SSSE3 | HWY_SSE4;
    case Isa::kAvx2: return portable | HWY_SSSE3 | HWY_SSE4 | HWY_AVX2;
    case Isa::kAvx512:
    case Isa::kBest: return ~int64_t{0};
  }
  return ~int64_t{0};
}

// The target a cap needs from the CPU to mean what it says.
int64_t RequiredTarget(Isa isa) {
  switch (isa) {
    case Isa::kSse4: return HWY_SSE4;
    case Isa::kAvx2: return HWY_AVX2;
    case Isa::kAvx512: return HWY_AVX3;
    default: return 0;
  }
}

}  // namespace

Status ResolveIsa(Isa requested, Isa* effective) {
  *effective = requested;
  if (requested != Isa::kBest) return Status::Ok();
  const char* env = std::getenv("ATTNSCORE_ISA");
  if (env == nullptr || *env == '\0') return Status::Ok();
  if (!ParseIsa(env, effective)) {
    return Status::InvalidArgument(std::string("ATTNSCORE_ISA is '") + env +
                                   "'; want scalar, sse4, avx2, avx512 or best");
  }
  return Status::Ok();
}

namespace {
std::mutex cap_mutex;
std::optional<Isa> applied_cap;  // set once, by the first engine
}  // namespace

int64_t CapTargets() {
  std::lock_guard<std::mutex> lock(cap_mutex);
  if (!applied_cap || *applied_cap == Isa::kBest) return 0;
  return CpuTargets() & AllowedTargets(*applied_cap);
}

Status ApplyIsaCap(Isa isa) {
  std::lock_guard<std::mutex> lock(cap_mutex);
  if (applied_cap) {
    if (*applied_cap == isa) return Status::Ok();
    return Status::Unsupported(std::string("the ISA cap is process-wide and already '") +
                               IsaName(*applied_cap) + "'; cannot change it to '" +
                               IsaName(isa) + "'");
  }
  const int64_t required = RequiredTarget(isa);
  if (required != 0 && (CpuTargets() & required) == 0) {
    return Status::Unsupported(std::string("this CPU does not support ISA '") +
                               IsaName(isa) + "' (supported: " +
                               CpuTargetNames() + ")");
  }
  // "best" leaves both libraries as the host set them (ONEDNN_MAX_CPU_ISA,
  // targets the host disabled), and works even if the host used oneDNN first.
  if (isa != Isa::kBest) {
    ATTNSCORE_RETURN_IF_ERROR(matmul::SetMaxIsa(isa));
    // The kernels index their dispatch tables by this mask (kernels/dispatch.h).
    kernels::SetDispatchTargets(CpuTargets() & AllowedTargets(isa));
  }
  applied_cap = isa;
  return Status::Ok();
}

namespace {
std::string NamesOf(int64_t targets) {
  std::string names;
  for (int64_t bits = targets & HWY_TARGETS; bits != 0; bits &= bits - 1) {
    const int64_t target = bits & -bits;
    names += (names.empty() ? "" : " ") + std::string(hwy::TargetName(target));  // best first
  }
  return names;
}
}  // namespace

int64_t CpuTargets() { return kernels::CpuTargets(); }

std::string CpuTargetNames() { return NamesOf(CpuTargets()); }

std::string AllowedTargetNames() { return NamesOf(kernels::DispatchTargets()); }

}  // namespace attnscore::internal
