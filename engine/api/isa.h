// The process-wide ISA cap, applied to Highway and oneDNN together.
#ifndef ATTNSCORE_API_ISA_H_
#define ATTNSCORE_API_ISA_H_

#include <string>

#include "attnscore/engine.h"
#include "attnscore/status.h"

namespace attnscore {

// Applies `isa` once per process: Highway targets above it are disabled and
// oneDNN is capped. Asking again for the same cap is fine; another cap after
// the first is an error, since oneDNN's cannot change once set. An ISA the
// CPU lacks is an error too.
Status ApplyIsaCap(Isa isa);

// The Highway targets this CPU supports, best first ("AVX3 AVX2 SSE4 ...").
std::string SupportedTargetNames();

}  // namespace attnscore

#endif  // ATTNSCORE_API_ISA_H_
