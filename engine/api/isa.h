// The process-wide ISA cap, applied to Highway and oneDNN together.
#ifndef ATTNSCORE_API_ISA_H_
#define ATTNSCORE_API_ISA_H_

#include <cstdint>
#include <string>

#include "attnscore/options.h"
#include "attnscore/status.h"

namespace attnscore::internal {

// Applies `isa` once per process: Highway targets above it are disabled and
// oneDNN is capped. Asking again for the same cap is fine; another cap after
// the first is an error, since oneDNN's cannot change once set. An ISA the
// CPU lacks is an error too.
Status ApplyIsaCap(Isa isa);

// The cap an engine asked for `requested` gets: an explicit cap as given;
// "best" becomes $ATTNSCORE_ISA when that is set, so a process can be capped
// from outside without a rebuild. A name it does not know is an error.
Status ResolveIsa(Isa requested, Isa* effective);

// The Highway targets the applied cap leaves (0: no cap, every target), as
// kernels::SetDispatchTargets takes them. Tests that force one target
// restore this afterwards.
int64_t CapTargets();

// The Highway targets this CPU supports (and the library was built for),
// whatever the cap; as a bit mask and as names, best first ("AVX3 AVX2 ...").
int64_t CpuTargets();
std::string CpuTargetNames();
// The ones the cap allows.
std::string AllowedTargetNames();

}  // namespace attnscore::internal

#endif  // ATTNSCORE_API_ISA_H_
