#include "base/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <limits>
#include <system_error>
#include <utility>

namespace attnscore::internal {
namespace {

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

// Writes all `n` bytes, retrying short writes and EINTR. Returns 0 or errno.
int WriteAll(int fd, const void* buf, size_t n) {
  const auto* src = static_cast<const unsigned char*>(buf);
  while (n > 0) {
    const ssize_t w = ::write(fd, src, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    src += w;
    n -= static_cast<size_t>(w);
  }
  return 0;
}

// Unlinks a temporary file on every early return; Release() it once the file
// has been renamed into place.
class TempFileGuard {
 public:
  explicit TempFileGuard(std::string path) : path_(std::move(path)) {}
  ~TempFileGuard() {
    if (!path_.empty()) ::unlink(path_.c_str());
  }
  TempFileGuard(const TempFileGuard&) = delete;
  TempFileGuard& operator=(const TempFileGuard&) = delete;
  void Release() { path_.clear(); }

 private:
  std::string path_;
};

}  // namespace

// ---------------------------------------------------------------------------
// Messages

std::string Printable(std::string_view text, size_t max_shown) {
  std::string out;
  for (size_t i = 0; i < text.size() && i < max_shown; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out.push_back(static_cast<char>(c));
    } else {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 0xf]);
    }
  }
  if (text.size() > max_shown) out += "...";
  return out;
}

std::string FormatShape(const std::vector<int64_t>& shape, bool wildcards) {
  std::string out = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) out += ", ";
    out += wildcards && shape[i] == -1 ? std::string("any") : std::to_string(shape[i]);
  }
  if (shape.size() == 1) out += ",";
  out += ")";
  return out;
}

Status Malformed(const std::string& path, const std::string& what) {
  return Status::InvalidArgument(path + ": " + what);
}

Status IoFailure(const std::string& path, const std::string& what, int err) {
  return Status::IoError(path + ": " + what + ": " + std::generic_category().message(err));
}

// ---------------------------------------------------------------------------
// Sizes

bool MulNonNegative(int64_t a, int64_t b, int64_t* product) {
  if (a != 0 && b > kInt64Max / a) return false;
  *product = a * b;
  return true;
}

bool ShapeProduct(const std::vector<int64_t>& shape, int64_t factor, int64_t* product) {
  int64_t result = factor;
  bool empty = false;
  for (int64_t dim : shape) {
    if (dim == 0) {
      empty = true;
    } else if (!MulNonNegative(result, dim, &result)) {
      return false;
    }
  }
  *product = empty ? 0 : result;
  return true;
}

// ---------------------------------------------------------------------------
// Files

Fd::~Fd() {
  if (fd_ >= 0) ::close(fd_);
}

int Fd::Close() {
  const int fd = std::exchange(fd_, -1);
  return ::close(fd) == 0 ? 0 : errno;
}

Status OpenForRead(const std::string& path, std::optional<Fd>* fd, uint64_t* file_size) {
  // O_NONBLOCK keeps open() from hanging on a FIFO; it is rejected below.
  fd->emplace(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if ((*fd)->get() < 0) return IoFailure(path, "cannot open", errno);
  struct stat st {};
  if (::fstat((*fd)->get(), &st) != 0) return IoFailure(path, "cannot stat", errno);
  if (!S_ISREG(st.st_mode)) return Status::IoError(path + ": cannot read: not a regular file");
  *file_size = static_cast<uint64_t>(st.st_size);
  return Status::Ok();
}

Status ReadExactly(const std::string& path, int fd, uint64_t offset, size_t n, void* buf) {
  auto* dst = static_cast<unsigned char*>(buf);
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::pread(fd, dst + got, n - got, static_cast<off_t>(offset + got));
    if (r < 0) {
      if (errno == EINTR) continue;
      return IoFailure(path, "read failed", errno);
    }
    if (r == 0) return Status::IoError(path + ": read failed: file shrank while reading");
    got += static_cast<size_t>(r);
  }
  return Status::Ok();
}

Status WriteFileAtomically(const std::string& path,
                           std::span<const std::span<const std::byte>> pieces) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());

  // A file left here by a crashed run with the same pid is stale: remove it.
  // O_EXCL then refuses anything that reappears, including a planted symlink
  // that O_TRUNC would have followed.
  ::unlink(tmp.c_str());
  Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666));
  if (fd.get() < 0) return IoFailure(path, "cannot create temporary file '" + tmp + "'", errno);
  TempFileGuard guard(tmp);

  int err = 0;
  for (size_t i = 0; err == 0 && i < pieces.size(); ++i) {
    if (!pieces[i].empty()) err = WriteAll(fd.get(), pieces[i].data(), pieces[i].size());
  }
  // Flush before the rename so a crash cannot leave `path` naming a file
  // whose data never reached the disk.
  if (err == 0 && ::fsync(fd.get()) != 0) err = errno;
  const int close_err = fd.Close();
  if (err == 0) err = close_err;
  if (err != 0) return IoFailure(path, "cannot write temporary file '" + tmp + "'", err);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    return IoFailure(path, "cannot rename '" + tmp + "' into place", errno);
  }
  guard.Release();
  return Status::Ok();
}

}  // namespace attnscore::internal
