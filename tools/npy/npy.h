// Reading and writing NumPy .npy files (format versions 1.0, 2.0 and 3.0).
//
// The reader is strict: it accepts what numpy writes for the four dtypes the
// engine uses and rejects everything else with a Status whose message starts
// with the file's path and says what is wrong. A shape claimed by a header
// never drives an allocation: its byte count is checked against the real file
// size first, so a hostile or corrupt file cannot exhaust memory.
//
// The writer is atomic: it writes "<path>.tmp.<pid>" and renames it over
// `path`, so readers see either the old file or the complete new one.
#ifndef ATTNSCORE_NPY_NPY_H_
#define ATTNSCORE_NPY_NPY_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "attnscore/status.h"

namespace attnscore::npy {

enum class DType { kFloat32, kFloat64, kInt32, kInt64 };

// "float32", "float64", "int32", "int64"; "unknown" for any other value.
const char* DTypeName(DType dtype);

// Bytes per element: 4 or 8; 0 for a value outside the enum.
size_t DTypeSize(DType dtype);

// The largest rank ReadNpy accepts and WriteNpy writes.
inline constexpr int kMaxNpyRank = 8;

struct NpyArray {
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  std::vector<unsigned char> bytes;  // C-order element data, native little-endian

  // Element count: the product of `shape`, 1 for a scalar (shape ()).
  int64_t size() const;

  // Typed access to `bytes`; T must match `dtype`. The vector's storage comes
  // from operator new, which aligns it for any of the four element types.
  template <typename T>
  const T* data() const {
    return reinterpret_cast<const T*>(bytes.data());
  }
  template <typename T>
  T* mutable_data() {
    return reinterpret_cast<T*>(bytes.data());
  }
};

// Reads the .npy file at `path` into `*out`. Accepts descr '<f4', '<f8',
// '<i4' and '<i8', fortran_order False and rank 0..kMaxNpyRank. `*out` is
// changed only on success. Malformed files give InvalidArgument; files that
// cannot be opened or read give IoError.
Status ReadNpy(const std::string& path, NpyArray* out);

// Writes `shape` elements of `dtype` from `data` (C order, native
// little-endian) as a version 1.0 .npy file. `data` may be null only when the
// shape holds no elements. On any failure the temporary file is removed and
// `path` is left as it was (absent, or holding its old content).
Status WriteNpy(const std::string& path, DType dtype,
                const std::vector<int64_t>& shape, const void* data);

}  // namespace attnscore::npy

#endif  // ATTNSCORE_NPY_NPY_H_
