#include "npy/npy.h"

#include <bit>
#include <cstddef>
#include <cstring>
#include <exception>
#include <limits>
#include <optional>
#include <span>
#include <string_view>
#include <utility>

#include "base/file_io.h"

namespace attnscore::npy {
namespace {

// .npy data is stored little-endian and NpyArray promises native order, so
// bytes are copied verbatim; a big-endian host would need byte swapping.
static_assert(std::endian::native == std::endian::little,
              "io/npy.cc assumes a little-endian host");

constexpr unsigned char kMagic[] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
constexpr size_t kMagicLen = sizeof(kMagic);
constexpr size_t kVersionEnd = kMagicLen + 2;  // magic, then major and minor

// numpy's own reader refuses headers over 10000 bytes by default; a real
// header for rank <= 8 is under 300. The cap bounds the one allocation made
// before the header is understood.
constexpr size_t kMaxHeaderLen = size_t{1} << 16;

// numpy aligns the start of the data to 64 bytes; so does WriteNpy.
constexpr size_t kDataAlign = 64;

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

struct DTypeInfo {
  DType dtype;
  const char* descr;  // as numpy writes it on a little-endian machine
  const char* name;
  size_t size;
};

constexpr DTypeInfo kDTypes[] = {
    {DType::kFloat32, "<f4", "float32", 4},
    {DType::kFloat64, "<f8", "float64", 8},
    {DType::kInt32, "<i4", "int32", 4},
    {DType::kInt64, "<i8", "int64", 8},
};

const DTypeInfo* FindDType(DType dtype) {
  for (const DTypeInfo& info : kDTypes) {
    if (info.dtype == dtype) return &info;
  }
  return nullptr;
}

const DTypeInfo* FindDescr(std::string_view descr) {
  for (const DTypeInfo& info : kDTypes) {
    if (descr == info.descr) return &info;
  }
  return nullptr;
}

// ---------------------------------------------------------------------------
// Messages and sizes (the shared helpers are in io/file_io.h)

using internal::Fd;
using internal::FormatShape;
using internal::Malformed;
using internal::OpenForRead;
using internal::ReadExactly;
using internal::ShapeProduct;

// Header text comes from the file; messages show it escaped, cut after 40
// bytes.
std::string Printable(std::string_view text) { return internal::Printable(text, 40); }

// Byte size of a C-order array with non-negative dims. False on overflow,
// also for (2^62, 2^62, 0): see ShapeProduct.
bool ByteSize(DType dtype, const std::vector<int64_t>& shape, int64_t* bytes) {
  return ShapeProduct(shape, static_cast<int64_t>(DTypeSize(dtype)), bytes);
}

// ---------------------------------------------------------------------------
// Header dict parser

struct HeaderFields {
  std::optional<std::string> descr;
  std::optional<bool> fortran_order;
  std::optional<std::vector<int64_t>> shape;
};

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

bool IsIdentChar(char c) {
  return IsDigit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         c == '_';
}

// A recursive-descent parser for the one Python literal a .npy header holds:
// a dict with the keys 'descr' (a string), 'fortran_order' (a bool) and
// 'shape' (a tuple of ints). It takes what Python would for those values,
// such as either quote style, keys in any order and trailing commas, but
// nothing beyond them: no escapes, no expressions, no other keys.
class HeaderParser {
 public:
  explicit HeaderParser(std::string_view text) : text_(text) {}

  // Parses all of the text; on failure returns false and error() says why.
  bool Parse(HeaderFields* fields);
  const std::string& error() const { return error_; }

 private:
  bool ParseEntry(HeaderFields* fields);
  bool ParseString(std::string* out);
  bool ParseBool(bool* out);
  bool ParseShape(std::vector<int64_t>* out);
  bool ParseDim(int64_t* out);

  bool AtEnd() const { return pos_ >= text_.size(); }
  bool Peek(char c) const { return !AtEnd() && text_[pos_] == c; }
  void SkipSpaces() {
    while (Peek(' ') || Peek('\t')) ++pos_;
  }
  // Records `what` with the current offset and returns false.
  bool Fail(const std::string& what) {
    error_ = what + " (at offset " + std::to_string(pos_) + " of the header)";
    return false;
  }

