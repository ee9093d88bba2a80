// Reading and writing .safetensors files, the format PyTorch state_dicts are
// commonly saved in.
//
// A file is an 8-byte little-endian header length N, N bytes of UTF-8 JSON,
// then the data buffer. The JSON is an object mapping each tensor's name to
// {"dtype": "F32", "shape": [d0, ...], "data_offsets": [begin, end]}, with
// offsets relative to the start of the data buffer (end exclusive), plus an
// optional "__metadata__" object mapping strings to strings.
//
// The reader is strict, like ReadNpy: it accepts exactly that structure
// (io/safetensors_header.h lists the rules; nlohmann-json reads the JSON),
// and the tensors must tile the data buffer exactly, with no overlap, hole or
// leftover bytes. Every failure is a Status whose message starts with the
// file's path and says what is wrong. Claimed shapes and offsets are checked
// against the real file size before anything is allocated, so a hostile or
// corrupt file cannot exhaust memory.
//
// The writer is atomic: it writes "<path>.tmp.<pid>" and renames it over
// `path`, as WriteNpy does.
#ifndef ATTNSCORE_IO_SAFETENSORS_H_
#define ATTNSCORE_IO_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "attnscore/status.h"

namespace attnscore::io {

// The largest rank the reader accepts and the writer writes (as kMaxNpyRank).
inline constexpr int kMaxSafetensorsRank = 8;

// The reference implementation refuses headers over 100 MB; so does this one.
// The cap bounds the one allocation made before the header is understood.
inline constexpr uint64_t kMaxSafetensorsHeaderLen = 100'000'000;

struct SafetensorsTensor {
  std::string name;
  std::string dtype;           // as in the file, e.g. "F32"
  std::vector<int64_t> shape;  // () for a scalar
  std::vector<float> data;     // only for dtype "F32" (the engine's type), copied out, native order
};

// The "__metadata__" entry: string keys to string values.
using SafetensorsMetadata = std::map<std::string, std::string>;

// Reads every tensor of the .safetensors file at `path` into `*tensors`,
// sorted by name. Only F32 tensors can be loaded: any other dtype fails with
// a message naming the tensor and its dtype. When `metadata` is not null it
// receives the "__metadata__" entry (empty if the file has none). The
// outputs are changed only on success. Malformed files (and F32-only
// refusals) give InvalidArgument; files that cannot be opened or read give
// IoError.
Status ReadSafetensors(const std::string& path, std::vector<SafetensorsTensor>* tensors,
                       SafetensorsMetadata* metadata = nullptr);

// Finds `name` in `tensors` and checks that its shape equals `shape`, where
// -1 matches any size in that dimension. On success points `*found` at the
// tensor; on failure leaves it unchanged. `path` only prefixes the messages,
// e.g. "m.safetensors: W_q.weight has shape (8, 20) but the model needs (8, 2)".
// A missing tensor or a wrong shape gives InvalidArgument.
Status FindTensor(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                  const std::string& name, const std::vector<int64_t>& shape,
                  const SafetensorsTensor** found);

// Writes `tensors`, all of dtype "F32" with data.size() equal to their
// element count, and `metadata` (omitted from the file when empty). Tensors
// are laid out sorted by name with no gaps, and the header is padded with
// spaces so the data starts 8-byte aligned, as the reference writer does.
// Names must be unique, non-empty and not "__metadata__". On any failure the
// temporary file is removed and `path` is left as it was.
Status WriteSafetensors(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                        const SafetensorsMetadata& metadata = {});

}  // namespace attnscore::io

#endif  // ATTNSCORE_IO_SAFETENSORS_H_
