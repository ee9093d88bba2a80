// Parsing the JSON header of a .safetensors file (the layout is described in
// io/safetensors.h). nlohmann-json reads the JSON; a SAX handler accepts
// exactly the format's structure as it goes, so duplicate keys are seen (a
// DOM would keep one silently) and a value nested where none may be stops
// the parse at once, whatever its depth.
//
// The rules: the header is one JSON object starting at its first byte and
// followed only by space padding. Each member is either "__metadata__", an
// object of string values, or a tensor: an object with exactly the keys
// "dtype" (a string), "shape" (at most kMaxSafetensorsRank integers) and
// "data_offsets" (two integers [begin, end]). Integers are plain
// non-negative decimals without leading zeros, at most 2^53. Tensor names
// are non-empty; no key appears twice in any object; strings are valid
// UTF-8. Whether the dtypes, shapes and offsets fit the data buffer is for
// the reader to check (io/safetensors.cc).
#ifndef ATTNSCORE_IO_SAFETENSORS_HEADER_H_
#define ATTNSCORE_IO_SAFETENSORS_HEADER_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "attnscore/status.h"
#include "io/safetensors.h"

namespace attnscore::io {

// One tensor as the header describes it.
struct SafetensorsEntry {
  std::string name;            // non-empty, not "__metadata__"
  std::string dtype;           // as in the file, e.g. "F32"
  std::vector<int64_t> shape;  // () for a scalar
  int64_t begin = 0;           // data_offsets, relative to the data buffer,
  int64_t end = 0;             // end exclusive; both at most 2^53
};

struct SafetensorsHeader {
  std::vector<SafetensorsEntry> entries;  // in the order of the file
  SafetensorsMetadata metadata;           // empty if the file has none
};

// Parses `text`, the header's bytes, by the rules above. Failures are
// InvalidArgument with one line "<path>: malformed header: <what is wrong>
// (at offset N of the header)", naming the tensor where there is one and
// showing text taken from the file escaped. `*header` is changed only on
// success.
Status ParseSafetensorsHeader(const std::string& path, std::string_view text,
                              SafetensorsHeader* header);

}  // namespace attnscore::io

#endif  // ATTNSCORE_IO_SAFETENSORS_HEADER_H_
