#include "api/isa.h"

#include <mutex>
#include <optional>

#include "hwy/highway.h"
#include "hwy/targets.h"
#include "matmul/matmul.h"

namespace attnscore {
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

const char* IsaName(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return "scalar";
    case Isa::kSse4: return "sse4";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
    case Isa::kBest: return "best";
  }
  return "unknown";
}

bool ParseIsa(const std::string& name, Isa* isa) {
  for (Isa candidate : {Isa::kScalar, Isa::kSse4, Isa::kAvx2, Isa::kAvx512, Isa::kBest}) {
    if (name == IsaName(candidate)) {
      *isa = candidate;
      return true;
    }
  }
  return false;
}

Status ApplyIsaCap(Isa isa) {
  static std::mutex mutex;
  static std::optional<Isa> applied;
  std::lock_guard<std::mutex> lock(mutex);
  if (applied) {
    if (*applied == isa) return Status::Ok();
    return Status::Unsupported(std::string("the ISA cap is process-wide and already '") +
                               IsaName(*applied) + "'; cannot change it to '" +
                               IsaName(isa) + "'");
  }
  const int64_t required = RequiredTarget(isa);
  if (required != 0 && (hwy::SupportedTargets() & required) == 0) {
    return Status::Unsupported(std::string("this CPU does not support ISA '") +
                               IsaName(isa) + "' (supported: " +
                               SupportedTargetNames() + ")");
  }
  // "best" leaves both libraries as the host set them (ONEDNN_MAX_CPU_ISA,
  // targets the host disabled), and works even if the host used oneDNN first.
  if (isa != Isa::kBest) {
    ATTNSCORE_RETURN_IF_ERROR(matmul::SetMaxIsa(isa));
    hwy::DisableTargets(~AllowedTargets(isa));
  }
  applied = isa;
  return Status::Ok();
}

std::string SupportedTargetNames() {
  std::string names;
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    if (!names.empty()) names += " ";
    names += hwy::TargetName(target);
  }
  return names;
}

}  // namespace attnscore
