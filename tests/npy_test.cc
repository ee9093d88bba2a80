#include "npy/npy.h"


#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "io_test_util.h"

#ifndef ATTNSCORE_GOLDEN_DIR
#error "compile with -DATTNSCORE_GOLDEN_DIR=\"<absolute path of tests/golden>\""
#endif

namespace attnscore::npy {
namespace {

using io::FailedAs;
using io::TempDirTest;

namespace fs = std::filesystem;

std::string GoldenPath(const std::string& name) {
  return std::string(ATTNSCORE_GOLDEN_DIR) + "/npy/" + name;
}

std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A .npy file image: magic, version `major`.0, header length, then `dict`
// padded with spaces to a 64-byte boundary and ended with '\n', then `data`.
std::string NpyImage(const std::string& dict, const std::string& data = "",
                     int major = 1) {
  const size_t len_bytes = major == 1 ? 2 : 4;
  std::string header = dict;
  header.append((64 - (8 + len_bytes + header.size() + 1) % 64) % 64, ' ');
  header += '\n';
  std::string out("\x93NUMPY", 6);
  out += static_cast<char>(major);
  out += '\0';
  for (size_t i = 0; i < len_bytes; ++i) {
    out += static_cast<char>((header.size() >> (8 * i)) & 0xff);
  }
  return out + header + data;
}

// The dict numpy writes, with each value given as Python source.
std::string Dict(const std::string& descr, const std::string& fortran,
                 const std::string& shape) {
  return "{'descr': " + descr + ", 'fortran_order': " + fortran +
         ", 'shape': " + shape + ", }";
}

std::string F32Dict(const std::string& shape) {
  return Dict("'<f4'", "False", shape);
}

// Checks that ReadNpy fails with `code`, a message that starts with the path
// and mentions `fragment`, and leaves the output untouched.
::testing::AssertionResult ReadFails(const std::string& path, StatusCode code,
                                     const std::string& fragment) {
  NpyArray array;
  array.shape = {42};  // a sentinel a failed read must not change
  const Status status = ReadNpy(path, &array);
  ::testing::AssertionResult result = FailedAs(status, path, code, fragment);
  if (result && array.shape != std::vector<int64_t>{42}) {
    return ::testing::AssertionFailure() << "a failed read changed the output";
  }
  return result;
}

class NpyTest : public TempDirTest {
 protected:
  NpyTest() : TempDirTest("npy_test") {}
};

// ---------------------------------------------------------------------------
// Round trips

template <typename T>
void ExpectRoundTrip(const std::string& path, DType dtype,
                     const std::vector<int64_t>& shape) {
  SCOPED_TRACE(std::string(DTypeName(dtype)) + " rank " +
               std::to_string(shape.size()));
  int64_t count = 1;
  for (int64_t dim : shape) count *= dim;
  std::vector<T> values(static_cast<size_t>(count));
  for (size_t i = 0; i < values.size(); ++i) {
    // Distinct, sign-mixed values that every T holds exactly.
    values[i] = static_cast<T>(static_cast<T>(i) * static_cast<T>(3) - static_cast<T>(7));
  }
  ASSERT_TRUE(WriteNpy(path, dtype, shape, values.data()).ok());

  NpyArray array;
  const Status status = ReadNpy(path, &array);
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_EQ(array.dtype, dtype);
  EXPECT_EQ(array.shape, shape);
  EXPECT_EQ(array.size(), count);
  ASSERT_EQ(array.bytes.size(), values.size() * sizeof(T));
  EXPECT_TRUE(std::equal(values.begin(), values.end(), array.data<T>()));
  // Like numpy, the data starts on a 64-byte boundary.
  EXPECT_EQ((fs::file_size(path) - array.bytes.size()) % 64, 0u);
}

template <typename T>
void ExpectRoundTripAllRanks(const std::string& path, DType dtype) {
  const std::vector<std::vector<int64_t>> shapes = {
      {}, {5}, {2, 3}, {2, 1, 3}, {1, 2, 2, 3}, {0, 3}};
  for (const auto& shape : shapes) ExpectRoundTrip<T>(path, dtype, shape);
}

TEST_F(NpyTest, RoundTripFloat32) {
  ExpectRoundTripAllRanks<float>(Path("a.npy"), DType::kFloat32);
}
TEST_F(NpyTest, RoundTripFloat64) {
  ExpectRoundTripAllRanks<double>(Path("a.npy"), DType::kFloat64);
}
TEST_F(NpyTest, RoundTripInt32) {
  ExpectRoundTripAllRanks<int32_t>(Path("a.npy"), DType::kInt32);
}
TEST_F(NpyTest, RoundTripInt64) {
  ExpectRoundTripAllRanks<int64_t>(Path("a.npy"), DType::kInt64);
}

TEST_F(NpyTest, RoundTripMaxRank) {
  ExpectRoundTrip<int32_t>(Path("a.npy"), DType::kInt32,
                           {1, 2, 1, 2, 1, 2, 1, 2});
}

TEST_F(NpyTest, WritesTheHeaderNumpyWrites) {
  const float data[6] = {};
  ASSERT_TRUE(WriteNpy(Path("a.npy"), DType::kFloat32, {2, 3}, data).ok());
  const std::string file = ReadWholeFile(Path("a.npy"));
  const std::string dict =
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  // 10 prelude bytes + 60 of dict + '\n' round up to a 128-byte header.
  ASSERT_EQ(file.size(), 128u + sizeof(data));
  EXPECT_EQ(file.substr(0, 10), std::string("\x93NUMPY\x01\x00\x76\x00", 10));
  EXPECT_EQ(file.substr(10, dict.size()), dict);
  EXPECT_EQ(file.substr(10 + dict.size(), 128 - 11 - dict.size()),
            std::string(128 - 11 - dict.size(), ' '));
  EXPECT_EQ(file[127], '\n');
}

TEST(NpyDTypeTest, NamesAndSizes) {
  EXPECT_STREQ(DTypeName(DType::kFloat32), "float32");
  EXPECT_STREQ(DTypeName(DType::kFloat64), "float64");
  EXPECT_STREQ(DTypeName(DType::kInt32), "int32");
  EXPECT_STREQ(DTypeName(DType::kInt64), "int64");
  EXPECT_STREQ(DTypeName(static_cast<DType>(99)), "unknown");
  EXPECT_EQ(DTypeSize(DType::kFloat32), 4u);
  EXPECT_EQ(DTypeSize(DType::kInt64), 8u);
  EXPECT_EQ(DTypeSize(static_cast<DType>(99)), 0u);
}

// ---------------------------------------------------------------------------
// Files written by numpy (see tests/golden/npy/README.md)

NpyArray ReadGolden(const std::string& name) {
  NpyArray array;
  const Status status = ReadNpy(GoldenPath(name), &array);
  EXPECT_TRUE(status.ok()) << status.message();
  return array;
}

TEST(NpyGoldenTest, Float32Matrix) {
  const NpyArray array = ReadGolden("f32_2x3.npy");
  EXPECT_EQ(array.dtype, DType::kFloat32);
  EXPECT_EQ(array.shape, (std::vector<int64_t>{2, 3}));
  ASSERT_EQ(array.size(), 6);
  const std::vector<float> want = {-1.0f, -0.5f, 0.0f, 0.5f, 1.0f, 1.5f};
  EXPECT_TRUE(std::equal(want.begin(), want.end(), array.data<float>()));
}

TEST(NpyGoldenTest, Int64Vector) {
  const NpyArray array = ReadGolden("i64_3.npy");
  EXPECT_EQ(array.dtype, DType::kInt64);
  EXPECT_EQ(array.shape, (std::vector<int64_t>{3}));
  ASSERT_EQ(array.size(), 3);
  const std::vector<int64_t> want = {-1, 0, int64_t{1} << 40};
  EXPECT_TRUE(std::equal(want.begin(), want.end(), array.data<int64_t>()));
}

TEST(NpyGoldenTest, Version2Header) {
  const NpyArray array = ReadGolden("f64_2x2_v2.npy");
  EXPECT_EQ(array.dtype, DType::kFloat64);
  EXPECT_EQ(array.shape, (std::vector<int64_t>{2, 2}));
  ASSERT_EQ(array.size(), 4);
  const std::vector<double> want = {1.5, -2.25, 3.0, 1e300};
  EXPECT_TRUE(std::equal(want.begin(), want.end(), array.data<double>()));
}

TEST(NpyGoldenTest, Version3ScalarHeader) {
  const NpyArray array = ReadGolden("i32_scalar_v3.npy");
  EXPECT_EQ(array.dtype, DType::kInt32);
  EXPECT_TRUE(array.shape.empty());
  ASSERT_EQ(array.size(), 1);
  EXPECT_EQ(array.data<int32_t>()[0], -7);
}

TEST_F(NpyTest, RewrittenGoldenReadsBackTheSame) {
  const NpyArray golden = ReadGolden("f32_2x3.npy");
  ASSERT_TRUE(WriteNpy(Path("copy.npy"), golden.dtype, golden.shape,
                       golden.bytes.data()).ok());
  NpyArray copy;
  ASSERT_TRUE(ReadNpy(Path("copy.npy"), &copy).ok());
  EXPECT_EQ(copy.dtype, golden.dtype);
  EXPECT_EQ(copy.shape, golden.shape);
  EXPECT_EQ(copy.bytes, golden.bytes);
}

// ---------------------------------------------------------------------------
// Header variants a correct writer may produce

TEST_F(NpyTest, AcceptsAnyKeyOrderQuotesAndSpacing) {
  const std::string data(8, '\x01');
  const std::string path = WriteRaw(
      "a.npy",
      NpyImage("{\"shape\": ( 2 , ),  'fortran_order':False,\"descr\":'<i4'}", data));
  NpyArray array;
  const Status status = ReadNpy(path, &array);
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_EQ(array.dtype, DType::kInt32);
  EXPECT_EQ(array.shape, (std::vector<int64_t>{2}));
  EXPECT_EQ(array.data<int32_t>()[1], 0x01010101);
}

TEST_F(NpyTest, AcceptsUnpaddedHeaderAndEmptyArray) {
  // No alignment padding and a zero-size shape with no data at all.
  const std::string dict = Dict("'<f8'", "False", "(0, 4)");
  std::string file("\x93NUMPY\x01\x00", 8);
  file += static_cast<char>(dict.size() + 1);
  file += '\0';
  file += dict + "\n";
  NpyArray array;
  const Status status = ReadNpy(WriteRaw("a.npy", file), &array);
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_EQ(array.shape, (std::vector<int64_t>{0, 4}));
  EXPECT_EQ(array.size(), 0);
  EXPECT_TRUE(array.bytes.empty());
}

TEST_F(NpyTest, AcceptsHandWrittenVersion2And3Headers) {
  for (int major : {2, 3}) {
    const std::string path = WriteRaw(
        "v.npy", NpyImage(Dict("'<i8'", "False", "(1,)"), std::string(8, '\0'), major));
    NpyArray array;
    const Status status = ReadNpy(path, &array);
    ASSERT_TRUE(status.ok()) << "version " << major << ": " << status.message();
    EXPECT_EQ(array.dtype, DType::kInt64);
    EXPECT_EQ(array.data<int64_t>()[0], 0);
  }
}

// ---------------------------------------------------------------------------
// Malformed files: each is InvalidArgument naming the file and the problem.

struct MalformedCase {
  std::string name;
  std::string bytes;
  std::string fragment;  // the message must contain this
};

void PrintTo(const MalformedCase& c, std::ostream* os) { *os << c.name; }

std::string WithLength(std::string image, uint16_t header_len) {
  image[8] = static_cast<char>(header_len & 0xff);
  image[9] = static_cast<char>(header_len >> 8);
  return image;
}

std::vector<MalformedCase> MalformedCases() {
  const std::string ok_dict = F32Dict("(2,)");
  const std::string ok_data(8, '\0');
  std::string bad_magic = NpyImage(ok_dict, ok_data);
  bad_magic[5] = 'Z';
  std::string bad_version = NpyImage(ok_dict, ok_data);
  bad_version[6] = '\x04';
  std::string bad_minor = NpyImage(ok_dict, ok_data);
  bad_minor[7] = '\x01';
  std::string no_newline = NpyImage(ok_dict, ok_data);
  no_newline[no_newline.size() - ok_data.size() - 1] = ' ';
  // A real v2 header longer than the reader's 64 KiB cap.
  const std::string huge_header = NpyImage(ok_dict + std::string(70000, ' '), ok_data, 2);

  return {
      {"EmptyFile", "", "empty file"},
      {"TextFile", "hello, world\n", "not a .npy file (bad magic)"},
      {"BadMagic", bad_magic, "not a .npy file (bad magic)"},
      {"MagicOnly", "\x93NUMPY", "truncated header"},
      {"BadMajorVersion", bad_version, "unsupported .npy format version 4.0"},
      {"BadMinorVersion", bad_minor, "unsupported .npy format version 1.1"},
      {"TruncatedV2Length", std::string("\x93NUMPY\x02\x00\x10\x00", 10),
       "truncated header"},
      {"HeaderLengthPastEof", WithLength(NpyImage("{}"), 1000),
       "truncated header (header length 1000 but only 54 bytes follow)"},
      {"HeaderOverLimit", huge_header, "exceeds the limit"},
      {"HeaderWithoutNewline", no_newline, "does not end with a newline"},
      {"NonDictHeader", NpyImage("[1, 2]"), "not a dict literal"},
      {"EmptyDictHeader", NpyImage("{}"), "header has no 'descr' key"},
      {"MissingDescr", NpyImage("{'fortran_order': False, 'shape': (2,), }", ok_data),
       "header has no 'descr' key"},
      {"MissingFortranOrder", NpyImage("{'descr': '<f4', 'shape': (2,), }", ok_data),
       "header has no 'fortran_order' key"},
      {"MissingShape", NpyImage("{'descr': '<f4', 'fortran_order': False}", ok_data),
       "header has no 'shape' key"},
      {"UnknownDType", NpyImage(Dict("'<c8'", "False", "(2,)"), ok_data),
       "unsupported dtype '<c8' (want little-endian float32, float64, int32 or int64)"},
      {"BigEndian", NpyImage(Dict("'>f4'", "False", "(2,)"), ok_data),
       "unsupported dtype '>f4'"},
      {"NameInsteadOfDescr", NpyImage(Dict("'float32'", "False", "(2,)"), ok_data),
       "unsupported dtype 'float32'"},
      {"ControlBytesInDescr", NpyImage(Dict("'<f\x01'", "False", "(2,)"), ok_data),
       "unsupported dtype '<f\\x01'"},
      {"StructuredDType", NpyImage(Dict("[('a', '<f4')]", "False", "(2,)"), ok_data),
       "structured dtypes are not supported"},
      {"FortranOrder", NpyImage(Dict("'<f4'", "True", "(2,)"), ok_data),
       "fortran_order arrays are not supported"},
      {"FortranOrderNotBool", NpyImage(Dict("'<f4'", "0", "(2,)"), ok_data),
       "'fortran_order' is not True or False"},
      {"NegativeDim", NpyImage(F32Dict("(2, -3)")), "negative dimension -3"},
      {"DimOverflowsInt64", NpyImage(F32Dict("(99999999999999999999,)")),
       "dimension 99999999999999999999 overflows int64"},
      {"ShapeOverflowsInt64", NpyImage(F32Dict("(4294967296, 4294967296, 4)")),
       "shape (4294967296, 4294967296, 4) is too large"},
      {"ShapeOverflowsWithZeroDim", NpyImage(F32Dict("(4294967296, 4294967296, 0)")),
       "is too large"},
      {"ShapeLargerThanFile",
       NpyImage(F32Dict("(1000000, 1000000)"), std::string(64, '\0')),
       "shape (1000000, 1000000) needs 4000000000000 bytes but the file holds 64"},
      {"DataShorterThanShape", NpyImage(F32Dict("(2, 3)"), std::string(20, '\0')),
       "needs 24 bytes but the file holds 20"},
      {"TrailingGarbage", NpyImage(ok_dict, ok_data + "xyz"),
       "3 trailing bytes after the array data"},
      {"UnterminatedString",
       NpyImage("{'descr': '<f4", ok_data),
       "unterminated string"},
      {"EscapeInString", NpyImage(Dict("'<f\\x34'", "False", "(2,)"), ok_data),
       "escape sequences are not supported"},
      {"ShapeIsList", NpyImage(F32Dict("[2]"), ok_data), "'shape' is not a tuple"},
      {"ShapeIsInt", NpyImage(F32Dict("2"), ok_data), "'shape' is not a tuple"},
      {"ShapeIsParenthesizedInt", NpyImage(F32Dict("(2)"), ok_data),
       "a 1-tuple needs a trailing comma"},
      {"ShapeUnterminated", NpyImage("{'descr': '<f4', 'fortran_order': False, 'shape': (2, ", ok_data),
       "unterminated 'shape' tuple"},
      {"PythonTwoLongDim", NpyImage(F32Dict("(2L,)"), ok_data), "non-integer dimension"},
      {"FloatDim", NpyImage(F32Dict("(2.0,)"), ok_data), "non-integer dimension"},
      {"LeadingZeroDim", NpyImage(F32Dict("(02,)"), ok_data), "has a leading zero"},
      {"RankAboveEight", NpyImage(F32Dict("(1, 1, 1, 1, 1, 1, 1, 1, 1)"), std::string(4, '\0')),
       "shape has rank 9"},
      {"DuplicateKey",
       NpyImage("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'shape': (2,)}", ok_data),
       "duplicate key 'shape'"},
      {"UnknownKey", NpyImage("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}", ok_data),
       "unexpected key 'x'"},
      {"MissingColon", NpyImage("{'descr' '<f4', 'fortran_order': False, 'shape': (2,)}", ok_data),
       "expected ':' after key 'descr'"},
      {"MissingComma", NpyImage("{'descr': '<f4' 'fortran_order': False, 'shape': (2,)}", ok_data),
       "expected ',' or '}'"},
      {"UnterminatedDict", NpyImage("{'descr': '<f4', 'fortran_order': False, 'shape': (2,),", ok_data),
       "unterminated dict"},
      {"TextAfterDict", NpyImage(ok_dict + " x", ok_data), "unexpected text after the dict"},
      {"NewlineInsideDict", NpyImage("{'descr': '<f4',\n 'fortran_order': False, 'shape': (2,)}", ok_data),
       "expected a quoted string"},
  };
}

class NpyMalformedTest : public NpyTest,
                         public ::testing::WithParamInterface<MalformedCase> {};

TEST_P(NpyMalformedTest, IsInvalidArgumentNamingTheFile) {
  const std::string path = WriteRaw("bad.npy", GetParam().bytes);
  EXPECT_TRUE(ReadFails(path, StatusCode::kInvalidArgument, GetParam().fragment));
}

INSTANTIATE_TEST_SUITE_P(
    Files, NpyMalformedTest, ::testing::ValuesIn(MalformedCases()),
    [](const ::testing::TestParamInfo<MalformedCase>& p) { return p.param.name; });

// ---------------------------------------------------------------------------
// Files that cannot be read at all: IoError.

TEST_F(NpyTest, MissingFileIsIoError) {
  EXPECT_TRUE(ReadFails(Path("absent.npy"), StatusCode::kIoError, "No such file"));
}

TEST_F(NpyTest, DirectoryIsIoError) {
  fs::create_directory(Path("dir.npy"));
  EXPECT_TRUE(ReadFails(Path("dir.npy"), StatusCode::kIoError, "not a regular file"));
}

TEST_F(NpyTest, FifoIsIoErrorWithoutBlocking) {
  ASSERT_EQ(::mkfifo(Path("fifo.npy").c_str(), 0600), 0);
  EXPECT_TRUE(ReadFails(Path("fifo.npy"), StatusCode::kIoError, "not a regular file"));
}

TEST_F(NpyTest, NullOutputIsInvalidArgument) {
  const Status status = ReadNpy(GoldenPath("i64_3.npy"), nullptr);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
}

// ---------------------------------------------------------------------------
// Writing: atomic, and nothing left behind on failure.

TEST_F(NpyTest, WriteIntoMissingDirectoryIsIoErrorAndLeavesNothing) {
  const std::string path = Path("no/such/dir/a.npy");
  const int32_t data[2] = {1, 2};
  const Status status = WriteNpy(path, DType::kInt32, {2}, data);
  EXPECT_EQ(status.code(), StatusCode::kIoError) << status.message();
  EXPECT_EQ(status.message().rfind(path + ": ", 0), 0u) << status.message();
  EXPECT_FALSE(fs::exists(Path("no")));
  EXPECT_TRUE(Listing().empty());
}

TEST_F(NpyTest, WriteReplacesExistingFileAtomically) {
  const std::string path = Path("a.npy");
  const int32_t old_data[3] = {1, 2, 3};
  ASSERT_TRUE(WriteNpy(path, DType::kInt32, {3}, old_data).ok());
  const std::string old_file = ReadWholeFile(path);
  // A reader holding the old file open keeps seeing all of it: the new file
  // arrives by rename, never by truncating and rewriting in place.
  std::ifstream old_reader(path, std::ios::binary);
  ASSERT_TRUE(old_reader.is_open());

  const double new_data[4] = {0.5, 1.5, 2.5, 3.5};
  ASSERT_TRUE(WriteNpy(path, DType::kFloat64, {2, 2}, new_data).ok());

  NpyArray array;
  ASSERT_TRUE(ReadNpy(path, &array).ok());
  EXPECT_EQ(array.dtype, DType::kFloat64);
  EXPECT_EQ(array.shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(array.data<double>()[3], 3.5);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(old_reader), {}), old_file);
  EXPECT_EQ(Listing(), std::vector<std::string>{"a.npy"});
}

TEST_F(NpyTest, WriteOverDirectoryFailsAndCleansUp) {
  const std::string path = Path("d.npy");
  fs::create_directory(path);
  const float data[1] = {1.0f};
  const Status status = WriteNpy(path, DType::kFloat32, {1}, data);
  EXPECT_EQ(status.code(), StatusCode::kIoError) << status.message();
  EXPECT_EQ(status.message().rfind(path + ": ", 0), 0u) << status.message();
  EXPECT_TRUE(fs::is_directory(path));
  EXPECT_EQ(Listing(), std::vector<std::string>{"d.npy"});
}

TEST_F(NpyTest, WriteDoesNotFollowSymlinkAtTempPath) {
  const std::string victim = WriteRaw("victim", "precious");
  const std::string path = Path("a.npy");
  fs::create_symlink(victim, path + ".tmp." + std::to_string(::getpid()));
  const int64_t data[1] = {9};
  ASSERT_TRUE(WriteNpy(path, DType::kInt64, {1}, data).ok());
  EXPECT_EQ(ReadWholeFile(victim), "precious");
  EXPECT_EQ(Listing(), (std::vector<std::string>{"a.npy", "victim"}));
}

TEST_F(NpyTest, FailedWriteKeepsOldFileAndRemovesTemp) {
  const std::string path = Path("a.npy");
  const int32_t old_data[2] = {4, 5};
  ASSERT_TRUE(WriteNpy(path, DType::kInt32, {2}, old_data).ok());
  const std::string old_file = ReadWholeFile(path);

  // In a forked child (so the limit cannot leak into other tests), cap file
  // sizes at 256 bytes so writing 4000 bytes of data fails part way with EFBIG.
  // The child shares this fixture's temp dir, so the checks below see its work.
  const std::vector<float> big(1000, 1.0f);
  EXPECT_EXIT(
      {
        ::signal(SIGXFSZ, SIG_IGN);
        rlimit limit{};
        ::getrlimit(RLIMIT_FSIZE, &limit);
        limit.rlim_cur = 256;
        ::setrlimit(RLIMIT_FSIZE, &limit);
        const Status status = WriteNpy(path, DType::kFloat32, {1000}, big.data());
        const bool as_expected = status.code() == StatusCode::kIoError &&
                                 status.message().rfind(path + ": ", 0) == 0;
        std::_Exit(as_expected ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
  EXPECT_EQ(ReadWholeFile(path), old_file);
  EXPECT_EQ(Listing(), std::vector<std::string>{"a.npy"});
}

TEST_F(NpyTest, WriteRejectsBadArgumentsAndWritesNothing) {
  const std::string path = Path("a.npy");
  const float data[4] = {};
  struct Case {
    DType dtype;
    std::vector<int64_t> shape;
    const void* data;
    const char* fragment;
  };
  const Case cases[] = {
      {DType::kFloat32, {2, -2}, data, "negative dimension"},
      {DType::kFloat32, {4}, nullptr, "data is null"},
      {DType::kFloat32, {1, 1, 1, 1, 1, 1, 1, 1, 1}, data, "rank 9"},
      {DType::kFloat32, {int64_t{1} << 62, 4}, data, "too large"},
      {static_cast<DType>(7), {1}, data, "unknown dtype"},
  };
  for (const Case& c : cases) {
    const Status status = WriteNpy(path, c.dtype, c.shape, c.data);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.message();
    EXPECT_EQ(status.message().rfind(path + ": ", 0), 0u) << status.message();
    EXPECT_NE(status.message().find(c.fragment), std::string::npos) << status.message();
  }
  EXPECT_EQ(WriteNpy("", DType::kFloat32, {1}, data).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Listing().empty());
}

TEST_F(NpyTest, WriteAllowsNullDataForEmptyShape) {
  ASSERT_TRUE(WriteNpy(Path("a.npy"), DType::kInt64, {3, 0}, nullptr).ok());
  NpyArray array;
  ASSERT_TRUE(ReadNpy(Path("a.npy"), &array).ok());
  EXPECT_EQ(array.shape, (std::vector<int64_t>{3, 0}));
  EXPECT_EQ(array.size(), 0);
}

}  // namespace
}  // namespace attnscore::npy
