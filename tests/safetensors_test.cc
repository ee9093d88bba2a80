#include "io/safetensors.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "io_test_util.h"

#ifndef ATTNSCORE_GOLDEN_DIR
#error "compile with -DATTNSCORE_GOLDEN_DIR=\"<absolute path of tests/golden>\""
#endif

namespace attnscore::io {
namespace {

namespace fs = std::filesystem;
using namespace std::string_literals;

std::string GoldenPath(const std::string& name) {
  return std::string(ATTNSCORE_GOLDEN_DIR) + "/safetensors/" + name;
}

std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The 8-byte little-endian length `n` followed by `rest`.
std::string WithLength(uint64_t n, const std::string& rest) {
  std::string out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  return out + rest;
}

// A file image: the length of `header`, `header`, then `data`.
std::string Image(const std::string& header, const std::string& data = "") {
  return WithLength(header.size(), header + data);
}

// One tensor entry, each value given as JSON source.
std::string Entry(const std::string& name, const std::string& dtype, const std::string& shape,
                  const std::string& offsets) {
  return "\"" + name + "\":{\"dtype\":" + dtype + ",\"shape\":" + shape +
         ",\"data_offsets\":" + offsets + "}";
}

std::string F32Entry(const std::string& name, const std::string& shape,
                     const std::string& offsets) {
  return Entry(name, "\"F32\"", shape, offsets);
}

// Bit-exact comparison, so NaN payloads and -0.0 count.
bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

SafetensorsTensor MakeTensor(const std::string& name, std::vector<int64_t> shape, float base) {
  SafetensorsTensor t;
  t.name = name;
  t.dtype = "F32";
  t.shape = std::move(shape);
  int64_t count = 1;
  for (int64_t dim : t.shape) count *= dim;
  for (int64_t i = 0; i < count; ++i) t.data.push_back(base + 0.25f * static_cast<float>(i));
  return t;
}

// Checks that ReadSafetensors fails with `code`, a message that starts with
// the path and mentions `fragment`, and leaves the outputs untouched.
::testing::AssertionResult ReadFails(const std::string& path, StatusCode code,
                                     const std::string& fragment) {
  std::vector<SafetensorsTensor> tensors(1);
  tensors[0].name = "sentinel";  // a failed read must not change it
  SafetensorsMetadata metadata = {{"sentinel", "x"}};
  const Status status = ReadSafetensors(path, &tensors, &metadata);
  ::testing::AssertionResult result = FailedAs(status, path, code, fragment);
  if (result && (tensors.size() != 1 || tensors[0].name != "sentinel" || metadata.size() != 1)) {
    return ::testing::AssertionFailure() << "a failed read changed the output";
  }
  return result;
}

class SafetensorsTest : public TempDirTest {
 protected:
  SafetensorsTest() : TempDirTest("safetensors_test") {}
};

// ---------------------------------------------------------------------------
// Round trips

void ExpectRoundTrip(const std::string& path, const SafetensorsMetadata& metadata) {
  std::vector<SafetensorsTensor> written = {
      MakeTensor("layer.2.bias", {2, 1, 3}, -1.0f),
      MakeTensor("scale", {}, 7.5f),
      MakeTensor("embed", {5}, 3.0f),
      MakeTensor("layer.1.weight", {2, 3}, -2.0f),
      MakeTensor("empty", {0, 3}, 0.0f),
  };
  // Values that must survive bit for bit.
  written[2].data[1] = std::numeric_limits<float>::quiet_NaN();
  written[2].data[2] = -0.0f;
  written[2].data[3] = std::numeric_limits<float>::infinity();
  written[2].data[4] = std::numeric_limits<float>::denorm_min();
  const Status write = WriteSafetensors(path, written, metadata);
  ASSERT_TRUE(write.ok()) << write.message();

  std::vector<SafetensorsTensor> read;
  SafetensorsMetadata read_metadata = {{"stale", "entry"}};
  const Status status = ReadSafetensors(path, &read, &read_metadata);
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_EQ(read_metadata, metadata);

  std::sort(written.begin(), written.end(),
            [](const auto& a, const auto& b) { return a.name < b.name; });
  ASSERT_EQ(read.size(), written.size());
  for (size_t i = 0; i < read.size(); ++i) {
    SCOPED_TRACE(written[i].name);
    EXPECT_EQ(read[i].name, written[i].name);  // sorted by name
    EXPECT_EQ(read[i].dtype, "F32");
    EXPECT_EQ(read[i].shape, written[i].shape);
    EXPECT_TRUE(SameBits(read[i].data, written[i].data));
  }
}

TEST_F(SafetensorsTest, RoundTripWithoutMetadata) {
  ExpectRoundTrip(Path("m.safetensors"), {});
  // No metadata means no "__metadata__" entry at all, as the reference writes.
  EXPECT_EQ(ReadWholeFile(Path("m.safetensors")).find("__metadata__"), std::string::npos);
}

TEST_F(SafetensorsTest, RoundTripWithMetadata) {
  ExpectRoundTrip(Path("m.safetensors"),
                  {{"format", "pt"},
                   {"note", "quote \" backslash \\ newline \n tab \t nul " + std::string(1, '\0')},
                   {"unicode \xc3\xa9\xe2\x82\xac", "\xf0\x9f\x98\x80"},
                   {"", ""}});
}

TEST_F(SafetensorsTest, RoundTripNoTensors) {
  const std::string path = Path("m.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, {}).ok());
  EXPECT_EQ(ReadWholeFile(path), WithLength(8, "{}      "));
  std::vector<SafetensorsTensor> read(2);
  ASSERT_TRUE(ReadSafetensors(path, &read).ok());
  EXPECT_TRUE(read.empty());
}

TEST_F(SafetensorsTest, WritesTheReferenceLayout) {
  const std::string path = Path("m.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, {MakeTensor("b", {2}, 1.0f), MakeTensor("a", {1, 1}, 0.0f)},
                               {{"k", "v"}})
                  .ok());
  const std::string json =
      "{\"__metadata__\":{\"k\":\"v\"},"
      "\"a\":{\"dtype\":\"F32\",\"shape\":[1,1],\"data_offsets\":[0,4]},"
      "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}";
  const std::string padded = json + std::string((8 - json.size() % 8) % 8, ' ');
  const float data[3] = {0.0f, 1.0f, 1.25f};
  EXPECT_EQ(ReadWholeFile(path),
            WithLength(padded.size(),
                       padded + std::string(reinterpret_cast<const char*>(data), sizeof(data))));
  EXPECT_EQ(Listing(), std::vector<std::string>{"m.safetensors"});
}

// ---------------------------------------------------------------------------
// The fixture written by Python (see tests/golden/safetensors/README.md)

TEST(SafetensorsGoldenTest, ReadsThePythonWrittenFile) {
  std::vector<SafetensorsTensor> tensors;
  SafetensorsMetadata metadata;
  const Status status = ReadSafetensors(GoldenPath("model.safetensors"), &tensors, &metadata);
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_EQ(metadata, (SafetensorsMetadata{{"format", "pt"}}));
  ASSERT_EQ(tensors.size(), 3u);
  EXPECT_EQ(tensors[0].name, "W_k.weight");
  EXPECT_EQ(tensors[1].name, "W_q.weight");
  EXPECT_EQ(tensors[2].name, "w_v.weight");

  EXPECT_EQ(tensors[0].shape, (std::vector<int64_t>{8, 2}));
  ASSERT_EQ(tensors[0].data.size(), 16u);
  EXPECT_EQ(tensors[0].data.front(), -1.0f);
  EXPECT_EQ(tensors[0].data.back(), 1.0f);

  EXPECT_EQ(tensors[1].shape, (std::vector<int64_t>{8, 20}));
  ASSERT_EQ(tensors[1].data.size(), 160u);
  for (size_t i = 0; i < 160; ++i) {
    ASSERT_EQ(tensors[1].data[i], static_cast<float>(i) * 0.25f - 20.0f) << i;
  }

  EXPECT_EQ(tensors[2].shape, (std::vector<int64_t>{1, 8}));
  const std::vector<float> v = {0.5f, -1.5f, 2.0f, 1e-3f, -0.0f, 3.25f, 100.0f, -7.0f};
  EXPECT_TRUE(SameBits(tensors[2].data, v));
}

TEST_F(SafetensorsTest, RewritingTheFixtureReproducesItByteForByte) {
  // The fixture follows the reference writer's conventions, so WriteSafetensors
  // matching it byte for byte shows it writes what the reference writes.
  std::vector<SafetensorsTensor> tensors;
  SafetensorsMetadata metadata;
  ASSERT_TRUE(ReadSafetensors(GoldenPath("model.safetensors"), &tensors, &metadata).ok());
  ASSERT_TRUE(WriteSafetensors(Path("copy.safetensors"), tensors, metadata).ok());
  EXPECT_EQ(ReadWholeFile(Path("copy.safetensors")),
            ReadWholeFile(GoldenPath("model.safetensors")));
}

// ---------------------------------------------------------------------------
// Header variants a correct writer may produce

TEST_F(SafetensorsTest, AcceptsAnyWhitespaceKeyOrderAndEscapes) {
  // Pretty-printed JSON, keys out of order, header order unlike offset order,
  // escaped names, and empty tensors sharing an offset with their neighbours.
  const std::string header =
      "{\n\t\"b\\u00e9\\ud83d\\ude00\\/x\" : {\r\n \"data_offsets\" : [ 4 , 8 ] ,"
      " \"shape\" : [ 1 ] , \"dtype\" : \"F32\" } ,\n"
      "  \"__metadata__\" : { \"k\\\"\\\\\\n\" : \"\\u0041\\t\" } ,\n"
      "  \"a\" : { \"dtype\" : \"F32\" , \"shape\" : [ ] , \"data_offsets\" : [ 0 , 4 ] },\n"
      "  \"z0\" : { \"dtype\" : \"F32\" , \"shape\" : [ 0, 7 ] , \"data_offsets\" : [ 4 , 4 ] },"
      "  \"z1\" : { \"dtype\" : \"F32\" , \"shape\" : [ 3, 0 ] , \"data_offsets\" : [ 8 , 8 ] }\n"
      "}      ";
  const float data[2] = {1.5f, -2.5f};
  const std::string path =
      WriteRaw("a.safetensors", Image(header, std::string(reinterpret_cast<const char*>(data), 8)));
  std::vector<SafetensorsTensor> tensors;
  SafetensorsMetadata metadata;
  const Status status = ReadSafetensors(path, &tensors, &metadata);
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_EQ(metadata, (SafetensorsMetadata{{"k\"\\\n", "A\t"}}));
  ASSERT_EQ(tensors.size(), 4u);
  EXPECT_EQ(tensors[0].name, "a");
  EXPECT_TRUE(tensors[0].shape.empty());
  EXPECT_EQ(tensors[0].data, std::vector<float>{1.5f});
  EXPECT_EQ(tensors[1].name, "b\xc3\xa9\xf0\x9f\x98\x80/x");
  EXPECT_EQ(tensors[1].data, std::vector<float>{-2.5f});
  EXPECT_EQ(tensors[2].shape, (std::vector<int64_t>{0, 7}));
  EXPECT_TRUE(tensors[2].data.empty());
  EXPECT_EQ(tensors[3].shape, (std::vector<int64_t>{3, 0}));
}

TEST_F(SafetensorsTest, AcceptsUnpaddedHeaderAndEmptyObject) {
  std::vector<SafetensorsTensor> tensors(1);
  ASSERT_TRUE(ReadSafetensors(WriteRaw("a.safetensors", Image("{}")), &tensors).ok());
  EXPECT_TRUE(tensors.empty());
  const std::string header = "{" + F32Entry("x", "[2]", "[0,8]") + "}";
  const Status status =
      ReadSafetensors(WriteRaw("b.safetensors", Image(header, std::string(8, '\0'))), &tensors);
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_EQ(tensors.at(0).data, (std::vector<float>{0.0f, 0.0f}));
}

// ---------------------------------------------------------------------------
// Malformed files: each is InvalidArgument naming the file and the problem.

struct MalformedCase {
  std::string name;
  std::string bytes;
  std::string fragment;  // the message must contain this
};

void PrintTo(const MalformedCase& c, std::ostream* os) { *os << c.name; }

// A header of one tensor entry "a" whose fields are given as JSON source, and
// `data_len` zero bytes of data.
std::string OneTensor(const std::string& fields, size_t data_len = 8) {
  return Image("{\"a\":{" + fields + "}}", std::string(data_len, '\0'));
}

std::string OneF32(const std::string& shape, const std::string& offsets, size_t data_len = 8) {
  return Image("{" + F32Entry("a", shape, offsets) + "}", std::string(data_len, '\0'));
}

std::vector<MalformedCase> MalformedCases() {
  const std::string good_a = F32Entry("a", "[2]", "[0,8]");
  const std::string bomb_open(10000, '[');
  const std::string bomb_close(10000, ']');
  return {
      {"EmptyFile", "", "0 bytes, shorter than the 8-byte header length"},
      {"ShorterThanLength", "\x02\x00\x00"s, "3 bytes, shorter than the 8-byte"},
      {"LengthPastEnd", WithLength(100, "{}"), "header length 100 but only 2 bytes follow"},
      {"LengthHuge", WithLength(uint64_t{1} << 63, "{}"),
       "header length 9223372036854775808 exceeds the limit"},
      {"EmptyHeader", WithLength(0, ""), "header is empty"},
      {"NotJson", Image("hello, world"), "header is not JSON"},
      {"JsonArray", Image("[1, 2]"), "header is an array, not a JSON object"},
      {"JsonString", Image("\"{}\""), "header is a string, not a JSON object"},
      {"LeadingWhitespace", Image(" {}"), "starts with whitespace"},
      {"TruncatedJson", Image("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],"),
       "truncated JSON: the header ends where a quoted key"},
      {"TruncatedInString", Image("{\"a\":{\"dty"), "unterminated string"},
      {"TruncatedInArray", Image("{\"a\":{\"dtype\":\"F32\",\"shape\":[2,"),
       "truncated JSON: the header ends where a non-negative integer"},
      {"TrailingGarbage", Image("{" + good_a + "}  x", std::string(8, '\0')),
       "unexpected bytes after the JSON object"},
      {"TrailingNul", Image("{}\0\0\0\0\0\0"s), "unexpected bytes after the JSON object"},
      {"TrailingNewline", Image("{}\n"), "only space padding may follow"},
      {"TrailingComma", Image("{" + good_a + ",}", std::string(8, '\0')),
       "expected a quoted key in the header but found '}'"},
      {"UnquotedKey", Image("{a:1}"), "expected a quoted key"},
      {"SingleQuotes", Image("{'a':1}"), "expected a quoted key"},
      {"MissingColon", Image("{\"a\" 1}"), "expected ':' after key 'a'"},
      {"MissingComma", Image("{\"a\":{\"dtype\":\"F32\" \"shape\":[]}}"),
       "expected ',' or '}' in tensor 'a'"},
      {"MissingDtype", OneTensor("\"shape\":[2],\"data_offsets\":[0,8]"),
       "tensor 'a' has no 'dtype'"},
      {"MissingShape", OneTensor("\"dtype\":\"F32\",\"data_offsets\":[0,8]"),
       "tensor 'a' has no 'shape'"},
      {"MissingOffsets", OneTensor("\"dtype\":\"F32\",\"shape\":[2]"),
       "tensor 'a' has no 'data_offsets'"},
      {"UnknownKey", OneTensor("\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":1"),
       "tensor 'a' has unknown key 'x'"},
      {"DuplicateKey", OneTensor("\"dtype\":\"F32\",\"dtype\":\"F32\""),
       "tensor 'a' has a duplicate key 'dtype'"},
      {"TensorNotObject", Image("{\"a\":[0,8]}"), "tensor 'a' is an array, not an object"},
      {"DtypeNumber", OneTensor("\"dtype\":32,\"shape\":[2],\"data_offsets\":[0,8]"),
       "'dtype' of tensor 'a' is a number, not a string"},
      {"DtypeNull", OneTensor("\"dtype\":null"), "'dtype' of tensor 'a' is null, not a string"},
      {"DtypeUnknown", Image("{" + Entry("a", "\"F33\"", "[2]", "[0,8]") + "}", std::string(8, 0)),
       "tensor 'a' has unknown dtype 'F33'"},
      {"DtypeF16", Image("{" + Entry("a", "\"F16\"", "[4]", "[0,8]") + "}", std::string(8, 0)),
       "tensor 'a' has dtype F16; only F32 tensors can be loaded"},
      {"ShapeNotArray", OneTensor("\"dtype\":\"F32\",\"shape\":2"),
       "'shape' of tensor 'a' is a number, not an array"},
      {"ShapeNegative", OneF32("[-2]", "[0,8]"), "'shape' of tensor 'a' entry is negative (-2)"},
      {"ShapeFloat", OneF32("[2.0]", "[0,8]"),
       "'shape' of tensor 'a' entry is not an integer (2.0)"},
      {"ShapeExponent", OneF32("[2e0]", "[0,8]"), "entry is not an integer (2e0)"},
      {"ShapeString", OneF32("[\"2\"]", "[0,8]"),
       "'shape' of tensor 'a' entry is a string, not a non-negative integer"},
      {"ShapeBoolean", OneF32("[true]", "[0,8]"), "entry is a boolean, not a non-negative integer"},
      {"ShapeLeadingZero", OneF32("[02]", "[0,8]"), "has a leading zero (02)"},
      {"ShapeAbove2To53", OneF32("[9007199254740993]", "[0,8]"),
       "is 9007199254740993, above the limit of 2^53"},
      {"ShapeHugeNumber", OneF32("[123456789012345678901234567890]", "[0,8]"),
       "above the limit of 2^53"},
      {"ShapeCountOverflows", OneF32("[4294967296,4294967296,4294967296]", "[0,8]"),
       "tensor 'a' has shape (4294967296, 4294967296, 4294967296) whose element count"},
      {"ShapeBytesOverflow", OneF32("[1073741824,1073741824]", "[0,8]"),
       "element count or byte size overflows int64"},
      {"ShapeRank9", OneF32("[1,1,1,1,1,1,1,1,1]", "[0,4]", 4), "has more than 8 dimensions"},
      {"ShapeDepthBomb", OneF32(bomb_open + bomb_close, "[0,8]"),
       "'shape' of tensor 'a' entry is an array, not a non-negative integer"},
      {"TensorDepthBomb", Image("{\"a\":" + bomb_open + bomb_close + "}"),
       "tensor 'a' is an array, not an object"},
      {"OffsetsOne", OneF32("[2]", "[8]"), "must be two integers [begin, end]"},
      {"OffsetsThree", OneF32("[2]", "[0,8,8]"), "must be two integers [begin, end]"},
      {"OffsetsNotArray", OneF32("[2]", "8"),
       "'data_offsets' of tensor 'a' is a number, not an array"},
      {"OffsetsNegative", OneF32("[2]", "[-8,0]"),
       "'data_offsets' of tensor 'a' entry is negative"},
      {"BeginAfterEnd", OneF32("[0]", "[8,0]"), "data_offsets [8, 0] that end before they begin"},
      {"EndPastBuffer", OneF32("[2]", "[0,8]", 7),
       "data_offsets [0, 8] beyond the end of the 7-byte data buffer"},
      {"ByteCountMismatch", OneF32("[3]", "[0,8]"),
       "has 8 bytes of data (data_offsets [0, 8]) but shape (3,) of F32 needs 12"},
      {"SubByteDtypeSplitsAByte", Image("{" + Entry("a", "\"F4\"", "[3]", "[0,2]") + "}", "\0\0"s),
       "does not fill a whole number of bytes"},
      {"Overlap",
       Image("{" + F32Entry("a", "[2]", "[0,8]") + "," + F32Entry("b", "[2]", "[4,12]") + "}",
             std::string(12, '\0')),
       "tensors 'a' [0, 8] and 'b' [4, 12] overlap"},
      {"EmptyTensorInsideAnother",
       Image("{" + F32Entry("a", "[2]", "[0,8]") + "," + F32Entry("e", "[0]", "[4,4]") + "}",
             std::string(8, '\0')),
       "overlap"},
      {"Hole",
       Image("{" + F32Entry("a", "[1]", "[0,4]") + "," + F32Entry("b", "[1]", "[8,12]") + "}",
             std::string(12, '\0')),
       "bytes [4, 8] of the data buffer belong to no tensor (a hole before 'b')"},
      {"HoleAtStart", OneF32("[1]", "[4,8]"),
       "bytes [0, 4] of the data buffer belong to no tensor"},
      {"BytesLeftOver", OneF32("[1]", "[0,4]"), "4 bytes left over at the end of the data buffer"},
      {"DataWithoutTensors", Image("{}", "abcd"), "4 bytes left over"},
      {"DuplicateName", Image("{" + good_a + "," + good_a + "}", std::string(8, '\0')),
       "duplicate tensor name 'a'"},
      {"EmptyName", Image("{" + F32Entry("", "[2]", "[0,8]") + "}", std::string(8, '\0')),
       "empty tensor name"},
      {"MetadataNumber", Image("{\"__metadata__\":{\"k\":1}}"),
       "__metadata__ value for key 'k' is a number, not a string"},
      {"MetadataObject", Image("{\"__metadata__\":{\"k\":{}}}"),
       "__metadata__ value for key 'k' is an object, not a string"},
      {"MetadataDepthBomb", Image("{\"__metadata__\":{\"k\":" + bomb_open + bomb_close + "}}"),
       "__metadata__ value for key 'k' is an array, not a string"},
      {"MetadataNotObject", Image("{\"__metadata__\":\"pt\"}"),
       "__metadata__ is a string, not an object"},
      {"MetadataTwice", Image("{\"__metadata__\":{},\"__metadata__\":{}}"),
       "duplicate __metadata__ entry"},
      {"MetadataDuplicateKey", Image("{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}"),
       "__metadata__ has a duplicate key"},
      {"InvalidUtf8", Image("{\"a\xff\":{}}"), "invalid UTF-8 in a string"},
      {"OverlongUtf8", Image("{\"a\xc0\xaf\":{}}"), "invalid UTF-8 in a string"},
      {"Utf8Surrogate", Image("{\"a\xed\xa0\x80\":{}}"), "invalid UTF-8 in a string"},
      {"TruncatedUtf8", Image("{\"__metadata__\":{\"k\":\"\xe2\x82"), "invalid UTF-8 in a string"},
      {"ControlCharacter", Image("{\"a\x01\":{}}"), "control character 0x01 in a string"},
      {"RawNewlineInString", Image("{\"__metadata__\":{\"k\":\"a\nb\"}}"),
       "control character 0x0a in a string"},
      {"LoneSurrogateEscape", Image("{\"__metadata__\":{\"k\":\"\\ud800\"}}"),
       "unpaired UTF-16 surrogate"},
      {"LowSurrogateFirst", Image("{\"__metadata__\":{\"k\":\"\\udc00\\ud800\"}}"),
       "unpaired UTF-16 surrogate"},
      {"BadEscape", Image("{\"__metadata__\":{\"k\":\"\\x41\"}}"), "invalid escape '\\x'"},
      {"ShortUnicodeEscape", Image("{\"__metadata__\":{\"k\":\"\\u12\"}}"),
       "expected 4 hex digits after '\\u'"},
      {"GiBShapeInTinyFile", OneF32("[268435456]", "[0,1073741824]", 8),
       "data_offsets [0, 1073741824] beyond the end of the 8-byte data buffer"},
      {"GiBShapeWithSmallRange", OneF32("[268435456]", "[0,8]", 8),
       "has 8 bytes of data (data_offsets [0, 8]) but shape (268435456,) of F32 needs 1073741824"},
      {"PetabyteShape", OneF32("[1125899906842624]", "[0,4503599627370496]", 8),
       "beyond the end of the 8-byte data buffer"},
  };
}

class SafetensorsMalformedTest : public SafetensorsTest,
                                 public ::testing::WithParamInterface<MalformedCase> {};

TEST_P(SafetensorsMalformedTest, IsInvalidArgument) {
  const MalformedCase& c = GetParam();
  const std::string path = WriteRaw("bad.safetensors", c.bytes);
  EXPECT_TRUE(ReadFails(path, StatusCode::kInvalidArgument, c.fragment));
}

INSTANTIATE_TEST_SUITE_P(Cases, SafetensorsMalformedTest, ::testing::ValuesIn(MalformedCases()),
                         [](const auto& info) { return info.param.name; });

// Duplicate keys at every level (a JSON DOM would keep one of them silently),
// numbers at the edges of what the JSON lexer takes, and other syntax the
// format refuses.
std::vector<MalformedCase> MoreMalformedCases() {
  const std::string good_a = F32Entry("a", "[2]", "[0,8]");
  return {
      {"DuplicateNameDifferentEntry",
       Image("{" + good_a + "," + F32Entry("a", "[1]", "[0,4]") + "}", std::string(8, '\0')),
       "duplicate tensor name 'a'"},
      {"DuplicateShapeKey",
       OneTensor("\"dtype\":\"F32\",\"shape\":[2],\"shape\":[1],\"data_offsets\":[0,8]"),
       "tensor 'a' has a duplicate key 'shape'"},
      {"DuplicateOffsetsKey",
       OneTensor("\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"data_offsets\":[0,4]"),
       "tensor 'a' has a duplicate key 'data_offsets'"},
      {"MetadataDuplicateKeyDifferentValue",
       Image("{\"__metadata__\":{\"k\":\"1\",\"j\":\"2\",\"k\":\"1\"}}"),
       "__metadata__ has a duplicate key"},
      {"MetadataTwiceWithEntries",
       Image("{\"__metadata__\":{\"k\":\"1\"}," + good_a + ",\"__metadata__\":{\"j\":\"2\"}}",
             std::string(8, '\0')),
       "duplicate __metadata__ entry"},
      {"ShapeNegativeZero", OneF32("[-0]", "[0,0]", 0), "entry is negative (-0)"},
      {"OffsetsLeadingZero", OneF32("[2]", "[00,8]"), "has a leading zero (00)"},
      {"ShapeOverflowsDouble", OneF32("[1e999]", "[0,8]"), "entry is not an integer (1e999)"},
      {"ShapeTooManyDigitsForADouble", OneF32("[" + std::string(400, '1') + "]", "[0,8]"),
       "entry is 111111111111111111111111..., above the limit of 2^53"},
      {"ShapeAboveUint64", OneF32("[18446744073709551616]", "[0,8]"), "above the limit of 2^53"},
      {"ShapeFraction", OneF32("[2.]", "[0,8]"), "entry is not an integer (2.)"},
      {"ShapeNotJson", OneF32("[+2]", "[0,8]"),
       "'shape' of tensor 'a' entry: expected a non-negative integer but found '+' (not JSON)"},
      {"ShapeLeadingComma", OneF32("[,2]", "[0,8]"),
       "expected a non-negative integer but found ','"},
      {"ShapeMissingComma", OneF32("[1 2]", "[0,8]"),
       "expected ',' or ']' in 'shape' of tensor 'a' but found '2'"},
      {"MetadataNestedObject", Image("{\"__metadata__\":{\"k\":{\"j\":\"v\"}}}"),
       "__metadata__ value for key 'k' is an object, not a string"},
      {"KeyNumber", Image("{1:2}"), "expected a quoted key in the header but found '1'"},
      {"ColonTwice", Image("{\"a\"::{}}"), "tensor 'a': expected an object but found ':'"},
      {"UnterminatedDepthBomb", Image("{\"a\":{\"shape\":" + std::string(1'000'000, '[')),
       "'shape' of tensor 'a' entry is an array, not a non-negative integer"},
      {"TruncatedAfterColon", Image("{\"a\":"),
       "truncated JSON: the header ends where an object was expected"},
      {"TruncatedEscape", Image("{\"a\\"), "the header ends where an escape character"},
      {"ByteOrderMark", Image("\xef\xbb\xbf{}"), "header is not JSON: it starts with '\\xef'"},
      {"Comment", Image("{/**/}"), "expected a quoted key in the header but found '/'"},
      {"TrailingComment", Image("{} //"), "unexpected bytes after the JSON object ('//'"},
      {"TrailingTab", Image("{}\t"), "only space padding may follow"},
      {"SecondObject", Image("{}{}"), "unexpected bytes after the JSON object"},
      {"Infinity", OneF32("[Infinity]", "[0,8]"), "expected a non-negative integer but found 'I'"},
      {"ControlCharacterInDtype", OneTensor("\"dtype\":\"F\x1f\""),
       "control character 0x1f in a string"},
      // nlohmann's message quotes the refused string: words in it are not the lexer's.
      {"LexerWordsInAString",
       Image("{\"__metadata__\":{\"k\":\"surrogate U+ ill-formed UTF-8 forbidden character "
             "after backslash missing closing quote \x01\"}}"),
       "control character 0x01 in a string"},
  };
}

INSTANTIATE_TEST_SUITE_P(MoreCases, SafetensorsMalformedTest,
                         ::testing::ValuesIn(MoreMalformedCases()),
                         [](const auto& info) { return info.param.name; });

TEST_F(SafetensorsTest, EveryRefusalIsOnePrintableLine) {
  std::vector<MalformedCase> cases = MalformedCases();
  for (MalformedCase& c : MoreMalformedCases()) cases.push_back(std::move(c));
  // Raw bytes the file's text must not carry into a message.
  cases.push_back({"RawBytes", Image("{\"a\":{}\x1b[31m\xff\n}"), ""});
  cases.push_back({"EscapedName", Image("{\"\\u001b[31m\\n\\u00ff\":[]}"), ""});
  cases.push_back({"RawBytesAfter", Image("{}      \x1b\x7f\xc3\xa9\n\r"), ""});
  for (const MalformedCase& c : cases) {
    SCOPED_TRACE(c.name);
    std::vector<SafetensorsTensor> tensors;
    const Status status = ReadSafetensors(WriteRaw("bad.safetensors", c.bytes), &tensors);
    ASSERT_FALSE(status.ok());
    for (const char ch : status.message()) {
      const auto byte = static_cast<unsigned char>(ch);
      ASSERT_TRUE(byte >= 0x20 && byte < 0x7f) << status.message();
    }
  }
}

TEST_F(SafetensorsTest, WriteEscapesControlCharactersAsTheReferenceDoes) {
  // serde_json, which the reference writer uses, writes the short escapes
  // where JSON has them and \u00XX (lower case) for the other controls.
  const std::string path = Path("m.safetensors");
  const SafetensorsMetadata metadata = {{"k", "a\nb\tc\x01\x1f\"\\/\x7f"}};
  ASSERT_TRUE(WriteSafetensors(path, {}, metadata).ok());
  EXPECT_NE(ReadWholeFile(path).find("\"k\":\"a\\nb\\tc\\u0001\\u001f\\\"\\\\/\x7f\""),
            std::string::npos)
      << ReadWholeFile(path);
  SafetensorsMetadata read;
  std::vector<SafetensorsTensor> tensors;
  ASSERT_TRUE(ReadSafetensors(path, &tensors, &read).ok());
  EXPECT_EQ(read, metadata);
}

TEST_F(SafetensorsTest, MissingFileIsIoError) {
  EXPECT_TRUE(ReadFails(Path("absent.safetensors"), StatusCode::kIoError, "cannot open"));
}

TEST_F(SafetensorsTest, DirectoryIsIoError) {
  EXPECT_TRUE(ReadFails(dir_.string(), StatusCode::kIoError, "not a regular file"));
}

TEST_F(SafetensorsTest, NonF32ErrorNamesTheTensorAmongF32Ones) {
  const std::string header = "{" + F32Entry("a", "[1]", "[0,4]") + "," +
                             Entry("b.bias", "\"BF16\"", "[2]", "[4,8]") + "," +
                             F32Entry("c", "[1]", "[8,12]") + "}";
  EXPECT_TRUE(ReadFails(WriteRaw("m.safetensors", Image(header, std::string(12, '\0'))),
                        StatusCode::kInvalidArgument,
                        "tensor 'b.bias' has dtype BF16; only F32 tensors can be loaded"));
}

TEST_F(SafetensorsTest, MessagesEscapeHostileNames) {
  // A name full of terminal escapes shows as \x.. and is cut short.
  const std::string name = "\\u001b[31m" + std::string(200, 'n');
  const std::string path = WriteRaw(
      "m.safetensors", Image("{" + F32Entry(name, "[2]", "[0,4]") + "}", std::string(4, '\0')));
  EXPECT_TRUE(ReadFails(path, StatusCode::kInvalidArgument, "tensor '\\x1b[31mnnn"));
  std::vector<SafetensorsTensor> tensors;
  const Status status = ReadSafetensors(path, &tensors);
  EXPECT_EQ(status.message().find('\x1b'), std::string::npos);
  EXPECT_LT(status.message().size(), path.size() + 200);
}

// Peak resident memory in KiB.
long PeakRssKiB() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;
}

TEST_F(SafetensorsTest, ClaimedSizesDoNotDriveAllocations) {
  // Each file claims 1 GiB or more in a few bytes; an allocation made before
  // the claim is checked would raise the peak RSS (or, for 4 PiB, fail).
  const long before = PeakRssKiB();
  const std::vector<std::string> files = {
      OneF32("[268435456]", "[0,1073741824]"),
      OneF32("[268435456]", "[0,8]"),
      OneF32("[1125899906842624]", "[0,4503599627370496]"),
      OneF32("[16384,16384]", "[0,1073741824]", 1 << 20),
  };
  for (size_t i = 0; i < files.size(); ++i) {
    EXPECT_TRUE(ReadFails(WriteRaw("big.safetensors", files[i]), StatusCode::kInvalidArgument, ""))
        << i;
  }
  EXPECT_LT(PeakRssKiB() - before, 256 * 1024);
}

// ---------------------------------------------------------------------------
// FindTensor

TEST(SafetensorsFindTest, FindsByNameAndShape) {
  const std::vector<SafetensorsTensor> tensors = {MakeTensor("W_k.weight", {8, 2}, 0.0f),
                                                  MakeTensor("W_q.weight", {8, 20}, 0.0f)};
  const SafetensorsTensor* found = nullptr;
  ASSERT_TRUE(FindTensor("m.safetensors", tensors, "W_q.weight", {8, 20}, &found).ok());
  EXPECT_EQ(found, &tensors[1]);
  found = nullptr;
  ASSERT_TRUE(FindTensor("m.safetensors", tensors, "W_k.weight", {-1, 2}, &found).ok());
  EXPECT_EQ(found, &tensors[0]);
  ASSERT_TRUE(FindTensor("m.safetensors", tensors, "W_k.weight", {-1, -1}, &found).ok());
}

TEST(SafetensorsFindTest, WrongShapeNamesBothShapes) {
  const std::vector<SafetensorsTensor> tensors = {MakeTensor("W_q.weight", {8, 20}, 0.0f)};
  const SafetensorsTensor* found = nullptr;
  Status status = FindTensor("m.safetensors", tensors, "W_q.weight", {8, 2}, &found);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "m.safetensors: W_q.weight has shape (8, 20) but the model needs (8, 2)");
  EXPECT_EQ(found, nullptr);

