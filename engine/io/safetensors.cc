#include "io/safetensors.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <exception>
#include <optional>
#include <set>
#include <span>
#include <string_view>
#include <utility>

#include "base/file_io.h"

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

// JSON numbers are doubles in many readers (Python's json is exact, but
// JavaScript's is not); the format's integers stay within 2^53 so that every
// reader agrees on them. Larger claims are rejected rather than rounded.
constexpr int64_t kMaxJsonInt = int64_t{1} << 53;

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

// ---------------------------------------------------------------------------
// Messages and sizes (the shared helpers are in base/file_io.h)

using internal::Fd;
using internal::FormatShape;
using internal::Malformed;
using internal::MulNonNegative;
using internal::OpenForRead;
using internal::ReadExactly;

// Names and header text come from the file; messages show them escaped, cut
// after 60 bytes.
std::string Printable(std::string_view text) { return internal::Printable(text, 60); }

std::string Quoted(std::string_view name) { return "'" + Printable(name) + "'"; }

std::string FormatRange(int64_t begin, int64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + "]";
}

// Element count of a shape with non-negative dims. False on overflow, also
// for (2^40, 2^40, 2^40, 0): see ShapeProduct.
bool ElementCount(const std::vector<int64_t>& shape, int64_t* count) {
  return internal::ShapeProduct(shape, 1, count);
}

// ---------------------------------------------------------------------------
// UTF-8

// Length of the well-formed UTF-8 sequence starting at text[pos] (a byte
// >= 0x80), or 0 if it is not one: overlong forms, UTF-16 surrogates and
// code points past U+10FFFF are all refused, as RFC 3629 requires.
size_t Utf8SequenceLength(std::string_view text, size_t pos) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[pos + i]); };
  const unsigned char lead = byte(0);
  size_t len = 0;
  unsigned char low = 0x80;  // the range allowed for the second byte
  unsigned char high = 0xbf;
  if (lead >= 0xc2 && lead <= 0xdf) {
    len = 2;
  } else if (lead >= 0xe0 && lead <= 0xef) {
    len = 3;
    if (lead == 0xe0) low = 0xa0;   // overlong
    if (lead == 0xed) high = 0x9f;  // surrogates
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    len = 4;
    if (lead == 0xf0) low = 0x90;   // overlong
    if (lead == 0xf4) high = 0x8f;  // past U+10FFFF
  } else {
    return 0;
  }
  if (text.size() - pos < len) return 0;
  if (byte(1) < low || byte(1) > high) return 0;
  for (size_t i = 2; i < len; ++i) {
    if (byte(i) < 0x80 || byte(i) > 0xbf) return 0;
  }
  return len;
}

