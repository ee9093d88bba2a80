#include "io/safetensors_header.h"

#include <algorithm>
#include <cstddef>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <utility>

#include "base/file_io.h"

namespace attnscore::io {
namespace {

using internal::Malformed;

constexpr std::string_view kMetadataKey = "__metadata__";
// The keys of a tensor's object, all required.
constexpr const char* kTensorKeys[] = {"dtype", "shape", "data_offsets"};

// JSON numbers are doubles in many readers (Python's json is exact, but
// JavaScript's is not); the format's integers stay within 2^53 so that every
// reader agrees on them. Larger claims are rejected rather than rounded.
constexpr uint64_t kMaxJsonInt = uint64_t{1} << 53;

// Names and header text come from the file; messages show them escaped, cut
// after 60 bytes.
std::string Printable(std::string_view text) { return internal::Printable(text, 60); }

std::string Quoted(std::string_view name) { return "'" + Printable(name) + "'"; }

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

bool IsJsonSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// ---------------------------------------------------------------------------
// Tokens

// Hands the header to nlohmann's lexer byte by byte and records how many
// bytes it has taken, so that each SAX event can be placed in the text: when
// an event arrives the lexer has read exactly to the end of its token, or
// one byte further for a number.
class CountingIterator {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;

  CountingIterator(std::string_view text, size_t at, size_t* taken)
      : text_(text), at_(at), taken_(taken) {}
  reference operator*() const { return text_[at_]; }
  CountingIterator& operator++() {
    *taken_ = ++at_;
    return *this;
  }
  bool operator==(const CountingIterator& other) const { return at_ == other.at_; }

 private:
  std::string_view text_;
  size_t at_;
  size_t* taken_;
};

// kInvalid: no JSON value starts there.
enum class Kind { kObject, kArray, kString, kNumber, kBoolean, kNull, kInvalid };

// How messages name a value of `kind`, or one that is `wanted` there.
const char* KindName(Kind kind, bool wanted = false) {
  constexpr const char* kNames[] = {"an object", "an array", "a string", "a number",
                                    "a boolean", "null",     "not JSON"};
  return wanted && kind == Kind::kNumber ? "a non-negative integer"
                                         : kNames[static_cast<int>(kind)];
}

Kind KindAt(std::string_view text, size_t pos) {
  const std::string_view rest = text.substr(std::min(pos, text.size()));
  if (rest.starts_with('{')) return Kind::kObject;
  if (rest.starts_with('[')) return Kind::kArray;
  if (rest.starts_with('"')) return Kind::kString;
  if (!rest.empty() &&
      (IsDigit(rest[0]) || (rest.size() > 1 && rest[0] == '-' && IsDigit(rest[1])))) {
    return Kind::kNumber;
  }
  if (rest.starts_with("true") || rest.starts_with("false")) return Kind::kBoolean;
  return rest.starts_with("null") ? Kind::kNull : Kind::kInvalid;
}

// The number token at text[pos], with anything a malformed number may hold.
std::string_view NumberAt(std::string_view text, size_t pos) {
  const size_t end = text.find_first_not_of("0123456789.eE+-", pos);
  return text.substr(pos, end == text.npos ? text.npos : end - pos);
}

// Why the number `token` is not an integer the format allows, or "" when it
// is one: then *out is its value, which the lexer read as `value` (none when
// it could not hold it in 64 bits).
std::string UintProblem(std::string_view token, std::optional<uint64_t> value, int64_t* out) {
  const auto shown = [&] {
    return Printable(token.substr(0, 24)) + (token.size() > 24 ? "..." : "");
  };
  if (token.empty() || token[0] == '-') return " is negative (" + shown() + ")";
  if (!std::all_of(token.begin(), token.end(), IsDigit)) {
    return " is not an integer (" + shown() + ")";
  }
  if (token.size() > 1 && token[0] == '0') return " has a leading zero (" + shown() + ")";
  if (!value || *value > kMaxJsonInt) return " is " + shown() + ", above the limit of 2^53";
  *out = static_cast<int64_t>(*value);
  return "";
}

// ---------------------------------------------------------------------------
// The structure

// Follows nlohmann's SAX events through the expected structure and stops the
// parse (by returning false) at the first event that does not fit it.
// Messages say where in the header the offending token starts.
class HeaderHandler : public nlohmann::json_sax<nlohmann::json> {
 public:
  explicit HeaderHandler(std::string_view text) : text_(text) {}