  status = FindTensor("m.safetensors", tensors, "W_q.weight", {-1}, &found);
  EXPECT_EQ(status.message(),
            "m.safetensors: W_q.weight has shape (8, 20) but the model needs (any,)");
  status = FindTensor("m.safetensors", tensors, "W_q.weight", {8, 20, 1}, &found);
  EXPECT_NE(status.message().find("needs (8, 20, 1)"), std::string::npos) << status.message();
  EXPECT_EQ(found, nullptr);
}

TEST(SafetensorsFindTest, MissingNameListsWhatTheFileHas) {
  const std::vector<SafetensorsTensor> tensors = {MakeTensor("W_k.weight", {8, 2}, 0.0f),
                                                  MakeTensor("W_q.weight", {8, 20}, 0.0f)};
  const SafetensorsTensor* found = nullptr;
  const Status status = FindTensor("m.safetensors", tensors, "W_v.weight", {1, 8}, &found);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "m.safetensors: no tensor named 'W_v.weight' (the file has 2 tensors: W_k.weight, "
            "W_q.weight)");
  EXPECT_EQ(found, nullptr);
}

TEST(SafetensorsFindTest, RejectsBadArguments) {
  const std::vector<SafetensorsTensor> tensors = {MakeTensor("a", {2}, 0.0f)};
  const SafetensorsTensor* found = nullptr;
  EXPECT_EQ(FindTensor("m", tensors, "a", {-2}, &found).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(FindTensor("m", tensors, "a", {2}, nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(found, nullptr);
}

// ---------------------------------------------------------------------------
// Writing

TEST_F(SafetensorsTest, WriteRejectsBadTensorsAndWritesNothing) {
  const std::string path = Path("m.safetensors");
  SafetensorsTensor f16 = MakeTensor("h", {2}, 0.0f);
  f16.dtype = "F16";
  SafetensorsTensor short_data = MakeTensor("s", {2, 2}, 0.0f);
  short_data.data.pop_back();
  struct Case {
    std::vector<SafetensorsTensor> tensors;
    SafetensorsMetadata metadata;
    const char* fragment;
  };
  const Case cases[] = {
      {{MakeTensor("", {1}, 0.0f)}, {}, "empty name"},
      {{MakeTensor("__metadata__", {1}, 0.0f)}, {}, "cannot be named __metadata__"},
      {{MakeTensor("a", {1}, 0.0f), MakeTensor("a", {2}, 0.0f)}, {}, "duplicate tensor name 'a'"},
      {{f16}, {}, "tensor 'h' has dtype 'F16'; only F32"},
      {{short_data}, {}, "tensor 's' has 3 values but shape (2, 2) holds 4"},
      {{MakeTensor("r", {1, 1, 1, 1, 1, 1, 1, 1, 1}, 0.0f)}, {}, "rank 9"},
      {{MakeTensor("bad\xff", {1}, 0.0f)}, {}, "tensor name 'bad\\xff' is not valid UTF-8"},
      {{}, {{"k", "\xc0\x80"}}, "metadata value '\\xc0\\x80' is not valid UTF-8"},
  };
  for (const Case& c : cases) {
    const Status status = WriteSafetensors(path, c.tensors, c.metadata);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.message();
    EXPECT_EQ(status.message().rfind(path + ": ", 0), 0u) << status.message();
    EXPECT_NE(status.message().find(c.fragment), std::string::npos) << status.message();
  }
  SafetensorsTensor negative = MakeTensor("n", {1}, 0.0f);
  negative.shape = {2, -2};
  EXPECT_NE(WriteSafetensors(path, {negative}).message().find("negative dimension"),
            std::string::npos);
  SafetensorsTensor huge = MakeTensor("g", {1}, 0.0f);
  huge.shape = {int64_t{1} << 62, 4};
  EXPECT_NE(WriteSafetensors(path, {huge}).message().find("too large"), std::string::npos);
  EXPECT_EQ(WriteSafetensors("", {}).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Listing().empty());
}

TEST_F(SafetensorsTest, WriteReplacesAtomicallyAndLeavesNoTemp) {
  const std::string path = Path("m.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, {MakeTensor("a", {3}, 1.0f)}).ok());
  ASSERT_TRUE(WriteSafetensors(path, {MakeTensor("b", {1}, 2.0f)}).ok());
  std::vector<SafetensorsTensor> tensors;
  ASSERT_TRUE(ReadSafetensors(path, &tensors).ok());
  ASSERT_EQ(tensors.size(), 1u);
  EXPECT_EQ(tensors[0].name, "b");
  EXPECT_EQ(Listing(), std::vector<std::string>{"m.safetensors"});
}

TEST_F(SafetensorsTest, WriteDoesNotFollowAPlantedTempSymlink) {
  const std::string victim = WriteRaw("victim", "precious");
  const std::string path = Path("m.safetensors");
  fs::create_symlink(victim, path + ".tmp." + std::to_string(::getpid()));
  ASSERT_TRUE(WriteSafetensors(path, {MakeTensor("a", {1}, 0.0f)}).ok());
  EXPECT_EQ(ReadWholeFile(victim), "precious");
  EXPECT_EQ(Listing(), (std::vector<std::string>{"m.safetensors", "victim"}));
}

TEST_F(SafetensorsTest, WriteIntoMissingDirectoryIsIoError) {
  const std::string path = Path("no/such/dir/m.safetensors");
  const Status status = WriteSafetensors(path, {MakeTensor("a", {1}, 0.0f)});
  EXPECT_EQ(status.code(), StatusCode::kIoError);
  EXPECT_EQ(status.message().rfind(path + ": ", 0), 0u) << status.message();
}

}  // namespace
}  // namespace attnscore::io
