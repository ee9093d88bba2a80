// A fuzz input as a file: the readers take paths, so each input is written to
// an in-memory file (memfd) and read back through /proc/self/fd. No disk,
// and nothing left behind.
#ifndef ATTNSCORE_TESTS_FUZZ_FUZZ_INPUT_H_
#define ATTNSCORE_TESTS_FUZZ_FUZZ_INPUT_H_

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace attnscore::fuzz {

// The path of a file holding exactly `data`. One file per process, rewritten
// for each input.
inline std::string AsFile(const uint8_t* data, size_t size) {
  static const int fd = memfd_create("attnscore_fuzz", 0);
  if (fd < 0 || ftruncate(fd, 0) != 0) std::abort();
  for (size_t done = 0; done < size;) {
    const ssize_t n = pwrite(fd, data + done, size - done, static_cast<off_t>(done));
    if (n <= 0) std::abort();
    done += static_cast<size_t>(n);
  }
  return "/proc/self/fd/" + std::to_string(fd);
}

}  // namespace attnscore::fuzz

#endif  // ATTNSCORE_TESTS_FUZZ_FUZZ_INPUT_H_