  // Parses the header (which starts with '{') into entries, in file order,
  // and metadata. On failure returns false and error() says why.
  bool Parse(std::vector<SafetensorsEntry>* entries, SafetensorsMetadata* metadata);
  const std::string& error() const { return error_; }

  bool null() override { return Value(Kind::kNull); }
  bool boolean(bool) override { return Value(Kind::kBoolean); }
  bool number_integer(number_integer_t) override { return Number(std::nullopt); }
  bool number_unsigned(number_unsigned_t value) override { return Number(value); }
  bool number_float(number_float_t, const string_t&) override { return Number(std::nullopt); }
  bool string(string_t& value) override { return Value(Kind::kString, &value); }
  bool binary(binary_t&) override { return Fail("unexpected binary value", TokenStart()); }
  bool start_object(size_t) override { return Value(Kind::kObject); }
  bool start_array(size_t) override { return Value(Kind::kArray); }
  bool key(string_t& key) override;
  bool end_object() override { return End(); }
  bool end_array() override { return End(); }
  bool parse_error(size_t position, const std::string&,
                   const nlohmann::json::exception& ex) override;

 private:
  enum class Level { kStart, kHeader, kTensor, kMetadata, kShape, kOffsets, kDone };
  // The last token taken: an opening bracket, a key, or a whole value.
  enum class Last { kOpen, kKey, kValue };

  bool InArray() const { return level_ == Level::kShape || level_ == Level::kOffsets; }
  std::vector<int64_t>& Array() {
    return level_ == Level::kShape ? entries_.back().shape : offsets_;
  }
  std::string Tensor() const { return "tensor " + Quoted(entries_.back().name); }
  // The object or array being read, as messages name it.
  std::string Where() const {
    if (level_ == Level::kHeader) return "the header";
    if (level_ == Level::kMetadata) return "__metadata__";
    if (level_ == Level::kTensor) return Tensor();
    return std::string(level_ == Level::kShape ? "'shape' of " : "'data_offsets' of ") + Tensor();
  }
  // The first byte of the token after mark_: past whitespace and the one
  // ',' or ':' the parser has checked there.
  size_t TokenStart() const {
    const size_t pos = SkipSpaces(mark_);
    return At(pos, ',') || At(pos, ':') ? SkipSpaces(pos + 1) : pos;
  }
  size_t SkipSpaces(size_t pos) const {
    while (pos < text_.size() && IsJsonSpace(text_[pos])) ++pos;
    return pos;
  }
  bool At(size_t pos, char c) const { return pos < text_.size() && text_[pos] == c; }

  bool Value(Kind kind, std::string* text = nullptr);
  bool Number(std::optional<uint64_t> value);
  bool End();
  bool Check(Kind kind, size_t pos, std::optional<uint64_t> value, int64_t* number);
  bool StringFailed(size_t pos, size_t position, const nlohmann::json::exception& ex);

