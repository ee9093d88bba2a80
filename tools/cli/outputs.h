// Landing a run's output files as a unit: all of them or none (docs/cli.md,
// "Outputs").
#ifndef ATTNSCORE_TOOLS_CLI_OUTPUTS_H_
#define ATTNSCORE_TOOLS_CLI_OUTPUTS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "attnscore/status.h"

namespace attnscore::cli {

// One float32 .npy output: the flag that named it, its path, shape and data.
struct Output {
  std::string flag;
  std::string path;
  std::vector<int64_t> shape;
  const float* data;
};

// Checks where the outputs would go, before anything is computed: each path
// must lie in an existing directory and name a regular file or nothing (a
// symlink counts as what it points to), and no two may name the same file,
// compared after resolving symlinks and "." and "..", and by device and inode
// where the files exist. Errors name the flag and the path.
Status CheckOutputPaths(const std::vector<Output>& outputs);

// Writes every output, or none:
// - each is written to a staging file with a unique name in its target's
//   directory (so a 255-byte name still fits, and runs never share one);
// - then, holding an exclusive flock on every target directory (taken in a
//   fixed order, so concurrent runs wait for each other rather than
//   deadlock), each existing target is kept aside (a hard link, or a copy when
//   this user may not remove a link later) and the staging files are renamed
//   over the targets one by one;
// - if a rename fails, the targets already replaced get their old content
//   back (or are removed if they did not exist) before the lock is released.
// Two runs landing the same outputs at once each land whole, the later one
// last. Staging and kept-aside files never outlive the call. `rename` is the
// function that moves a staging file into place (tests inject failures).
using RenameFunction = int (*)(const char* from, const char* to);
Status LandOutputs(const std::vector<Output>& outputs, RenameFunction rename = nullptr);

}  // namespace attnscore::cli

#endif  // ATTNSCORE_TOOLS_CLI_OUTPUTS_H_
