// The tile path's sizes (dot_product_tile_plan.cc), for its run
// (dot_product_tiles.cc); UseTilePath and EvenEntryRanges, which the plan
// defines too, are declared in dot_product_paths.h.
#ifndef ATTNSCORE_OPS_DOT_PRODUCT_TILE_PLAN_H_
#define ATTNSCORE_OPS_DOT_PRODUCT_TILE_PLAN_H_

#include <cstdint>

#include "attnscore/tensor.h"

namespace attnscore::ops::dot_product {

// The floats of an entry's copy of K: only where its columns are strided.
int64_t CopiedKeysFloats(const ConstTensor& q, const ConstTensor& k);

// A query tile's scores: 2L per key of a block (tile_key_blocks.h).
int64_t TileScoresFloats(const ConstTensor& k);

// Whether the tile path packs V (kernels::PackValues): where it must
// (strided columns), or where that pays and fits in the kept scratch (past
// kTileKeyBlock keys, in kTilePathMaxLongPackedFloats).
bool PacksValues(const ConstTensor& q, const ConstTensor& k, const ConstTensor& v);

// The floats of the copied K (where CopiedKeysFloats) and of the packed V
// (where PacksValues) for every entry of a call.
int64_t PackedFloats(const ConstTensor& q, const ConstTensor& k, const ConstTensor& v);

}  // namespace attnscore::ops::dot_product

#endif  // ATTNSCORE_OPS_DOT_PRODUCT_TILE_PLAN_H_