  bool BadCount(size_t pos) {
    return Fail(
        Where() + (level_ == Level::kOffsets
                       ? " must be two integers [begin, end]"
                       : " has more than " + std::to_string(kMaxSafetensorsRank) + " dimensions"),
        pos);
  }
  bool Expected(const std::string& wanted, size_t pos) {
    if (pos >= text_.size()) {
      return Fail("truncated JSON: the header ends where " + wanted + " was expected", pos);
    }
    return Fail("expected " + wanted + " but found '" + Printable(text_.substr(pos, 1)) + "'", pos);
  }
  bool FailKind(const std::string& what, Kind kind, Kind want, size_t pos) {
    const std::string wanted = KindName(want, true);
    if (kind != Kind::kInvalid) {
      return Fail(what + " is " + KindName(kind) + ", not " + wanted, pos);
    }
    if (pos >= text_.size()) return Expected(wanted, pos);
    return Fail(what + ": expected " + wanted + " but found '" + Printable(text_.substr(pos, 1)) +
                    "' (not JSON)",
                pos);
  }
  bool Fail(const std::string& what, size_t pos) {
    error_ = what + " (at offset " + std::to_string(pos) + " of the header)";
    return false;
  }

  std::string_view text_;
  size_t taken_ = 0;  // bytes the lexer has read
  size_t mark_ = 0;   // the end of the last token taken
  std::string error_;
  Level level_ = Level::kStart;
  Last last_ = Last::kOpen;
  std::string key_;  // the key of the member being read, and where it starts
  size_t key_pos_ = 0;

