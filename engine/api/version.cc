// The version compiled into the library (attnscore/version.h).
#include "attnscore/version.h"

namespace attnscore {

const char* Version() { return ATTNSCORE_VERSION_STRING; }

}  // namespace attnscore
