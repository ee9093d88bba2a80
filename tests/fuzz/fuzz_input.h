// A fuzz input as a file: the readers take paths, so each input is written to
// an in-memory file (memfd) and read back through /proc/self/fd. No disk,
// and nothing left behind.
#ifndef ATTNSCORE_TESTS_FUZZ_FUZZ_INPUT_H_
#define ATTNSCORE_TESTS_FUZZ_FUZZ_INPUT_H_

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
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
  static const std::string path = "/proc/self/fd/" + std::to_string(fd);
  // Without /proc every input would be refused as unopenable and the
  // fuzzer would run green without reaching the parser: stop instead.
  static const bool reachable = [] {
    const int reopened = open(path.c_str(), O_RDONLY);
    if (reopened < 0) {
      std::fprintf(stderr, "fuzz_input: cannot open %s; is /proc mounted?\n", path.c_str());
      std::abort();
    }
    close(reopened);
    return true;
  }();
  (void)reachable;
  return path;
}

}  // namespace attnscore::fuzz

#endif  // ATTNSCORE_TESTS_FUZZ_FUZZ_INPUT_H_
