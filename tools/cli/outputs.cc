#include "cli/outputs.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <system_error>
#include <utility>

#include "npy/npy.h"

namespace attnscore::cli {
namespace {

namespace fs = std::filesystem;

std::string ErrnoText(int err) { return std::generic_category().message(err); }

const char* KindOf(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// Where one output lands.
struct Target {
  const Output* output = nullptr;
  std::string path;  // absolute, with symlinks, "." and ".." resolved
  std::string dir;
  struct stat dir_stat {};
  bool exists = false;
  struct stat file_stat {};  // when it exists
};

std::string Named(const Output& o) { return o.flag + " " + o.path; }

Status Resolve(const Output& o, Target* t) {
  t->output = &o;
  if (o.path.empty()) return Status::InvalidArgument(o.flag + " is an empty path");
  std::error_code error;
  fs::path path = fs::absolute(o.path, error);
  if (!error) path = fs::weakly_canonical(path, error);
  if (error) {
    return Status::InvalidArgument(Named(o) + ": not a usable path (" + error.message() + ")");
  }
  t->path = path.string();
  t->dir = path.parent_path().string();
  if (::stat(t->dir.c_str(), &t->dir_stat) != 0 || !S_ISDIR(t->dir_stat.st_mode)) {
    return Status::InvalidArgument(Named(o) + ": directory " + t->dir + " does not exist");
  }
  if (::stat(t->path.c_str(), &t->file_stat) == 0) {
    t->exists = true;
    if (!S_ISREG(t->file_stat.st_mode)) {
      return Status::InvalidArgument(Named(o) + " is " + KindOf(t->file_stat.st_mode) +
                                     "; an output must be a regular file");
    }
  } else if (errno != ENOENT) {
    return Status::IoError(Named(o) + ": cannot stat: " + ErrnoText(errno));
  }
  return Status::Ok();
}

Status ResolveAll(const std::vector<Output>& outputs, std::vector<Target>* targets) {
  targets->assign(outputs.size(), Target{});
  for (size_t n = 0; n < outputs.size(); ++n) {
    Target& t = (*targets)[n];
    ATTNSCORE_RETURN_IF_ERROR(Resolve(outputs[n], &t));
    for (size_t m = 0; m < n; ++m) {
      const Target& u = (*targets)[m];
      const bool same_inode = t.exists && u.exists && t.file_stat.st_dev == u.file_stat.st_dev &&
                              t.file_stat.st_ino == u.file_stat.st_ino;
      if (t.path == u.path || same_inode) {
        return Status::InvalidArgument(u.output->flag + " " + u.output->path + " and " +
                                       Named(outputs[n]) + " name the same file");
      }
    }
  }
  return Status::Ok();
}

// A new empty file with a unique name in `dir` (mode 0600), for staging an
// output or keeping a target aside; "" and *err set on failure.
std::string ReserveName(const std::string& dir, int* err) {
  std::string name = dir + "/.attnscore-XXXXXX";
  const int fd = ::mkstemp(name.data());
  if (fd < 0) {
    *err = errno;
    return "";
  }
  ::close(fd);
  return name;
}

// Copies the file at `from` over the existing file `to`, with `from`'s
// permission bits. Returns 0 or errno.
int CopyFile(const std::string& from, const std::string& to, mode_t mode) {
  const int in = ::open(from.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) return errno;
  const int out = ::open(to.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
  int err = out < 0 ? errno : 0;
  std::vector<char> buffer(size_t{1} << 20);
  while (err == 0) {
    const ssize_t got = ::read(in, buffer.data(), buffer.size());
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      err = got < 0 ? errno : 0;
      break;
    }
    for (ssize_t done = 0; err == 0 && done < got;) {
      const ssize_t put = ::write(out, buffer.data() + done, static_cast<size_t>(got - done));
      if (put < 0 && errno != EINTR) err = errno;
      if (put > 0) done += put;
    }
  }
  if (err == 0 && ::fchmod(out, mode & 07777) != 0) err = errno;
  if (out >= 0 && ::close(out) != 0 && err == 0) err = errno;
  ::close(in);
  return err;
}

// Exclusive flocks on directories, released (closed) on destruction.
class DirectoryLocks {
 public:
  DirectoryLocks() = default;
  DirectoryLocks(const DirectoryLocks&) = delete;
  DirectoryLocks& operator=(const DirectoryLocks&) = delete;
  ~DirectoryLocks() {
    for (int fd : fds_) ::close(fd);
  }

  // Locks each distinct directory of `targets`, ordered by device and inode.
  Status Take(const std::vector<Target>& targets) {
    std::vector<const Target*> order;
    for (const Target& t : targets) order.push_back(&t);
    const auto key = [](const Target* t) {
      return std::make_pair(t->dir_stat.st_dev, t->dir_stat.st_ino);
    };
    std::sort(order.begin(), order.end(), [&](auto* a, auto* b) { return key(a) < key(b); });
    order.erase(
        std::unique(order.begin(), order.end(), [&](auto* a, auto* b) { return key(a) == key(b); }),
        order.end());
    for (const Target* t : order) {
      const int fd = ::open(t->dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      if (fd < 0)
        return Status::IoError("cannot open " + t->dir + " to lock it: " + ErrnoText(errno));
      fds_.push_back(fd);
      int result;
      while ((result = ::flock(fd, LOCK_EX)) != 0 && errno == EINTR) {
      }
      if (result != 0) return Status::IoError("cannot lock " + t->dir + ": " + ErrnoText(errno));
    }
    return Status::Ok();
  }

 private:
  std::vector<int> fds_;
};

// Files this call created beside the targets; whatever is still listed is
// removed on destruction.
class Leftovers {
 public:
  Leftovers() = default;
  Leftovers(const Leftovers&) = delete;
  Leftovers& operator=(const Leftovers&) = delete;
  ~Leftovers() {
    for (const std::string& path : paths_) ::unlink(path.c_str());
  }
  void Add(const std::string& path) { paths_.push_back(path); }
  void Forget(const std::string& path) {
    paths_.erase(std::remove(paths_.begin(), paths_.end(), path), paths_.end());
  }

 private:
  std::vector<std::string> paths_;
};

// Keeps an existing target's content under a new name in its directory, so
// that a failed landing can put it back: a hard link when this user owns the
// file (or is root), as one may always remove one's own link; else a copy.
Status KeepAside(const Target& t, Leftovers* leftovers, std::string* kept) {
  int err = 0;
  std::string name = ReserveName(t.dir, &err);
  if (name.empty()) {
    return Status::IoError(Named(*t.output) +
                           ": cannot keep its old content aside: " + ErrnoText(err));
  }
  leftovers->Add(name);
  const uid_t me = ::geteuid();
  bool linked = false;
  if (me == 0 || t.file_stat.st_uid == me) {
    linked = ::unlink(name.c_str()) == 0 && ::link(t.path.c_str(), name.c_str()) == 0;
    if (!linked) {
      // Take the name again for the copy.
      leftovers->Forget(name);
      if ((name = ReserveName(t.dir, &err)).empty()) {
        return Status::IoError(Named(*t.output) +
                               ": cannot keep its old content aside: " + ErrnoText(err));
      }
      leftovers->Add(name);
    }
  }
  if (!linked && (err = CopyFile(t.path, name, t.file_stat.st_mode)) != 0) {
    return Status::IoError(Named(*t.output) +
                           ": cannot keep its old content aside: " + ErrnoText(err));
  }
  *kept = name;
  return Status::Ok();
}

}  // namespace

Status CheckOutputPaths(const std::vector<Output>& outputs) {
  std::vector<Target> targets;
  return ResolveAll(outputs, &targets);
}

Status LandOutputs(const std::vector<Output>& outputs, RenameFunction rename) {
  if (rename == nullptr) rename = &std::rename;
  std::vector<Target> targets;
  ATTNSCORE_RETURN_IF_ERROR(ResolveAll(outputs, &targets));

  Leftovers leftovers;
  std::vector<std::string> staged(outputs.size());
  for (size_t n = 0; n < outputs.size(); ++n) {
    const Output& o = outputs[n];
    int err = 0;
    staged[n] = ReserveName(targets[n].dir, &err);
    if (staged[n].empty()) {
      return Status::IoError(Named(o) + ": cannot create a file in " + targets[n].dir + ": " +
                             ErrnoText(err));
    }
    leftovers.Add(staged[n]);
    const Status s = npy::WriteNpy(staged[n], npy::DType::kFloat32, o.shape, o.data);
    if (!s.ok()) return Status(s.code(), Named(o) + ": " + s.message());
  }

  DirectoryLocks locks;
  ATTNSCORE_RETURN_IF_ERROR(locks.Take(targets));
  // Checked again under the lock: another run may have changed the targets.
  ATTNSCORE_RETURN_IF_ERROR(ResolveAll(outputs, &targets));
  std::vector<std::string> kept(outputs.size());
  for (size_t n = 0; n < outputs.size(); ++n) {
    if (targets[n].exists) ATTNSCORE_RETURN_IF_ERROR(KeepAside(targets[n], &leftovers, &kept[n]));
  }
  for (size_t n = 0; n < outputs.size(); ++n) {
    if (rename(staged[n].c_str(), targets[n].path.c_str()) == 0) {
      leftovers.Forget(staged[n]);
      continue;
    }
    std::string message =
        Named(outputs[n]) + ": cannot rename the new file into place: " + ErrnoText(errno);
    // Undo the outputs already landed, newest first.
    for (size_t m = n; m-- > 0;) {
      const bool undone = kept[m].empty()
                              ? ::unlink(targets[m].path.c_str()) == 0
                              : std::rename(kept[m].c_str(), targets[m].path.c_str()) == 0;
      if (!undone) {
        message += "; and restoring " + Named(outputs[m]) + " failed (" + ErrnoText(errno) + ")" +
                   (kept[m].empty() ? "" : ": its old content is in " + kept[m]);
      }
      leftovers.Forget(kept[m]);
    }
    return Status::IoError(message);
  }
  return Status::Ok();
}

}  // namespace attnscore::cli
