// libFuzzer target: io::ReadSafetensors on arbitrary bytes must return a
// Status (no crash, no sanitizer report), and what it accepts must be
// self-consistent: each tensor's data is its shape's floats, inside the file.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "fuzz_input.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<attnscore::io::SafetensorsTensor> tensors;
  attnscore::io::SafetensorsMetadata metadata;
  const attnscore::Status s =
      attnscore::io::ReadSafetensors(attnscore::fuzz::AsFile(data, size), &tensors, &metadata);
  if (!s.ok()) {
    if (s.message().empty()) std::abort();  // every refusal says why
    return 0;
  }
  size_t total = 0;
  for (const auto& t : tensors) {
    size_t elements = 1;
    for (int64_t d : t.shape) {
      if (d < 0) std::abort();
      elements *= static_cast<size_t>(d);
    }
    if (t.data.size() != elements) std::abort();
    total += elements * sizeof(float);
  }
  if (total > size) std::abort();
  return 0;
}