  std::string_view text_;
  size_t pos_ = 0;
  std::string error_;
};

bool HeaderParser::Parse(HeaderFields* fields) {
  if (!Peek('{')) return Fail("not a dict literal (expected '{')");
  ++pos_;
  SkipSpaces();
  while (!Peek('}')) {
    if (AtEnd()) return Fail("unterminated dict (missing '}')");
    if (!ParseEntry(fields)) return false;
    SkipSpaces();
    if (Peek(',')) {
      ++pos_;
      SkipSpaces();
    } else if (!Peek('}')) {
      return Fail("expected ',' or '}' after a dict entry");
    }
  }
  ++pos_;
  SkipSpaces();  // numpy pads the header with spaces after the dict
  if (!AtEnd()) return Fail("unexpected text after the dict");
  return true;
}

bool HeaderParser::ParseEntry(HeaderFields* fields) {
  const size_t key_pos = pos_;
  std::string key;
  if (!ParseString(&key)) return false;
  SkipSpaces();
  if (!Peek(':')) return Fail("expected ':' after key '" + Printable(key) + "'");
  ++pos_;
  SkipSpaces();

  const bool duplicate = (key == "descr" && fields->descr) ||
                         (key == "fortran_order" && fields->fortran_order) ||
                         (key == "shape" && fields->shape);
  if (duplicate) {
    pos_ = key_pos;
    return Fail("duplicate key '" + key + "'");
  }
  if (key == "descr") {
    // numpy writes a list of fields here for structured dtypes.
    if (!Peek('\'') && !Peek('"')) {
      return Fail("'descr' is not a string (structured dtypes are not supported)");
    }
    return ParseString(&fields->descr.emplace());
  }
  if (key == "fortran_order") return ParseBool(&fields->fortran_order.emplace());
  if (key == "shape") return ParseShape(&fields->shape.emplace());
  pos_ = key_pos;
  return Fail("unexpected key '" + Printable(key) + "'");
}

bool HeaderParser::ParseString(std::string* out) {
  if (!Peek('\'') && !Peek('"')) return Fail("expected a quoted string");
  const size_t open = pos_;
  const char quote = text_[pos_++];
  while (!AtEnd() && text_[pos_] != quote) {
    // Keys and dtype strings never need escapes; refusing them keeps the
    // parser from having to implement Python's escape rules.
    if (text_[pos_] == '\\') return Fail("escape sequences are not supported");
    ++pos_;
  }
  if (AtEnd()) {
    pos_ = open;
    return Fail("unterminated string");
  }
  out->assign(text_.substr(open + 1, pos_ - open - 1));
  ++pos_;
  return true;
}

bool HeaderParser::ParseBool(bool* out) {
  const size_t start = pos_;
  while (!AtEnd() && IsIdentChar(text_[pos_])) ++pos_;
  const std::string_view word = text_.substr(start, pos_ - start);
  if (word == "True" || word == "False") {
    *out = word == "True";
    return true;
  }
  pos_ = start;
  return Fail("'fortran_order' is not True or False");
}

bool HeaderParser::ParseShape(std::vector<int64_t>* out) {
  if (!Peek('(')) return Fail("'shape' is not a tuple");
  const size_t open = pos_++;
  SkipSpaces();
  bool trailing_comma = false;
  while (!Peek(')')) {
    if (AtEnd()) return Fail("unterminated 'shape' tuple");
    int64_t dim = 0;
    if (!ParseDim(&dim)) return false;
    out->push_back(dim);
    SkipSpaces();
    trailing_comma = Peek(',');
    if (trailing_comma) {
      ++pos_;
      SkipSpaces();
    } else if (!Peek(')')) {
      return Fail("expected ',' or ')' in 'shape'");
    }
  }
  // In Python "(3)" is the integer 3; only "(3,)" is a 1-tuple.
  if (out->size() == 1 && !trailing_comma) {
    pos_ = open;
    return Fail("'shape' is not a tuple (a 1-tuple needs a trailing comma, as in (3,))");
  }
  ++pos_;
  return true;
}

bool HeaderParser::ParseDim(int64_t* out) {
  const size_t start = pos_;
  const bool negative = Peek('-');
  if (negative) ++pos_;
  const size_t first_digit = pos_;
  int64_t value = 0;
  bool overflow = false;
  for (; !AtEnd() && IsDigit(text_[pos_]); ++pos_) {
    const int digit = text_[pos_] - '0';
    if (value > (kInt64Max - digit) / 10) overflow = true;
    if (!overflow) value = value * 10 + digit;
  }
  const size_t digits = pos_ - first_digit;
  // Python 2's "3L", "3.0", "1_000", "0x10" and the like are not plain ints.
  const bool junk = !AtEnd() && (IsIdentChar(text_[pos_]) || text_[pos_] == '.');
  const std::string_view token = text_.substr(start, pos_ - start);
  pos_ = start;  // errors below point at the start of the dimension
  if (digits == 0 || junk) return Fail("'shape' holds a non-integer dimension");
  if (digits > 1 && text_[first_digit] == '0') {
    return Fail("'shape' dimension " + std::string(token) + " has a leading zero");
  }
  if (overflow) {
    return Fail("'shape' dimension " + std::string(token) + " overflows int64");
  }
  if (negative && value != 0) {
    return Fail("'shape' has a negative dimension " + std::string(token));
  }
  pos_ = start + token.size();
  *out = value;
  return true;
}

// ---------------------------------------------------------------------------
// Reading

struct Prelude {
  uint64_t header_offset = 0;  // where the dict text starts
  uint64_t header_len = 0;     // bytes of dict text, padding and '\n'
};

// Checks the magic and version and decodes the header length.
Status ReadPrelude(const std::string& path, int fd, uint64_t file_size,
                   Prelude* prelude) {
  if (file_size == 0) return Malformed(path, "empty file (not a .npy file)");
  unsigned char buf[kVersionEnd + 4] = {};
  const size_t have = file_size < sizeof(buf) ? static_cast<size_t>(file_size)
                                              : sizeof(buf);
  ATTNSCORE_RETURN_IF_ERROR(ReadExactly(path, fd, 0, have, buf));

  if (std::memcmp(buf, kMagic, have < kMagicLen ? have : kMagicLen) != 0) {
    return Malformed(path, "not a .npy file (bad magic)");
  }
  if (have < kVersionEnd) return Malformed(path, "truncated header");
  const int major = buf[kMagicLen];
  const int minor = buf[kMagicLen + 1];
  if (major < 1 || major > 3 || minor != 0) {
    return Malformed(path, "unsupported .npy format version " +
                               std::to_string(major) + "." +
                               std::to_string(minor) +
                               " (want 1.0, 2.0 or 3.0)");
  }
  // Version 1.0 stores the header length as a little-endian u16, 2.0 and 3.0
  // as a u32 (3.0 differs from 2.0 only in allowing UTF-8 in the header).
  const size_t len_bytes = major == 1 ? 2 : 4;
  prelude->header_offset = kVersionEnd + len_bytes;
  if (have < prelude->header_offset) return Malformed(path, "truncated header");
  prelude->header_len = 0;
  for (size_t i = len_bytes; i-- > 0;) {
    prelude->header_len = (prelude->header_len << 8) | buf[kVersionEnd + i];
  }
  return Status::Ok();
}

// Reads the dict text, checking it fits in the file and ends in '\n'; the
// '\n' is dropped from `*text`.
Status ReadHeaderText(const std::string& path, int fd, uint64_t file_size,
                      const Prelude& prelude, std::string* text) {
  const uint64_t after_prelude = file_size - prelude.header_offset;
  if (prelude.header_len > after_prelude) {
    return Malformed(path, "truncated header (header length " +
                               std::to_string(prelude.header_len) +
                               " but only " + std::to_string(after_prelude) +
                               " bytes follow)");
  }
  if (prelude.header_len > kMaxHeaderLen) {
    return Malformed(path, "header length " +
                               std::to_string(prelude.header_len) +
                               " exceeds the limit of " +
                               std::to_string(kMaxHeaderLen) + " bytes");
  }
  text->resize(static_cast<size_t>(prelude.header_len));
  ATTNSCORE_RETURN_IF_ERROR(ReadExactly(path, fd, prelude.header_offset,
                                        text->size(), text->data()));
  if (text->empty() || text->back() != '\n') {
    return Malformed(path, "header does not end with a newline");
  }
  text->pop_back();
  return Status::Ok();
}

// Turns parsed fields into a dtype and shape the engine supports.
Status CheckFields(const std::string& path, const HeaderFields& fields,
                   DType* dtype, std::vector<int64_t>* shape) {
  if (!fields.descr) return Malformed(path, "header has no 'descr' key");
  if (!fields.fortran_order) {
    return Malformed(path, "header has no 'fortran_order' key");
  }
  if (!fields.shape) return Malformed(path, "header has no 'shape' key");
  const DTypeInfo* info = FindDescr(*fields.descr);
  if (info == nullptr) {
    return Malformed(path, "unsupported dtype '" + Printable(*fields.descr) +
                               "' (want little-endian float32, float64, "
                               "int32 or int64)");
  }
  if (*fields.fortran_order) {
    return Malformed(path, "fortran_order arrays are not supported");
  }
  if (fields.shape->size() > static_cast<size_t>(kMaxNpyRank)) {
    return Malformed(path, "shape has rank " +
                               std::to_string(fields.shape->size()) +
                               "; at most " + std::to_string(kMaxNpyRank) +
                               " dimensions are supported");
  }
  *dtype = info->dtype;
  *shape = *fields.shape;
  return Status::Ok();
}

// The data must fill the rest of the file exactly. Checked before anything
// is allocated, so a claimed shape cannot drive a huge allocation.
Status CheckDataSize(const std::string& path, DType dtype,
                     const std::vector<int64_t>& shape, uint64_t available,
                     size_t* data_bytes) {
  int64_t needed = 0;
  if (!ByteSize(dtype, shape, &needed)) {
    return Malformed(path, "shape " + FormatShape(shape) +
                               " is too large (its byte size overflows int64)");
  }
  const auto want = static_cast<uint64_t>(needed);
  if (want > available) {
    return Malformed(path, "shape " + FormatShape(shape) + " needs " +
                               std::to_string(want) +
                               " bytes but the file holds " +
                               std::to_string(available) + " after the header");
  }
  if (want < available) {
    return Malformed(path, std::to_string(available - want) +
                               " trailing bytes after the array data (shape " +
                               FormatShape(shape) + " " + DTypeName(dtype) +
                               " needs " + std::to_string(want) + ")");
  }
  *data_bytes = static_cast<size_t>(want);
  return Status::Ok();
}

Status ReadNpyImpl(const std::string& path, NpyArray* out) {
  if (out == nullptr) return Status::InvalidArgument(path + ": output array is null");
  std::optional<Fd> fd;
  uint64_t file_size = 0;
  ATTNSCORE_RETURN_IF_ERROR(OpenForRead(path, &fd, &file_size));

  Prelude prelude;
  ATTNSCORE_RETURN_IF_ERROR(ReadPrelude(path, fd->get(), file_size, &prelude));
  std::string text;
  ATTNSCORE_RETURN_IF_ERROR(
      ReadHeaderText(path, fd->get(), file_size, prelude, &text));

  HeaderFields fields;
  HeaderParser parser(text);
  if (!parser.Parse(&fields)) {
    return Malformed(path, "malformed header: " + parser.error());
  }
  NpyArray array;
  ATTNSCORE_RETURN_IF_ERROR(CheckFields(path, fields, &array.dtype, &array.shape));

  const uint64_t data_offset = prelude.header_offset + prelude.header_len;
  size_t data_bytes = 0;
  ATTNSCORE_RETURN_IF_ERROR(CheckDataSize(path, array.dtype, array.shape,
                                          file_size - data_offset, &data_bytes));
  array.bytes.resize(data_bytes);
  ATTNSCORE_RETURN_IF_ERROR(
      ReadExactly(path, fd->get(), data_offset, data_bytes, array.bytes.data()));
  *out = std::move(array);
  return Status::Ok();
}

// ---------------------------------------------------------------------------
// Writing

Status CheckWriteArgs(const std::string& path, DType dtype,
                      const std::vector<int64_t>& shape, const void* data,
                      size_t* data_bytes) {
  if (path.empty()) return Status::InvalidArgument("WriteNpy: empty path");
  if (FindDType(dtype) == nullptr) {
    return Malformed(path, "unknown dtype value " +
                               std::to_string(static_cast<int>(dtype)));
  }
  if (shape.size() > static_cast<size_t>(kMaxNpyRank)) {
    return Malformed(path, "rank " + std::to_string(shape.size()) +
                               " exceeds the maximum of " +
                               std::to_string(kMaxNpyRank));
  }
  for (int64_t dim : shape) {
    if (dim < 0) {
      return Malformed(path, "shape " + FormatShape(shape) +
                                 " has a negative dimension");
    }
  }
  int64_t bytes = 0;
  if (!ByteSize(dtype, shape, &bytes)) {
    return Malformed(path, "shape " + FormatShape(shape) +
                               " is too large (its byte size overflows int64)");
  }
  if (bytes > 0 && data == nullptr) {
    return Malformed(path, "data is null for a non-empty shape " + FormatShape(shape));
  }
  *data_bytes = static_cast<size_t>(bytes);
  return Status::Ok();
}

// The magic, version 1.0, the u16 header length and the dict, padded with
// spaces so the data starts on a kDataAlign boundary, as numpy does.
std::string EncodeHeader(DType dtype, const std::vector<int64_t>& shape) {
  std::string dict = std::string("{'descr': '") + FindDType(dtype)->descr +
                     "', 'fortran_order': False, 'shape': " +
                     FormatShape(shape) + ", }";
  constexpr size_t kPreludeLen = kVersionEnd + 2;
  const size_t unpadded = kPreludeLen + dict.size() + 1;  // +1 for '\n'
  dict.append((kDataAlign - unpadded % kDataAlign) % kDataAlign, ' ');
  dict.push_back('\n');

  // With rank <= 8 the dict is a few hundred bytes, well within a u16.
  std::string out(reinterpret_cast<const char*>(kMagic), kMagicLen);
  out.push_back('\x01');
  out.push_back('\x00');
  out.push_back(static_cast<char>(dict.size() & 0xff));
  out.push_back(static_cast<char>(dict.size() >> 8));
  out += dict;
  return out;
}

Status WriteNpyImpl(const std::string& path, DType dtype,
                    const std::vector<int64_t>& shape, const void* data) {
  size_t data_bytes = 0;
  ATTNSCORE_RETURN_IF_ERROR(CheckWriteArgs(path, dtype, shape, data, &data_bytes));
  const std::string header = EncodeHeader(dtype, shape);
  const std::span<const std::byte> pieces[] = {
      std::as_bytes(std::span(header)),
      {static_cast<const std::byte*>(data), data_bytes}};
  return internal::WriteFileAtomically(path, pieces);
}

}  // namespace

const char* DTypeName(DType dtype) {
  const DTypeInfo* info = FindDType(dtype);
  return info != nullptr ? info->name : "unknown";
}

size_t DTypeSize(DType dtype) {
  const DTypeInfo* info = FindDType(dtype);
  return info != nullptr ? info->size : 0;
}

int64_t NpyArray::size() const {
  int64_t count = 1;
  for (int64_t dim : shape) count *= dim;
  return count;
}

// The entry points turn any exception (in practice std::bad_alloc from a
// large but genuine file) into a Status: none may cross the API.
Status ReadNpy(const std::string& path, NpyArray* out) {
  try {
    return ReadNpyImpl(path, out);
  } catch (const std::exception& e) {
    return Status::Internal(path + ": reading failed: " + e.what());
  }
}

Status WriteNpy(const std::string& path, DType dtype,
                const std::vector<int64_t>& shape, const void* data) {
  try {
    return WriteNpyImpl(path, dtype, shape, data);
  } catch (const std::exception& e) {
    return Status::Internal(path + ": writing failed: " + e.what());
  }
}

}  // namespace attnscore::npy
