#include "io/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstddef>
#include <exception>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string_view>
#include <utility>

#include "base/file_io.h"
#include "io/safetensors_header.h"

namespace attnscore::io {
namespace {

// The format stores the header length and the data little-endian, and
// SafetensorsTensor promises native order, so bytes are copied verbatim; a
// big-endian host would need byte swapping.
static_assert(std::endian::native == std::endian::little,
              "io/safetensors.cc assumes a little-endian host");

constexpr uint64_t kLengthPrefix = 8;  // the u64 header length
constexpr std::string_view kMetadataKey = "__metadata__";
constexpr const char* kLoadableDType = "F32";

// Offsets are JSON integers, which many readers hold exactly only to 2^53.
constexpr int64_t kMaxJsonInt = int64_t{1} << 53;

using internal::Fd;
using internal::FormatShape;
using internal::Malformed;
using internal::MulNonNegative;
using internal::OpenForRead;
using internal::ReadExactly;

// Names come from the file or the caller; messages show them escaped, cut
// after 60 bytes.
std::string Printable(std::string_view text) { return internal::Printable(text, 60); }

std::string Quoted(std::string_view name) { return "'" + Printable(name) + "'"; }

// ---------------------------------------------------------------------------
// Layout checks: the header against the data buffer

struct DTypeInfo {
  const char* name;
  int bits;  // per element; the 4- and 6-bit float types pack several per byte
};

// Every dtype the format defines. Sizes are needed to check a tensor's byte
// range even when the engine will not load it, so that a file is reported
// as malformed rather than as unsupported when it is both.
constexpr DTypeInfo kDTypes[] = {
    {"BOOL", 8},    {"U8", 8},   {"I8", 8},      {"F8_E5M2", 8}, {"F8_E4M3", 8},
    {"F8_E8M0", 8}, {"I16", 16}, {"U16", 16},    {"F16", 16},    {"BF16", 16},
    {"I32", 32},    {"U32", 32}, {"F32", 32},    {"F64", 64},    {"I64", 64},
    {"U64", 64},    {"F4", 4},   {"F6_E2M3", 6}, {"F6_E3M2", 6},
};

const DTypeInfo* FindDType(std::string_view name) {
  for (const DTypeInfo& info : kDTypes) {
    if (name == info.name) return &info;
  }
  return nullptr;
}

std::string FormatRange(int64_t begin, int64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + "]";
}

// Checks one tensor's dtype, shape and byte range against the buffer.
Status CheckEntry(const std::string& path, const SafetensorsEntry& entry, uint64_t buffer_size) {
  const std::string tensor = "tensor " + Quoted(entry.name);
  const DTypeInfo* info = FindDType(entry.dtype);
  if (info == nullptr) return Malformed(path, tensor + " has unknown dtype " + Quoted(entry.dtype));
  int64_t count = 0;
  int64_t bits = 0;
  // ShapeProduct counts (2^40, 2^40, 2^40, 0) as overflow too.
  if (!internal::ShapeProduct(entry.shape, 1, &count) ||
      !MulNonNegative(count, info->bits, &bits)) {
    return Malformed(path, tensor + " has shape " + FormatShape(entry.shape) +
                               " whose element count or byte size overflows int64");
  }
  if (bits % 8 != 0) {
    return Malformed(path, tensor + " has shape " + FormatShape(entry.shape) + " of " + info->name +
                               " that does not fill a whole number of bytes");
  }
  const std::string range = "data_offsets " + FormatRange(entry.begin, entry.end);
  if (entry.begin > entry.end) {
    return Malformed(path, tensor + " has " + range + " that end before they begin");
  }
  if (static_cast<uint64_t>(entry.end) > buffer_size) {
    return Malformed(path, tensor + " has " + range + " beyond the end of the " +
                               std::to_string(buffer_size) + "-byte data buffer");
  }
  if (entry.end - entry.begin != bits / 8) {
    return Malformed(path, tensor + " has " + std::to_string(entry.end - entry.begin) +
                               " bytes of data (" + range + ") but shape " +
                               FormatShape(entry.shape) + " of " + info->name + " needs " +
                               std::to_string(bits / 8));
  }
  return Status::Ok();
}

// The tensors must tile the buffer: sorted by offset, each starts where the
// previous one ended and the last ends at the buffer's end. Empty tensors
// may share an offset with their neighbours.
Status CheckTiling(const std::string& path, const std::vector<SafetensorsEntry>& entries,
                   uint64_t buffer_size) {
  std::vector<const SafetensorsEntry*> order;
  order.reserve(entries.size());
  for (const SafetensorsEntry& entry : entries) order.push_back(&entry);
  std::sort(order.begin(), order.end(), [](const SafetensorsEntry* a, const SafetensorsEntry* b) {
    return std::pair(a->begin, a->end) < std::pair(b->begin, b->end);
  });
  int64_t covered = 0;
  const SafetensorsEntry* previous = nullptr;
  for (const SafetensorsEntry* entry : order) {
    if (entry->begin < covered) {
      return Malformed(path, "tensors " + Quoted(previous->name) + " " +
                                 FormatRange(previous->begin, covered) + " and " +
                                 Quoted(entry->name) + " " + FormatRange(entry->begin, entry->end) +
                                 " overlap in the data buffer");
    }
    if (entry->begin > covered) {
      return Malformed(path, "bytes " + FormatRange(covered, entry->begin) +
                                 " of the data buffer belong to no tensor (a hole before " +
                                 Quoted(entry->name) + ")");
    }
    covered = entry->end;
    previous = entry;
  }
  if (static_cast<uint64_t>(covered) < buffer_size) {
    return Malformed(path, std::to_string(buffer_size - static_cast<uint64_t>(covered)) +
                               " bytes left over at the end of the data buffer (the tensors end "
                               "at offset " +
                               std::to_string(covered) + " of " + std::to_string(buffer_size) +
                               ")");
  }
  return Status::Ok();
}

// ---------------------------------------------------------------------------
// Reading

// Reads the length prefix and the header text, checking the claimed length
// against the file before allocating for it.
Status ReadHeaderText(const std::string& path, int fd, uint64_t file_size, std::string* text) {
  if (file_size < kLengthPrefix) {
    return Malformed(path, "file is " + std::to_string(file_size) +
                               " bytes, shorter than the 8-byte header length");
  }
  unsigned char prefix[kLengthPrefix];
  ATTNSCORE_RETURN_IF_ERROR(ReadExactly(path, fd, 0, sizeof(prefix), prefix));
  uint64_t header_len = 0;
  for (size_t i = kLengthPrefix; i-- > 0;) header_len = (header_len << 8) | prefix[i];

  if (header_len > kMaxSafetensorsHeaderLen) {
    return Malformed(path, "header length " + std::to_string(header_len) +
                               " exceeds the limit of " + std::to_string(kMaxSafetensorsHeaderLen) +
                               " bytes");
  }
  if (header_len > file_size - kLengthPrefix) {
    return Malformed(path, "header length " + std::to_string(header_len) + " but only " +
                               std::to_string(file_size - kLengthPrefix) +
                               " bytes follow the length (truncated file?)");
  }
  text->resize(static_cast<size_t>(header_len));
  return ReadExactly(path, fd, kLengthPrefix, text->size(), text->data());
}

// Sorts by name, checks every tensor is loadable and reads its data.
// `entries` passed CheckEntry and CheckTiling.
Status LoadTensors(const std::string& path, int fd, uint64_t data_start,
                   std::vector<SafetensorsEntry> entries, std::vector<SafetensorsTensor>* out) {
  std::sort(entries.begin(), entries.end(),
            [](const SafetensorsEntry& a, const SafetensorsEntry& b) { return a.name < b.name; });
  for (const SafetensorsEntry& entry : entries) {
    if (entry.dtype != kLoadableDType) {
      return Malformed(path, "tensor " + Quoted(entry.name) + " has dtype " +
                                 Printable(entry.dtype) + "; only F32 tensors can be loaded");
    }
  }
  std::vector<SafetensorsTensor> tensors(entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    SafetensorsEntry& entry = entries[i];
    SafetensorsTensor& tensor = tensors[i];
    // end - begin = 4 * element count, within the buffer.
    const auto bytes = static_cast<size_t>(entry.end - entry.begin);
    tensor.data.resize(bytes / sizeof(float));
    ATTNSCORE_RETURN_IF_ERROR(ReadExactly(path, fd, data_start + static_cast<uint64_t>(entry.begin),
                                          bytes, tensor.data.data()));
    tensor.name = std::move(entry.name);
    tensor.dtype = std::move(entry.dtype);
    tensor.shape = std::move(entry.shape);
  }
  *out = std::move(tensors);
  return Status::Ok();
}

Status ReadSafetensorsImpl(const std::string& path, std::vector<SafetensorsTensor>* tensors,
                           SafetensorsMetadata* metadata) {
  if (tensors == nullptr) return Status::InvalidArgument(path + ": output tensors are null");
  std::optional<Fd> fd;
  uint64_t file_size = 0;
  ATTNSCORE_RETURN_IF_ERROR(OpenForRead(path, &fd, &file_size));
  std::string text;
  ATTNSCORE_RETURN_IF_ERROR(ReadHeaderText(path, fd->get(), file_size, &text));

  SafetensorsHeader header;
  ATTNSCORE_RETURN_IF_ERROR(ParseSafetensorsHeader(path, text, &header));

  // Every size check happens here, before any tensor data is allocated.
  const uint64_t data_start = kLengthPrefix + text.size();
  const uint64_t buffer_size = file_size - data_start;
  for (const SafetensorsEntry& entry : header.entries) {
    ATTNSCORE_RETURN_IF_ERROR(CheckEntry(path, entry, buffer_size));
  }
  ATTNSCORE_RETURN_IF_ERROR(CheckTiling(path, header.entries, buffer_size));

  std::vector<SafetensorsTensor> loaded;
  ATTNSCORE_RETURN_IF_ERROR(
      LoadTensors(path, fd->get(), data_start, std::move(header.entries), &loaded));
  *tensors = std::move(loaded);
  if (metadata != nullptr) *metadata = std::move(header.metadata);
  return Status::Ok();
}

// ---------------------------------------------------------------------------
// Finding

Status FindTensorImpl(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                      const std::string& name, const std::vector<int64_t>& shape,
                      const SafetensorsTensor** found) {
  if (found == nullptr) return Status::InvalidArgument(path + ": output pointer is null");
  for (int64_t dim : shape) {
    if (dim < -1) {
      return Status::InvalidArgument(path + ": wanted shape " + FormatShape(shape) + " for " +
                                     name + " has a negative dimension other than -1");
    }
  }
  const auto it = std::find_if(tensors.begin(), tensors.end(),
                               [&](const SafetensorsTensor& t) { return t.name == name; });
  if (it == tensors.end()) {
    // List a few names: a typo or a missing prefix ("model.") shows at once.
    constexpr size_t kMaxListed = 8;
    std::string listed;
    for (size_t i = 0; i < tensors.size() && i < kMaxListed; ++i) {
      listed += (i > 0 ? ", " : "") + Printable(tensors[i].name);
    }
    if (tensors.size() > kMaxListed) listed += ", ...";
    return Status::InvalidArgument(path + ": no tensor named " + Quoted(name) + " (the file has " +
                                   std::to_string(tensors.size()) + " tensors" +
                                   (tensors.empty() ? "" : ": " + listed) + ")");
  }
  bool match = it->shape.size() == shape.size();
  for (size_t i = 0; match && i < shape.size(); ++i) {
    match = shape[i] == -1 || shape[i] == it->shape[i];
  }
  if (!match) {
    return Status::InvalidArgument(path + ": " + Printable(name) + " has shape " +
                                   FormatShape(it->shape) + " but the model needs " +
                                   FormatShape(shape, /*wildcards=*/true));
  }
  *found = &*it;
  return Status::Ok();
}

// ---------------------------------------------------------------------------
// Writing

// `text` as a JSON string, escaped as the reference writer escapes it: '"',
// '\\' and control characters; everything else as is. Throws
// nlohmann::json::type_error if `text` is not valid UTF-8.
std::string JsonString(const std::string& text) { return nlohmann::json(text).dump(); }

Status CheckWriteString(const std::string& path, const std::string& what, const std::string& text) {
  try {
    (void)JsonString(text);
  } catch (const nlohmann::json::type_error&) {
    return Malformed(path, what + " " + Quoted(text) + " is not valid UTF-8");
  }
  return Status::Ok();
}

Status CheckWriteTensor(const std::string& path, const SafetensorsTensor& tensor) {
  if (tensor.name.empty()) return Malformed(path, "a tensor has an empty name");
  if (tensor.name == kMetadataKey) {
    return Malformed(path, "a tensor cannot be named __metadata__ (the key is reserved)");
  }
  ATTNSCORE_RETURN_IF_ERROR(CheckWriteString(path, "tensor name", tensor.name));
  const std::string what = "tensor " + Quoted(tensor.name);
  if (tensor.dtype != kLoadableDType) {
    return Malformed(
        path, what + " has dtype " + Quoted(tensor.dtype) + "; only F32 tensors can be written");
  }
  if (tensor.shape.size() > static_cast<size_t>(kMaxSafetensorsRank)) {
    return Malformed(path, what + " has rank " + std::to_string(tensor.shape.size()) +
                               ", above the maximum of " + std::to_string(kMaxSafetensorsRank));
  }
  for (int64_t dim : tensor.shape) {
    if (dim < 0) {
      return Malformed(
          path, what + " has shape " + FormatShape(tensor.shape) + " with a negative dimension");
    }
  }
  int64_t count = 0;
  int64_t bytes = 0;
  // ShapeProduct counts (2^40, 2^40, 2^40, 0) as overflow too.
  if (!internal::ShapeProduct(tensor.shape, 1, &count) ||
      !MulNonNegative(count, int64_t{sizeof(float)}, &bytes) || bytes > kMaxJsonInt) {
    return Malformed(path, what + " has shape " + FormatShape(tensor.shape) + " that is too large");
  }
  if (tensor.data.size() != static_cast<uint64_t>(count)) {
    return Malformed(path, what + " has " + std::to_string(tensor.data.size()) +
                               " values but shape " + FormatShape(tensor.shape) + " holds " +
                               std::to_string(count));
  }
  return Status::Ok();
}

// Checks the arguments and returns the tensors sorted by name.
Status CheckWriteArgs(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                      const SafetensorsMetadata& metadata,
                      std::vector<const SafetensorsTensor*>* sorted) {
  if (path.empty()) return Status::InvalidArgument("WriteSafetensors: empty path");
  for (const SafetensorsTensor& tensor : tensors) {
    ATTNSCORE_RETURN_IF_ERROR(CheckWriteTensor(path, tensor));
    sorted->push_back(&tensor);
  }
  std::sort(
      sorted->begin(), sorted->end(),
      [](const SafetensorsTensor* a, const SafetensorsTensor* b) { return a->name < b->name; });
  for (size_t i = 1; i < sorted->size(); ++i) {
    if ((*sorted)[i - 1]->name == (*sorted)[i]->name) {
      return Malformed(path, "duplicate tensor name " + Quoted((*sorted)[i]->name));
    }
  }
  for (const auto& [key, value] : metadata) {
    ATTNSCORE_RETURN_IF_ERROR(CheckWriteString(path, "metadata key", key));
    ATTNSCORE_RETURN_IF_ERROR(CheckWriteString(path, "metadata value", value));
  }
  int64_t total = 0;
  for (const SafetensorsTensor* tensor : *sorted) {
    total += static_cast<int64_t>(tensor->data.size() * sizeof(float));
    if (total > kMaxJsonInt) return Malformed(path, "the tensors' total size is too large");
  }
  return Status::Ok();
}

// The length prefix and the header JSON, padded with spaces to a multiple of
// 8 bytes so the data starts aligned, as the reference writer does. Members
// are written in the reference writer's order: "__metadata__", then the
// tensors by name, each as dtype, shape, data_offsets.
std::string EncodeHeader(const std::vector<const SafetensorsTensor*>& sorted,
                         const SafetensorsMetadata& metadata) {
  std::string json = "{";
  if (!metadata.empty()) {
    json += "\"__metadata__\":{";
    for (const auto& [key, value] : metadata) {
      if (json.back() != '{') json += ",";
      json += JsonString(key) + ":" + JsonString(value);
    }
    json += "}";
  }
  int64_t offset = 0;
  for (const SafetensorsTensor* tensor : sorted) {
    if (json.size() > 1) json += ",";
    const int64_t end = offset + static_cast<int64_t>(tensor->data.size() * sizeof(float));
    json += JsonString(tensor->name) +
            ":{\"dtype\":\"F32\",\"shape\":" + nlohmann::json(tensor->shape).dump() +
            ",\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(end) + "]}";
    offset = end;
  }
  json += "}";
  json.append((8 - json.size() % 8) % 8, ' ');