  std::vector<SafetensorsEntry> entries_;
  std::set<std::string, std::less<>> names_;
  int seen_ = 0;  // bit i: the tensor being read has kTensorKeys[i]
  std::vector<int64_t> offsets_;
  SafetensorsMetadata metadata_;
  bool have_metadata_ = false;
};

bool HeaderHandler::Parse(std::vector<SafetensorsEntry>* entries, SafetensorsMetadata* metadata) {
  // Not strict: the parse ends with the object, and the padding after it is
  // checked here, since the format allows spaces only.
  const bool parsed = nlohmann::json::sax_parse(
      CountingIterator(text_, 0, &taken_), CountingIterator(text_, text_.size(), &taken_), this,
      nlohmann::json::input_format_t::json, /*strict=*/false);
  if (!parsed || level_ != Level::kDone) return error_.empty() ? Fail("invalid JSON", 0) : false;
  const size_t pos = std::min(text_.find_first_not_of(' ', mark_), text_.size());
  if (pos < text_.size()) {
    return Fail("unexpected bytes after the JSON object ('" + Printable(text_.substr(pos, 8)) +
                    "'; only space padding may follow)",
                pos);
  }
  *entries = std::move(entries_);
  *metadata = std::move(metadata_);
  return true;
}

bool HeaderHandler::key(string_t& key) {
  key_pos_ = TokenStart();
  mark_ = taken_;
  key_ = std::move(key);
  last_ = Last::kKey;
  return true;
}

bool HeaderHandler::Value(Kind kind, std::string* text) {
  const size_t pos = TokenStart();
  mark_ = taken_;
  last_ = kind == Kind::kObject || kind == Kind::kArray ? Last::kOpen : Last::kValue;
  if (!Check(kind, pos, std::nullopt, nullptr)) return false;
  if (level_ == Level::kStart) {
    level_ = Level::kHeader;
  } else if (level_ == Level::kMetadata) {
    if (!metadata_.emplace(std::move(key_), std::move(*text)).second) {
      return Fail("__metadata__ has a duplicate key", key_pos_);
    }
  } else if (level_ == Level::kHeader && key_ == kMetadataKey) {
    have_metadata_ = true;
    level_ = Level::kMetadata;
  } else if (level_ == Level::kHeader) {
    names_.insert(key_);
    entries_.emplace_back().name = key_;
    seen_ = 0;
    level_ = Level::kTensor;
  } else if (key_ == kTensorKeys[0]) {
    seen_ |= 1;
    entries_.back().dtype = std::move(*text);
  } else {
    seen_ |= key_ == kTensorKeys[1] ? 2 : 4;
    level_ = key_ == kTensorKeys[1] ? Level::kShape : Level::kOffsets;
    offsets_.clear();
  }
  return true;
}

bool HeaderHandler::Number(std::optional<uint64_t> value) {
  if (!InArray()) return Value(Kind::kNumber);
  const size_t pos = TokenStart();
  // The lexer has read a byte past the number, so the token is measured in
  // the text; it may be longer than the lexer's ("02" where it took "0").
  mark_ = pos + NumberAt(text_, pos).size();
  last_ = Last::kValue;
  int64_t number = 0;
  if (!Check(Kind::kNumber, pos, value, &number)) return false;
  Array().push_back(number);
  return true;
}

bool HeaderHandler::End() {
  const size_t pos = TokenStart();
  mark_ = taken_;
  last_ = Last::kValue;
  for (int i = 0; level_ == Level::kTensor && i < 3; ++i) {
    if (!(seen_ >> i & 1)) return Fail(Tensor() + " has no '" + kTensorKeys[i] + "'", pos);
  }
  if (level_ == Level::kOffsets) {
    if (offsets_.size() != 2) return BadCount(pos);
    entries_.back().begin = offsets_[0];
    entries_.back().end = offsets_[1];
  }
  level_ = InArray() ? Level::kTensor : level_ == Level::kHeader ? Level::kDone : Level::kHeader;
  return true;
}

// Checks that a value of `kind` (for a number, read by the lexer as `value`;
// it goes to *number) may start at `pos`: first the key of its member, then
// its kind, then a number's digits.
bool HeaderHandler::Check(Kind kind, size_t pos, std::optional<uint64_t> value, int64_t* number) {
  if (level_ == Level::kStart) return true;  // the '{' Parse's caller saw
  if (InArray()) {
    const size_t max = level_ == Level::kShape ? static_cast<size_t>(kMaxSafetensorsRank) : 2;
    if (Array().size() == max) return BadCount(pos);
    if (kind != Kind::kNumber) return FailKind(Where() + " entry", kind, Kind::kNumber, pos);
    const std::string problem = UintProblem(NumberAt(text_, pos), value, number);
    return problem.empty() || Fail(Where() + " entry" + problem, pos);
  }
  Kind want = Kind::kString;  // a __metadata__ value
  if (level_ == Level::kHeader) {
    if (key_ == kMetadataKey && have_metadata_) {
      return Fail("duplicate __metadata__ entry", key_pos_);
    }
    if (key_.empty()) return Fail("empty tensor name", key_pos_);
    if (names_.contains(key_)) return Fail("duplicate tensor name " + Quoted(key_), key_pos_);
    want = Kind::kObject;
  } else if (level_ == Level::kTensor) {
    const auto index =
        std::find(std::begin(kTensorKeys), std::end(kTensorKeys), key_) - kTensorKeys;
    if (index < 3 && (seen_ >> index & 1)) {
      return Fail(Tensor() + " has a duplicate key " + Quoted(key_), key_pos_);
    }
    if (index == 3) {
      return Fail(
          Tensor() + " has unknown key " + Quoted(key_) + " (want dtype, shape and data_offsets)",
          key_pos_);
    }
    want = index == 0 ? Kind::kString : Kind::kArray;
  }
  if (kind == want) return true;
  std::string what = "tensor " + Quoted(key_);
  if (level_ == Level::kMetadata) what = "__metadata__ value for key " + Quoted(key_);
  if (level_ == Level::kTensor) what = "'" + key_ + "' of " + Tensor();
  if (level_ == Level::kHeader && key_ == kMetadataKey) what = kMetadataKey;
  return FailKind(what, kind, want, pos);
}

// nlohmann's lexer or parser refused the token after mark_. Everything up to
// mark_ was taken, so the bytes from there say what was wrong, in the words
// of the structural checks where they apply.
bool HeaderHandler::parse_error(size_t position, const std::string&,
                                const nlohmann::json::exception& ex) {
  const size_t pos = SkipSpaces(mark_);
  if (last_ == Last::kKey && !At(pos, ':')) return Expected("':' after key " + Quoted(key_), pos);
  if (last_ == Last::kValue && !At(pos, ',')) {
    return Expected(std::string("',' or '") + (InArray() ? ']' : '}') + "' in " + Where(), pos);
  }
  // The refused token: past the ':' or ',' the parser took after mark_.
  const size_t start = last_ == Last::kOpen ? pos : SkipSpaces(pos + 1);
  if (last_ != Last::kKey && !InArray()) {  // a key was wanted
    return At(start, '"') ? StringFailed(start, position, ex)
                          : Expected("a quoted key in " + Where(), start);
  }
  const Kind kind = KindAt(text_, start);
  int64_t unused = 0;
  if (!Check(kind, start, std::nullopt, &unused)) return false;
  return kind == Kind::kString
             ? StringFailed(start, position, ex)
             : Fail("invalid JSON: " + internal::Printable(ex.what(), 200), start);
}

// The string starting at `pos` was refused; the lexer stopped at byte
// position - 1 (text_.size() if it met the end of the header).
bool HeaderHandler::StringFailed(size_t pos, size_t position, const nlohmann::json::exception& ex) {
  // The lexer's words, without the token it quotes after them: that comes
  // from the file and may say anything.
  std::string_view message = ex.what();
  message = message.substr(0, message.find("; last read: "));
  const auto says = [&](std::string_view words) { return message.find(words) != message.npos; };
  const size_t bad = std::min(position - 1, text_.size());
  const std::string byte = Printable(text_.substr(bad, 1));
  if (says("ill-formed UTF-8")) return Fail("invalid UTF-8 in a string", bad);
  if (says("surrogate U+")) return Fail("unpaired UTF-16 surrogate in a \\u escape", bad);
  if (says("must be followed by 4 hex digits")) return Expected("4 hex digits after '\\u'", bad);
  if (says("forbidden character after backslash")) {
    if (bad == text_.size()) return Expected("an escape character after '\\'", bad);
    return Fail("invalid escape '\\" + byte + "' in a string", bad - 1);
  }
  if (says("control character U+") && bad < text_.size()) {
    return Fail("control character 0x" + byte.substr(2) + " in a string (JSON requires it escaped)",
                bad);
  }
  if (says("missing closing quote")) return Fail("unterminated string (truncated JSON?)", pos);
  return Fail("invalid JSON: " + internal::Printable(ex.what(), 200), pos);
}

// Parses the JSON of the header into entries (in file order) and metadata;
// on failure returns false and sets *error.
bool ParseJson(std::string_view text, std::vector<SafetensorsEntry>* entries,
               SafetensorsMetadata* metadata, std::string* error) {
  std::string what;
  // The format requires '{' as the very first byte; other readers rely on it
  // to tell a safetensors file from anything else.
  if (text.empty()) {
    what = "header is empty (not a JSON object)";
  } else if (IsJsonSpace(text[0])) {
    what = "header starts with whitespace, not '{'";
  } else if (KindAt(text, 0) == Kind::kInvalid) {
    what = "header is not JSON: it starts with '" + Printable(text.substr(0, 1)) + "', not '{'";
  } else if (KindAt(text, 0) != Kind::kObject) {
    what = std::string("header is ") + KindName(KindAt(text, 0)) + ", not a JSON object";
  } else {
    HeaderHandler handler(text);
    if (handler.Parse(entries, metadata)) return true;
    *error = handler.error();
    return false;
  }
  *error = what + " (at offset 0 of the header)";
  return false;
}

}  // namespace

Status ParseSafetensorsHeader(const std::string& path, std::string_view text,
                              SafetensorsHeader* header) {
  SafetensorsHeader parsed;
  std::string error;
  if (!ParseJson(text, &parsed.entries, &parsed.metadata, &error)) {
    return Malformed(path, "malformed header: " + error);
  }
  *header = std::move(parsed);
  return Status::Ok();
}

}  // namespace attnscore::io
