// Private helpers shared by the file formats in engine/io (npy, safetensors):
// message and Status builders, overflow-checked sizes, and POSIX file access
// that retries EINTR and short transfers. Not part of the public API.
#ifndef ATTNSCORE_BASE_FILE_IO_H_
#define ATTNSCORE_BASE_FILE_IO_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "attnscore/status.h"

namespace attnscore::internal {

// ---------------------------------------------------------------------------
// Messages

// At most the first `max_shown` bytes of `text`, with every byte outside
// printable ASCII (and the backslash) written as "\xNN", then "..." if text
// was cut: bytes taken from a file keep a message one short, clean line.
std::string Printable(std::string_view text, size_t max_shown);

// `shape` in Python tuple syntax, as numpy headers and torch sizes show it:
// "()", "(3,)", "(2, 3)". With `wildcards`, a -1 dim is written "any".
std::string FormatShape(const std::vector<int64_t>& shape, bool wildcards = false);

// InvalidArgument with the message "<path>: <what>".
Status Malformed(const std::string& path, const std::string& what);

// IoError with the message "<path>: <what>: <the description of errno err>".
Status IoFailure(const std::string& path, const std::string& what, int err);

// ---------------------------------------------------------------------------
// Sizes

// Sets *product = a * b for non-negative a and b and returns true; returns
// false, leaving *product alone, when the product exceeds int64.
bool MulNonNegative(int64_t a, int64_t b, int64_t* product);

// Sets *product = factor * (the product of `shape`'s dims), for non-negative
// factor and dims, and returns true; false on int64 overflow.
// Zero dims are skipped while multiplying, so (2^62, 2^62, 0) still counts as
// overflow: code computing strides from such a shape would overflow too.
bool ShapeProduct(const std::vector<int64_t>& shape, int64_t factor, int64_t* product);

// ---------------------------------------------------------------------------
// Files

// Owns a file descriptor (negative: none) and closes it on destruction.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd();
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;

  int get() const { return fd_; }

  // Closes now and returns close()'s errno, 0 on success: some filesystems
  // (NFS) report a failed write only here.
  int Close();

 private:
  int fd_;
};

// Opens `path` read-only into *fd (without blocking on a FIFO) and sets
// *file_size. Fails with IoError "<path>: cannot open: ...", "cannot stat:
// ..." or "cannot read: not a regular file"; *fd then closes on its own.
Status OpenForRead(const std::string& path, std::optional<Fd>* fd, uint64_t* file_size);

// Reads exactly `n` bytes at `offset` into `buf`, retrying short reads and
// EINTR. Callers checked the sizes against fstat, so reaching end of file is
// an IoError "<path>: read failed: file shrank while reading"; a failed
// pread is IoError "<path>: read failed: ...".
Status ReadExactly(const std::string& path, int fd, uint64_t offset, size_t n, void* buf);

// Replaces `path` atomically with a file holding `pieces` one after another:
// readers see the old file or the complete new one, never a partial one. The
// bytes go to "<path>.tmp.<pid>", created with O_EXCL after a stale file of
// that name is removed (so a planted symlink is never followed), are fsynced,
// and the file is renamed over `path`. On any failure the temporary file is
// removed, `path` is untouched and the IoError names the step: "<path>:
// cannot create temporary file '<tmp>': ...", "cannot write temporary file
// '<tmp>': ..." or "cannot rename '<tmp>' into place: ...". An empty piece
// may have a null data pointer.
Status WriteFileAtomically(const std::string& path,
                           std::span<const std::span<const std::byte>> pieces);

}  // namespace attnscore::internal

#endif  // ATTNSCORE_BASE_FILE_IO_H_