  std::string out;
  for (size_t i = 0; i < kLengthPrefix; ++i) {
    out.push_back(static_cast<char>((static_cast<uint64_t>(json.size()) >> (8 * i)) & 0xff));
  }
  return out + json;
}

Status WriteSafetensorsImpl(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                            const SafetensorsMetadata& metadata) {
  std::vector<const SafetensorsTensor*> sorted;
  ATTNSCORE_RETURN_IF_ERROR(CheckWriteArgs(path, tensors, metadata, &sorted));
  const std::string header = EncodeHeader(sorted, metadata);
  std::vector<std::span<const std::byte>> pieces;
  pieces.reserve(sorted.size() + 1);
  pieces.push_back(std::as_bytes(std::span(header)));
  for (const SafetensorsTensor* tensor : sorted) {
    pieces.push_back(std::as_bytes(std::span(tensor->data)));
  }
  return internal::WriteFileAtomically(path, pieces);
}

}  // namespace

// The entry points turn any exception (in practice std::bad_alloc from a
// large but genuine file) into a Status: none may cross the API.
Status ReadSafetensors(const std::string& path, std::vector<SafetensorsTensor>* tensors,
                       SafetensorsMetadata* metadata) {
  try {
    return ReadSafetensorsImpl(path, tensors, metadata);
  } catch (const std::exception& e) {
    return Status::Internal(path + ": reading failed: " + e.what());
  }
}

Status FindTensor(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                  const std::string& name, const std::vector<int64_t>& shape,
                  const SafetensorsTensor** found) {
  try {
    return FindTensorImpl(path, tensors, name, shape, found);
  } catch (const std::exception& e) {
    return Status::Internal(path + ": finding " + name + " failed: " + e.what());
  }
}

Status WriteSafetensors(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                        const SafetensorsMetadata& metadata) {
  try {
    return WriteSafetensorsImpl(path, tensors, metadata);
  } catch (const std::exception& e) {
    return Status::Internal(path + ": writing failed: " + e.what());
  }
}

}  // namespace attnscore::io