bool IsValidUtf8(std::string_view text) {
  for (size_t pos = 0; pos < text.size();) {
    if (static_cast<unsigned char>(text[pos]) < 0x80) {
      ++pos;
      continue;
    }
    const size_t len = Utf8SequenceLength(text, pos);
    if (len == 0) return false;
    pos += len;
  }
  return true;
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xc0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xe0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else {
    out->push_back(static_cast<char>(0xf0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  }
}

// ---------------------------------------------------------------------------
// Header parser

// One tensor entry as written in the header, before any checks against the
// data buffer.
struct Entry {
  std::string name;
  std::optional<std::string> dtype;
  std::optional<std::vector<int64_t>> shape;
  std::optional<std::array<int64_t, 2>> offsets;
};

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

bool IsJsonSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// A parser for exactly the JSON a safetensors header holds. It is driven by
// the expected structure instead of building a generic tree, which keeps it
// small and bounds both its memory (at most the parsed names, strings and
// integers) and its depth (three levels, by construction, so a file nested
// thousands deep fails at its fourth '[' or '{' without recursing).
//
// Within that structure it follows RFC 8259: any JSON whitespace between
// tokens, all string escapes including surrogate pairs, well-formed UTF-8.
// Integers must be non-negative, at most 2^53 and written without fraction,
// exponent or leading zeros. Floats, booleans and null never fit the
// structure and are rejected where they appear.
class HeaderParser {
 public:
  explicit HeaderParser(std::string_view text) : text_(text) {}

  // Parses all of the text; on failure returns false and error() says why.
  bool Parse(std::vector<Entry>* entries, SafetensorsMetadata* metadata);
  const std::string& error() const { return error_; }

 private:
  template <typename OnMember>
  bool ParseObject(const std::string& what, OnMember on_member);
  bool ParseTensor(Entry* entry);
  bool ParseMetadata(SafetensorsMetadata* metadata);
  bool ParseString(std::string* out);
  bool ParseEscape(std::string* out);
  bool ParseHex4(uint32_t* out);
  bool ParseUint(const std::string& what, int64_t* out);
  bool ParseUintArray(const std::string& what, size_t max_count, const std::string& too_many,
                      std::vector<int64_t>* out);

  // "an array", "a string", ... for the JSON value starting at pos_; null
  // when no JSON value starts there.
  const char* KindHere() const;
  // Fails because `what` is not `wanted` (e.g. "a string"), saying what it
  // is instead.
  bool FailKind(const std::string& what, const char* wanted);
  // Fails because `wanted` (e.g. "':'") is not at pos_.
  bool FailExpected(const std::string& wanted);
  bool Fail(const std::string& what) {
    error_ = what + " (at offset " + std::to_string(pos_) + " of the header)";
    return false;
  }

  bool AtEnd() const { return pos_ >= text_.size(); }
  bool Peek(char c) const { return !AtEnd() && text_[pos_] == c; }
  bool LooksAt(std::string_view word) const { return text_.substr(pos_).starts_with(word); }
  void SkipSpaces() {
    while (!AtEnd() && IsJsonSpace(text_[pos_])) ++pos_;
  }

  std::string_view text_;
  size_t pos_ = 0;
  std::string error_;
};

const char* HeaderParser::KindHere() const {
  if (AtEnd()) return nullptr;
  const char c = text_[pos_];
  if (c == '{') return "an object";
  if (c == '[') return "an array";
  if (c == '"') return "a string";
  if (IsDigit(c) || (c == '-' && pos_ + 1 < text_.size() && IsDigit(text_[pos_ + 1]))) {
    return "a number";
  }
  if (LooksAt("true") || LooksAt("false")) return "a boolean";
  if (LooksAt("null")) return "null";
  return nullptr;
}

bool HeaderParser::FailKind(const std::string& what, const char* wanted) {
  if (AtEnd()) return FailExpected(wanted);
  if (const char* kind = KindHere()) {
    return Fail(what + " is " + kind + ", not " + wanted);
  }
  return Fail(what + ": expected " + wanted + " but found '" + Printable(text_.substr(pos_, 1)) +
              "' (not JSON)");
}

bool HeaderParser::FailExpected(const std::string& wanted) {
  if (AtEnd()) return Fail("truncated JSON: the header ends where " + wanted + " was expected");
  return Fail("expected " + wanted + " but found '" + Printable(text_.substr(pos_, 1)) + "'");
}

bool HeaderParser::Parse(std::vector<Entry>* entries, SafetensorsMetadata* metadata) {
  if (text_.empty()) return Fail("header is empty (not a JSON object)");
  // The format requires '{' as the very first byte; other readers rely on it
  // to tell a safetensors file from anything else.
  if (!Peek('{')) {
    if (IsJsonSpace(text_[0])) return Fail("header starts with whitespace, not '{'");
    if (const char* kind = KindHere()) {
      return Fail(std::string("header is ") + kind + ", not a JSON object");
    }
    return Fail("header is not JSON: it starts with '" + Printable(text_.substr(0, 1)) +
                "', not '{'");
  }
  std::set<std::string, std::less<>> names;
  bool have_metadata = false;
  const bool ok = ParseObject("the header", [&](std::string key, size_t key_pos) {
    if (key == kMetadataKey) {
      if (have_metadata) {
        pos_ = key_pos;
        return Fail("duplicate __metadata__ entry");
      }
      have_metadata = true;
      return ParseMetadata(metadata);
    }
    if (key.empty()) {
      pos_ = key_pos;
      return Fail("empty tensor name");
    }
    if (!names.insert(key).second) {
      pos_ = key_pos;
      return Fail("duplicate tensor name " + Quoted(key));
    }
    Entry& entry = entries->emplace_back();
    entry.name = std::move(key);
    return ParseTensor(&entry);
  });
  if (!ok) return false;
  // The format allows padding the header with spaces (0x20), and only those.
  while (Peek(' ')) ++pos_;
  if (!AtEnd()) {
    return Fail("unexpected bytes after the JSON object ('" + Printable(text_.substr(pos_, 8)) +
                "'; only space padding may follow)");
  }
  return true;
}

// Parses '{' "key": value, ... '}' at pos_, calling on_member(key, key_pos)
// with pos_ at each value; it must parse the value or fail.
template <typename OnMember>
bool HeaderParser::ParseObject(const std::string& what, OnMember on_member) {
  if (!Peek('{')) return FailKind(what, "an object");
  ++pos_;
  SkipSpaces();
  if (Peek('}')) {
    ++pos_;
    return true;
  }
  while (true) {
    const size_t key_pos = pos_;
    if (!Peek('"')) return FailExpected("a quoted key in " + what);
    std::string key;
    if (!ParseString(&key)) return false;
    SkipSpaces();
    if (!Peek(':')) return FailExpected("':' after key " + Quoted(key));
    ++pos_;
    SkipSpaces();
    if (!on_member(std::move(key), key_pos)) return false;
    SkipSpaces();
    if (Peek('}')) {
      ++pos_;
      return true;
    }
    if (!Peek(',')) return FailExpected("',' or '}' in " + what);
    ++pos_;
    SkipSpaces();
  }
}

bool HeaderParser::ParseTensor(Entry* entry) {
  const std::string tensor = "tensor " + Quoted(entry->name);
  const bool ok = ParseObject(tensor, [&](std::string key, size_t key_pos) {
    const bool duplicate = (key == "dtype" && entry->dtype) || (key == "shape" && entry->shape) ||
                           (key == "data_offsets" && entry->offsets);
    if (duplicate) {
      pos_ = key_pos;
      return Fail(tensor + " has a duplicate key " + Quoted(key));
    }
    if (key == "dtype") {
      if (!Peek('"')) return FailKind("'dtype' of " + tensor, "a string");
      return ParseString(&entry->dtype.emplace());
    }
    if (key == "shape") {
      return ParseUintArray("'shape' of " + tensor, kMaxSafetensorsRank,
                            "'shape' of " + tensor + " has more than " +
                                std::to_string(kMaxSafetensorsRank) + " dimensions",
                            &entry->shape.emplace());
    }
    if (key == "data_offsets") {
      const std::string what = "'data_offsets' of " + tensor;
      const std::string not_two = what + " must be two integers [begin, end]";
      std::vector<int64_t> offsets;
      if (!ParseUintArray(what, 2, not_two, &offsets)) return false;
      if (offsets.size() != 2) return Fail(not_two);
      entry->offsets.emplace(std::array<int64_t, 2>{offsets[0], offsets[1]});
      return true;
    }
    pos_ = key_pos;
    return Fail(tensor + " has unknown key " + Quoted(key) +
                " (want dtype, shape and data_offsets)");
  });
  if (!ok) return false;
  if (!entry->dtype) return Fail(tensor + " has no 'dtype'");
  if (!entry->shape) return Fail(tensor + " has no 'shape'");
  if (!entry->offsets) return Fail(tensor + " has no 'data_offsets'");
  return true;
}

bool HeaderParser::ParseMetadata(SafetensorsMetadata* metadata) {
  return ParseObject("__metadata__", [&](std::string key, size_t key_pos) {
    const std::string what = "__metadata__ value for key " + Quoted(key);
    if (!Peek('"')) return FailKind(what, "a string");
    std::string value;
    if (!ParseString(&value)) return false;
    if (!metadata->emplace(std::move(key), std::move(value)).second) {
      pos_ = key_pos;
      return Fail("__metadata__ has a duplicate key");
    }
    return true;
  });
}

bool HeaderParser::ParseString(std::string* out) {
  const size_t open = pos_++;  // the caller saw '"'
  out->clear();
  while (true) {
    if (AtEnd()) {
      pos_ = open;
      return Fail("unterminated string (truncated JSON?)");
    }
    const auto c = static_cast<unsigned char>(text_[pos_]);
    if (c == '"') {
      ++pos_;
      return true;
    }
    if (c == '\\') {
      if (!ParseEscape(out)) return false;
    } else if (c < 0x20) {
      return Fail("control character 0x" + Printable(text_.substr(pos_, 1)).substr(2) +
                  " in a string (JSON requires it escaped)");
    } else if (c < 0x80) {
      out->push_back(static_cast<char>(c));
      ++pos_;
    } else {
      const size_t len = Utf8SequenceLength(text_, pos_);
      if (len == 0) return Fail("invalid UTF-8 in a string");
      out->append(text_.substr(pos_, len));
      pos_ += len;
    }
  }
}

// Decodes the escape at pos_ (a backslash) and appends its UTF-8.
bool HeaderParser::ParseEscape(std::string* out) {
  const size_t start = pos_++;
  if (AtEnd()) return FailExpected("an escape character after '\\'");
  const char c = text_[pos_++];
  switch (c) {
    case '"':
      out->push_back('"');
      return true;
    case '\\':
      out->push_back('\\');
      return true;
    case '/':
      out->push_back('/');
      return true;
    case 'b':
      out->push_back('\b');
      return true;
    case 'f':
      out->push_back('\f');
      return true;
    case 'n':
      out->push_back('\n');
      return true;
    case 'r':
      out->push_back('\r');
      return true;
    case 't':
      out->push_back('\t');
      return true;
    case 'u':
      break;
    default:
      pos_ = start;
      return Fail("invalid escape '\\" + Printable(std::string_view(&c, 1)) + "' in a string");
  }
  uint32_t cp = 0;
  if (!ParseHex4(&cp)) return false;
  // Code points past U+FFFF are written as a UTF-16 surrogate pair, each
  // half escaped; a half on its own encodes nothing.
  if (cp >= 0xdc00 && cp <= 0xdfff) {
    pos_ = start;
    return Fail("unpaired UTF-16 surrogate in a \\u escape");
  }
  if (cp >= 0xd800 && cp <= 0xdbff) {
    uint32_t low = 0;
    if (!LooksAt("\\u")) {
      pos_ = start;
      return Fail("unpaired UTF-16 surrogate in a \\u escape");
    }
    pos_ += 2;
    if (!ParseHex4(&low)) return false;
    if (low < 0xdc00 || low > 0xdfff) {
      pos_ = start;
      return Fail("unpaired UTF-16 surrogate in a \\u escape");
    }
    cp = 0x10000 + ((cp - 0xd800) << 10) + (low - 0xdc00);
  }
  AppendUtf8(cp, out);
  return true;
}

bool HeaderParser::ParseHex4(uint32_t* out) {
  *out = 0;
  for (int i = 0; i < 4; ++i) {
    if (AtEnd()) return FailExpected("4 hex digits after '\\u'");
    const char c = text_[pos_];
    uint32_t digit = 0;
    if (IsDigit(c)) {
      digit = static_cast<uint32_t>(c - '0');
    } else if (c >= 'a' && c <= 'f') {
      digit = static_cast<uint32_t>(c - 'a' + 10);
    } else if (c >= 'A' && c <= 'F') {
      digit = static_cast<uint32_t>(c - 'A' + 10);
    } else {
      return FailExpected("4 hex digits after '\\u'");
    }
    *out = *out * 16 + digit;
    ++pos_;
  }
  return true;
}

bool HeaderParser::ParseUint(const std::string& what, int64_t* out) {
  const size_t start = pos_;
  const bool number =
      !AtEnd() &&
      (IsDigit(text_[pos_]) || (Peek('-') && pos_ + 1 < text_.size() && IsDigit(text_[pos_ + 1])));
  if (!number) return FailKind(what, "a non-negative integer");
  // Take the whole number token so the message can show it.
  size_t end = pos_ + 1;
  while (end < text_.size() && (IsDigit(text_[end]) || text_[end] == '.' || text_[end] == 'e' ||
                                text_[end] == 'E' || text_[end] == '+' || text_[end] == '-')) {
    ++end;
  }
  const std::string_view token = text_.substr(start, end - start);
  const std::string shown = Printable(token.substr(0, 24)) + (token.size() > 24 ? "..." : "");
  if (token[0] == '-') return Fail(what + " is negative (" + shown + ")");
  int64_t value = 0;
  bool too_large = false;
  size_t digits = 0;
  for (; digits < token.size() && IsDigit(token[digits]); ++digits) {
    if (!too_large) value = value * 10 + (token[digits] - '0');
    if (value > kMaxJsonInt) too_large = true;  // checked before it can overflow
  }
  if (digits != token.size()) return Fail(what + " is not an integer (" + shown + ")");
  if (digits > 1 && token[0] == '0') return Fail(what + " has a leading zero (" + shown + ")");
  if (too_large) return Fail(what + " is " + shown + ", above the limit of 2^53");
  pos_ = end;
  *out = value;
  return true;
}

bool HeaderParser::ParseUintArray(const std::string& what, size_t max_count,
                                  const std::string& too_many, std::vector<int64_t>* out) {
  if (!Peek('[')) return FailKind(what, "an array");
  ++pos_;
  SkipSpaces();
  out->clear();
  if (Peek(']')) {
    ++pos_;
    return true;
  }
  while (true) {
    if (out->size() == max_count) return Fail(too_many);
    int64_t value = 0;
    if (!ParseUint(what + " entry", &value)) return false;
    out->push_back(value);
    SkipSpaces();
    if (Peek(']')) {
      ++pos_;
      return true;
    }
    if (!Peek(',')) return FailExpected("',' or ']' in " + what);
    ++pos_;
    SkipSpaces();
  }
}

// ---------------------------------------------------------------------------
// Layout checks

// Checks one tensor's dtype, shape and byte range against the buffer.
Status CheckEntry(const std::string& path, const Entry& entry, uint64_t buffer_size) {
  const std::string tensor = "tensor " + Quoted(entry.name);
  const DTypeInfo* info = FindDType(*entry.dtype);
  if (info == nullptr) {
    return Malformed(path, tensor + " has unknown dtype " + Quoted(*entry.dtype));
  }
  const std::vector<int64_t>& shape = *entry.shape;
  int64_t count = 0;
  int64_t bits = 0;
  if (!ElementCount(shape, &count) || !MulNonNegative(count, info->bits, &bits)) {
    return Malformed(path, tensor + " has shape " + FormatShape(shape) +
                               " whose element count or byte size overflows int64");
  }
  if (bits % 8 != 0) {
    return Malformed(path, tensor + " has shape " + FormatShape(shape) + " of " + info->name +
                               " that does not fill a whole number of bytes");
  }
  const auto [begin, end] = *entry.offsets;
  const std::string range = "data_offsets " + FormatRange(begin, end);
  if (begin > end) return Malformed(path, tensor + " has " + range + " that end before they begin");
  if (static_cast<uint64_t>(end) > buffer_size) {
    return Malformed(path, tensor + " has " + range + " beyond the end of the " +
                               std::to_string(buffer_size) + "-byte data buffer");
  }
  if (end - begin != bits / 8) {
    return Malformed(path, tensor + " has " + std::to_string(end - begin) + " bytes of data (" +
                               range + ") but shape " + FormatShape(shape) + " of " + info->name +
                               " needs " + std::to_string(bits / 8));
  }
  return Status::Ok();
}

// The tensors must tile the buffer: sorted by offset, each starts where the
// previous one ended and the last ends at the buffer's end. Empty tensors
// may share an offset with their neighbours.
Status CheckTiling(const std::string& path, const std::vector<Entry>& entries,
                   uint64_t buffer_size) {
  std::vector<const Entry*> order;
  order.reserve(entries.size());
  for (const Entry& entry : entries) order.push_back(&entry);
  std::sort(order.begin(), order.end(),
            [](const Entry* a, const Entry* b) { return *a->offsets < *b->offsets; });
  int64_t covered = 0;
  const Entry* previous = nullptr;
  for (const Entry* entry : order) {
    const auto [begin, end] = *entry->offsets;
    if (begin < covered) {
      return Malformed(path, "tensors " + Quoted(previous->name) + " " +
                                 FormatRange((*previous->offsets)[0], covered) + " and " +
                                 Quoted(entry->name) + " " + FormatRange(begin, end) +
                                 " overlap in the data buffer");
    }
    if (begin > covered) {
      return Malformed(path, "bytes " + FormatRange(covered, begin) +
                                 " of the data buffer belong to no tensor (a hole before " +
                                 Quoted(entry->name) + ")");
    }
    covered = end;
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
Status LoadTensors(const std::string& path, int fd, uint64_t data_start, std::vector<Entry> entries,
                   std::vector<SafetensorsTensor>* out) {
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.name < b.name; });
  for (const Entry& entry : entries) {
    if (*entry.dtype != kLoadableDType) {
      return Malformed(path, "tensor " + Quoted(entry.name) + " has dtype " +
                                 Printable(*entry.dtype) + "; only F32 tensors can be loaded");
    }
  }
  std::vector<SafetensorsTensor> tensors(entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    Entry& entry = entries[i];
    SafetensorsTensor& tensor = tensors[i];
    const auto [begin, end] = *entry.offsets;
    // CheckEntry made end - begin = 4 * element count, within the buffer.
    tensor.data.resize(static_cast<size_t>(end - begin) / sizeof(float));
    ATTNSCORE_RETURN_IF_ERROR(ReadExactly(path, fd, data_start + static_cast<uint64_t>(begin),
                                          static_cast<size_t>(end - begin), tensor.data.data()));
    tensor.name = std::move(entry.name);
    tensor.dtype = std::move(*entry.dtype);
    tensor.shape = std::move(*entry.shape);
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

  std::vector<Entry> entries;
  SafetensorsMetadata meta;
  HeaderParser parser(text);
  if (!parser.Parse(&entries, &meta)) return Malformed(path, "malformed header: " + parser.error());

  // Every size check happens here, before any tensor data is allocated.
  const uint64_t data_start = kLengthPrefix + text.size();
  const uint64_t buffer_size = file_size - data_start;
  for (const Entry& entry : entries) {
    ATTNSCORE_RETURN_IF_ERROR(CheckEntry(path, entry, buffer_size));
  }
  ATTNSCORE_RETURN_IF_ERROR(CheckTiling(path, entries, buffer_size));

  std::vector<SafetensorsTensor> loaded;
  ATTNSCORE_RETURN_IF_ERROR(LoadTensors(path, fd->get(), data_start, std::move(entries), &loaded));
  *tensors = std::move(loaded);
  if (metadata != nullptr) *metadata = std::move(meta);
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

// JSON string syntax for `text`, which is valid UTF-8: quotes, backslashes
// and control characters are escaped, everything else is written as is.
void AppendJsonString(std::string_view text, std::string* out) {
  out->push_back('"');
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out->push_back('\\');
      out->push_back(c);
    } else if (u < 0x20) {
      static constexpr char kHex[] = "0123456789abcdef";
      *out += "\\u00";
      out->push_back(kHex[u >> 4]);
      out->push_back(kHex[u & 0xf]);
    } else {
      out->push_back(c);
    }
  }
  out->push_back('"');
}

Status CheckWriteString(const std::string& path, const std::string& what, const std::string& text) {
  if (!IsValidUtf8(text)) return Malformed(path, what + " " + Quoted(text) + " is not valid UTF-8");
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
  if (!ElementCount(tensor.shape, &count) ||
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
    // Offsets are JSON integers, which readers hold exactly only to 2^53.
    if (total > kMaxJsonInt) return Malformed(path, "the tensors' total size is too large");
  }
  return Status::Ok();
}

// The length prefix and the header JSON, padded with spaces to a multiple of
// 8 bytes so the data starts aligned, as the reference writer does.
std::string EncodeHeader(const std::vector<const SafetensorsTensor*>& sorted,
                         const SafetensorsMetadata& metadata) {
  std::string json = "{";
  if (!metadata.empty()) {
    json += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [key, value] : metadata) {
      if (!first) json += ",";
      first = false;
      AppendJsonString(key, &json);
      json += ":";
      AppendJsonString(value, &json);
    }
    json += "}";
  }
  int64_t offset = 0;
  for (const SafetensorsTensor* tensor : sorted) {
    if (json.size() > 1) json += ",";
    AppendJsonString(tensor->name, &json);
    json += ":{\"dtype\":\"F32\",\"shape\":[";
    for (size_t i = 0; i < tensor->shape.size(); ++i) {
      if (i > 0) json += ",";
      json += std::to_string(tensor->shape[i]);
    }
    const int64_t end = offset + static_cast<int64_t>(tensor->data.size() * sizeof(float));
    json += "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(end) + "]}";
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
