// Everything an embedding program needs.
#ifndef ATTNSCORE_ATTNSCORE_H_
#define ATTNSCORE_ATTNSCORE_H_

#include "attnscore/additive.h"
#include "attnscore/bilinear.h"
#include "attnscore/cancel.h"
#include "attnscore/catalogue.h"
#include "attnscore/concat.h"
#include "attnscore/engine.h"
#include "attnscore/kv_cache.h"
#include "attnscore/multihead.h"
#include "attnscore/multihead_options.h"
#include "attnscore/status.h"
#include "attnscore/tensor.h"
#include "attnscore/valid_lens.h"
#include "attnscore/version.h"

#endif  // ATTNSCORE_ATTNSCORE_H_
