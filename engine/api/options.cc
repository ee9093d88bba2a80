// The public names of the options' enums.
#include "attnscore/options.h"

#include <string>

namespace attnscore {

const char* IsaName(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return "scalar";
    case Isa::kSse4:
      return "sse4";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
    case Isa::kBest:
      return "best";
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

const char* PrecisionName(Precision precision) {
  switch (precision) {
    case Precision::kBf16:
      return "bf16";
    case Precision::kInt8:
      return "int8";
    default:
      return "fp32";
  }
}

bool ParsePrecision(const std::string& name, Precision* precision) {
  for (Precision candidate : {Precision::kFp32, Precision::kBf16, Precision::kInt8}) {
    if (name == PrecisionName(candidate)) {
      *precision = candidate;
      return true;
    }
  }
  return false;
}

}  // namespace attnscore
