// The codes an int8 KvCache holds (docs/semantics.md section 5.3), as the
// row kernels read them (attention_row.h: Int8Keys, Int8Values). Scalar:
// each element is coded once per append, where decoding reads it at every
// step.
#ifndef ATTNSCORE_KERNELS_INT8_H_
#define ATTNSCORE_KERNELS_INT8_H_

#include <cstddef>
#include <cstdint>

namespace attnscore::kernels {

// A group of `rows` <= kCachedKeyGroup key positions of one head, `depth`
// finite floats each, `row_stride` apart in `keys`: per channel d, lo[d] =
// the group's least element and step[d] = (greatest − lo[d]) / 255, written
// to params as lo, then step (2 · depth floats); and, channel-major as the
// kernels read them (attention_row.h: Int8Keys), codes[d · kCachedKeyGroup +
// t] = the code 0..255 nearest to (keys[t][d] − lo[d]) / step[d] (0 where
// step[d] is 0). Each element is then within step[d] / 2 of what it stands
// for, lo[d] + step[d] · code, up to float rounding.
void CodeKeyGroup(const float* keys, int64_t row_stride, size_t rows, size_t depth, uint8_t* codes,
                  float* params);

// One value row of `n` finite floats, `step` apart in `values`: *scale =
// max |x| / 127 and codes[c] = the code -127..127 nearest to x[c] / *scale
// (0 where *scale is 0), each element within *scale / 2 of scale · code.
void CodeValueRow(const float* values, int64_t step, size_t n, int8_t* codes, float* scale);

}  // namespace attnscore::kernels

#endif  // ATTNSCORE_KERNELS_INT8_H_
