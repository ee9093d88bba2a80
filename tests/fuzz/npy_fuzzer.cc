// libFuzzer target: npy::ReadNpy on arbitrary bytes must return a Status (no
// crash, no sanitizer report, no allocation driven by a claimed shape), and
// what it accepts must be self-consistent.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "fuzz_input.h"
#include "npy/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  attnscore::npy::NpyArray array;
  const attnscore::Status s = attnscore::npy::ReadNpy(attnscore::fuzz::AsFile(data, size), &array);
  if (s.ok()) {
    // The payload is the claimed shape's elements, no more, no less, and
    // the file held at least that many bytes.
    const size_t bytes = static_cast<size_t>(array.size()) * attnscore::npy::DTypeSize(array.dtype);
    if (array.bytes.size() != bytes || bytes > size) std::abort();
  } else if (s.message().empty()) {
    std::abort();  // every refusal says why
  }
  return 0;
}
