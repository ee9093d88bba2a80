// The attnscore command-line tool, driven as a user would: exit codes, the
// error line, output files (present on success, absent on failure), values.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.h"

namespace attnscore::test {
namespace {

namespace fs = std::filesystem;

struct Result {
  int exit_code;
  std::string out, err;
};

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("attnscore_cli_test_" + std::to_string(getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Runs `attnscore <args>` (args are shell words; test paths have no spaces).
  Result Run(const std::string& args, const std::string& env = "") {
    const std::string out = (dir_ / "stdout").string(), err = (dir_ / "stderr").string();
    const std::string command = env + " " + ATTNSCORE_CLI + " " + args + " >" + out + " 2>" + err;
    const int status = std::system(command.c_str());
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, Slurp(out), Slurp(err)};
  }

  static std::string Slurp(const std::string& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  std::string Golden(const std::string& test_case, const std::string& name) const {
    return std::string(ATTNSCORE_GOLDEN_DIR) + "/" + test_case + "/" + name + ".npy";
  }
  std::string Temp(const std::string& name) const { return (dir_ / name).string(); }

  // Exit 2, one "attnscore: error:" line containing `part`, no file at `out`.
  void ExpectBadInput(const Result& r, const std::string& part, const std::string& out = "") {
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_EQ(r.err.rfind("attnscore: error: ", 0), 0u) << r.err;
    EXPECT_NE(r.err.find(part), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    if (!out.empty()) {
      EXPECT_FALSE(fs::exists(out)) << out << " was left behind";
    }
    for (const auto& entry : fs::directory_iterator(dir_)) {
      EXPECT_EQ(entry.path().string().find(".tmp."), std::string::npos) << entry.path();
    }
  }

  std::string SoftmaxArgs(const std::string& out) const {
    return "run softmax --x " + Golden("softmax_seed_per_query", "x") + " --valid-lens " +
           Golden("softmax_seed_per_query", "valid_lens") + " --out " + out;
  }
  std::string DotArgs(const std::string& name, const std::string& out) const {
    return "run dot --queries " + Golden(name, "queries") + " --keys " + Golden(name, "keys") +
           " --values " + Golden(name, "values") + " --valid-lens " + Golden(name, "valid_lens") +
           " --out " + out;
  }

  fs::path dir_;
};

double MaxDiff(const npy::NpyArray& a, const npy::NpyArray& b) {
  EXPECT_EQ(a.shape, b.shape);
  double worst = 0;
  for (int64_t e = 0; e < a.size() && e < b.size(); ++e) {
    worst = std::max(worst, static_cast<double>(std::abs(a.data<float>()[e] - b.data<float>()[e])));
  }
  return worst;
}

npy::NpyArray Read(const std::string& path) {
  npy::NpyArray array;
  const Status s = npy::ReadNpy(path, &array);
  EXPECT_TRUE(s.ok()) << s.message();
  return array;
}

TEST_F(CliTest, HelpAndInfo) {
  Result r = Run("--help");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("attnscore run dot"), std::string::npos);
  r = Run("");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("usage:"), std::string::npos);
  r = Run("--threads 2 info");  // flags may come before the command
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("threads: 2"), std::string::npos) << r.out;
  r = Run("info");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("highway targets on this cpu:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("onednn version:"), std::string::npos) << r.out;
}

// One version, from the CMake project version: the CLI's --version and info,
// the library's Version() and the generated header agree with it.
TEST_F(CliTest, VersionHasOneSource) {
  EXPECT_STREQ(Version(), ATTNSCORE_CMAKE_PROJECT_VERSION);
  EXPECT_STREQ(ATTNSCORE_VERSION_STRING, ATTNSCORE_CMAKE_PROJECT_VERSION);
  EXPECT_EQ(std::to_string(ATTNSCORE_VERSION_MAJOR) + "." + std::to_string(ATTNSCORE_VERSION_MINOR) +
                "." + std::to_string(ATTNSCORE_VERSION_PATCH),
            ATTNSCORE_CMAKE_PROJECT_VERSION);
  Result r = Run("--version");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, std::string("attnscore ") + ATTNSCORE_CMAKE_PROJECT_VERSION + "\n");
  EXPECT_EQ(r.err, "");
  r = Run("info");
  EXPECT_EQ(r.out.rfind(std::string("attnscore ") + ATTNSCORE_CMAKE_PROJECT_VERSION + "\n", 0), 0u)
      << r.out;
  // --version alone: with a command or another flag it is bad input.
  ExpectBadInput(Run("--version info"), "--version takes no command or other flag");
  ExpectBadInput(Run("--version --threads 2"), "--version takes no command or other flag");
}

TEST_F(CliTest, EveryIsaCapDispatchesThereAndMatchesGolden) {
  const std::string cpu = Run("info").out;
  const struct {
    const char *isa, *target, *onednn;
  } caps[] = {{"scalar", "SCALAR", "sse41"}, {"sse4", "SSE4", "sse41"},
              {"avx2", "AVX2", "avx2"}, {"avx512", "AVX3", "avx512"}};
  for (const auto& cap : caps) {
    SCOPED_TRACE(cap.isa);
    if (cpu.find(std::string(" ") + cap.target) == std::string::npos &&
        cpu.find(std::string(": ") + cap.target) == std::string::npos) {
      continue;  // this CPU lacks it
    }
    const Result info = Run(std::string("info --isa ") + cap.isa);
    ASSERT_EQ(info.exit_code, 0) << info.err;
    EXPECT_NE(info.out.find(std::string("highway target in use: ") + cap.target + "\n"),
              std::string::npos) << info.out;
    EXPECT_NE(info.out.find(std::string("onednn isa: ") + cap.onednn), std::string::npos)
        << info.out;
    const std::string y = Temp("y.npy"), out = Temp("o.npy"), weights = Temp("w.npy");
    Result r = Run(SoftmaxArgs(y) + " --isa " + cap.isa);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_LE(MaxDiff(Read(y), Read(Golden("softmax_seed_per_query", "y"))), 1e-5);
    r = Run(DotArgs("dot_odd_per_query", out) + " --weights-out " + weights,
            std::string("ATTNSCORE_ISA=") + cap.isa);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const npy::NpyArray values = Read(Golden("dot_odd_per_query", "values"));
    double max_value = 0;
    for (int64_t e = 0; e < values.size(); ++e) {
      max_value = std::max(max_value, static_cast<double>(std::abs(values.data<float>()[e])));
    }
    EXPECT_LE(MaxDiff(Read(out), Read(Golden("dot_odd_per_query", "out"))), 1e-5 * (1 + max_value));
    EXPECT_LE(MaxDiff(Read(weights), Read(Golden("dot_odd_per_query", "weights"))), 1e-5);
  }
}

TEST_F(CliTest, RunSoftmaxMatchesGolden) {
  const std::string out = Temp("y.npy"), weights = Temp("w.npy");
  const Result r = Run(SoftmaxArgs(out) + " --weights-out " + weights);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_LE(MaxDiff(Read(out), Read(Golden("softmax_seed_per_query", "y"))), 1e-5);
  // The weights are Y itself, written again.
  EXPECT_EQ(MaxDiff(Read(weights), Read(out)), 0.0);
}

TEST_F(CliTest, RunDotWritesOutAndWeights) {
  const std::string out = Temp("o.npy"), weights = Temp("w.npy");
  const Result r = Run(DotArgs("dot_toy", out) + " --weights-out " + weights + " --threads 2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_LE(MaxDiff(Read(out), Read(Golden("dot_toy", "out"))), 1e-5 * 40);
  EXPECT_LE(MaxDiff(Read(weights), Read(Golden("dot_toy", "weights"))), 1e-5);
}

// bf16 rounds the matmul inputs: the output moves off the fp32 golden, but
// stays within the mode's stated tolerance (bf16_test.cc), 1e-2 · (1 + max|V|).
TEST_F(CliTest, RunDotInBf16StaysWithinItsTolerance) {
  const std::string out = Temp("o.npy"), weights = Temp("w.npy");
  const Result r = Run(DotArgs("dot_per_batch_int32", out) + " --weights-out " + weights +
                       " --precision bf16");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const double out_error = MaxDiff(Read(out), Read(Golden("dot_per_batch_int32", "out")));
  EXPECT_LE(out_error, 1e-2 * (1 + 4.4));
  EXPECT_GT(out_error, 1e-5 * (1 + 4.4)) << "no rounding happened";
  EXPECT_LE(MaxDiff(Read(weights), Read(Golden("dot_per_batch_int32", "weights"))), 1e-2);
  const Result bench = Run("bench dot --batch 2 --queries 8 --keys 40 --repeat 2 --json --precision bf16");
  ASSERT_EQ(bench.exit_code, 0) << bench.err;
  EXPECT_NE(bench.out.find("\"precision\": \"bf16\""), std::string::npos) << bench.out;
  const Result info = Run("info --precision bf16");
  EXPECT_NE(info.out.find("precision: bf16\n"), std::string::npos) << info.out;
  // Ops without a bf16 mode refuse it rather than run fp32 under its name.
  ExpectBadInput(Run(SoftmaxArgs(Temp("y.npy")) + " --precision bf16"),
                 "--precision bf16: only dot has a bf16 mode; softmax runs in fp32", Temp("y.npy"));
  ExpectBadInput(Run("bench additive --batch 1 --queries 4 --keys 8 --precision bf16"),
                 "only dot has a bf16 mode; additive runs in fp32");
}

// Under an AVX2 cap oneDNN has no bf16 arithmetic: the products run as f32
// matmuls on the rounded values, which give the native path's weights up to
// the order of the sums, and the output within the mode's tolerance.
TEST_F(CliTest, Bf16UnderAnAvx2CapRunsF32MatmulsOnRoundedInputs) {
  const Result cpu = Run("info");
  if (cpu.out.find(" AVX2 ") == std::string::npos) GTEST_SKIP() << "no AVX2 on this CPU";
  const std::string out = Temp("o.npy"), weights = Temp("w.npy");
  const std::string native_out = Temp("native_o.npy"), native_weights = Temp("native_w.npy");
  const std::string args = DotArgs("dot_per_batch_int32", out) + " --weights-out " + weights;
  const Result r = Run(args + " --precision bf16 --info", "ATTNSCORE_ISA=avx2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("bf16 matmuls: f32 arithmetic on bf16-rounded inputs"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("onednn matmuls: 4\n"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find(", bf16:"), std::string::npos) << "a bf16 matmul under avx2:\n" << r.out;
  const double out_error = MaxDiff(Read(out), Read(Golden("dot_per_batch_int32", "out")));
  EXPECT_LE(out_error, 1e-2 * (1 + 4.4));
  EXPECT_GT(out_error, 1e-5 * (1 + 4.4)) << "no rounding happened";

  // Without ATTNSCORE_ISA: native bf16 matmuls where the CPU has them (else
  // the same path again). Only the order of the f32 sums differs, so the
  // weights agree closely; the output, after P is rounded, can differ by a
  // bf16 step of a weight whose rounding the sums tipped.
  const Result native = Run(DotArgs("dot_per_batch_int32", native_out) + " --weights-out " +
                            native_weights + " --precision bf16");
  ASSERT_EQ(native.exit_code, 0) << native.err;
  EXPECT_LE(MaxDiff(Read(weights), Read(native_weights)), 1e-5);
  EXPECT_LE(MaxDiff(Read(out), Read(native_out)), 1e-2 * (1 + 4.4));
}

TEST_F(CliTest, BenchPrintsJson) {
  for (const char* args : {"softmax --valid-lens random", "softmax --valid-lens none",
                           "dot --valid-lens random-batch", "dot --valid-lens full --weights",
                           "dot --valid-lens 7 --threads 2"}) {
    SCOPED_TRACE(args);
    const Result r = Run(std::string("bench ") + args + " --batch 2 --queries 3 --keys 40 --repeat 3 --json");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    for (const char* key : {"\"median_us\": ", "\"min_us\": ", "\"gflops\": ", "\"gbytes_per_s\": "}) {
      EXPECT_NE(r.out.find(key), std::string::npos) << key << " in " << r.out;
    }
    EXPECT_EQ(r.out.front(), '{');
  }
}

TEST_F(CliTest, BenchJsonNamesTheHighwayTargetAndOnednnImplementations) {
  // In fp32 the dot product runs its own kernels: no matmul.
  Result r = Run("bench dot --batch 2 --queries 8 --keys 40 --repeat 2 --json --isa best");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\"onednn_implementations\": []"), std::string::npos) << r.out;
  // In bf16, 8 queries an entry take the matmul path (3 or fewer the row path).
  r = Run("bench dot --batch 2 --queries 8 --keys 40 --repeat 2 --json --isa best --precision bf16");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string target = Run("info").out;  // "highway target in use: X"
  const size_t at = target.find("in use: ");
  ASSERT_NE(at, std::string::npos) << target;
  const std::string in_use = target.substr(at + 8, target.find('\n', at) - at - 8);
  EXPECT_NE(r.out.find("\"highway_target\": \"" + in_use + "\""), std::string::npos) << r.out;
  const size_t list = r.out.find("\"onednn_implementations\": [\"");
  ASSERT_NE(list, std::string::npos) << r.out;
  EXPECT_NE(r.out[list + 28], '"') << "an empty name in " << r.out;
  // The softmax makes no matmul.
  r = Run("bench softmax --batch 2 --queries 3 --keys 40 --repeat 2 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\"onednn_implementations\": []"), std::string::npos) << r.out;
  ExpectBadInput(Run("bench dot --batch 2 --queries 3 --keys 40 --json --info"),
                 "--info and --json both print to stdout");
}

// The same run on 1, 2 and 3 threads writes the same bytes, under every cap
// this CPU has. Separate processes, so each makes its own oneDNN primitives
// under its own thread count: (3, 40, 300) is one task, which oneDNN's AVX2
// gemm split by thread count (changing last bits) until the engine stopped
// it; (2, 300, 500) is cut into tasks that the threads share.
TEST_F(CliTest, RunsAreBitwiseTheSameForAnyThreadCount) {
  const std::string cpu = Run("info").out;
  struct Shape {
    int64_t batch, queries, keys, depth, value_dim;
  };
  for (const Shape& s : {Shape{3, 40, 300, 32, 16}, Shape{2, 300, 500, 64, 64}}) {
    const std::vector<float> q = RandomFloats(static_cast<size_t>(s.batch * s.queries * s.depth), 1),
                             k = RandomFloats(static_cast<size_t>(s.batch * s.keys * s.depth), 2),
                             v = RandomFloats(static_cast<size_t>(s.batch * s.keys * s.value_dim), 3);
    ASSERT_TRUE(npy::WriteNpy(Temp("q.npy"), npy::DType::kFloat32, {s.batch, s.queries, s.depth}, q.data()).ok());
    ASSERT_TRUE(npy::WriteNpy(Temp("k.npy"), npy::DType::kFloat32, {s.batch, s.keys, s.depth}, k.data()).ok());
    ASSERT_TRUE(npy::WriteNpy(Temp("v.npy"), npy::DType::kFloat32, {s.batch, s.keys, s.value_dim}, v.data()).ok());
    for (const std::string isa : {"sse4", "avx2", "avx512", "best"}) {
      const std::string target = isa == "avx512" ? "AVX3" : isa == "avx2" ? "AVX2" : "SSE4";
      if (isa != "best" && cpu.find(" " + target + " ") == std::string::npos &&
          cpu.find(": " + target + " ") == std::string::npos) {
        continue;  // this CPU lacks it
      }
      SCOPED_TRACE(isa + " on (" + std::to_string(s.batch) + ", " + std::to_string(s.queries) + ", " +
                   std::to_string(s.keys) + ")");
      std::string first_out, first_weights;
      for (const char* threads : {"1", "2", "3"}) {
        const std::string out = Temp(std::string("o") + threads + ".npy"),
                          weights = Temp(std::string("w") + threads + ".npy");
        const Result r = Run("run dot --queries " + Temp("q.npy") + " --keys " + Temp("k.npy") +
                             " --values " + Temp("v.npy") + " --out " + out + " --weights-out " +
                             weights + " --isa " + isa + " --threads " + threads);
        ASSERT_EQ(r.exit_code, 0) << r.err;
        if (first_out.empty()) {
          first_out = Slurp(out), first_weights = Slurp(weights);
          ASSERT_FALSE(first_out.empty());
        } else {
          EXPECT_TRUE(Slurp(out) == first_out) << threads << " threads";
          EXPECT_TRUE(Slurp(weights) == first_weights) << threads << " threads";
        }
      }
    }
  }
}

// A .npy file's bytes with any header dict: magic, version 1.0, the header
// padded with spaces to a multiple of 64 and ended by a newline, then payload.
std::string NpyBytes(const std::string& dict, size_t payload_bytes) {
  std::string header = dict;
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string bytes("\x93NUMPY\x01\x00", 8);
  bytes += static_cast<char>(header.size() & 0xff);
  bytes += static_cast<char>(header.size() >> 8);
  return bytes + header + std::string(payload_bytes, '\0');
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// The CLI's validation matrix: malformed files and arguments of every kind,
// each refused with exit 2 and one error line naming the file or flag, and
// an --out that already exists left exactly as it was (the run writes to a
// temporary name, renamed only on success).
TEST_F(CliTest, ValidationMatrixRefusesEveryMalformedInput) {
  const std::string q = Golden("dot_odd_per_query", "queries"), k = Golden("dot_odd_per_query", "keys"),
                    v = Golden("dot_odd_per_query", "values"), lens = Golden("dot_odd_per_query", "valid_lens");
  const std::string toy = std::string(ATTNSCORE_GOLDEN_DIR) + "/additive_toy/";
  const std::string concat_model = std::string(ATTNSCORE_GOLDEN_DIR) + "/concat_tutorial/model.safetensors";
  const std::string valid_q = Slurp(q), model_bytes = Slurp(toy + "model.safetensors");
  // The bad files.
  WriteBytes(Temp("truncated.npy"), valid_q.substr(0, valid_q.size() - 7));
  WriteBytes(Temp("header_only.npy"), valid_q.substr(0, 60));
  WriteBytes(Temp("garbage.npy"), "PK\x03\x04 this is a zip, not an array");
  WriteBytes(Temp("empty.npy"), "");
  WriteBytes(Temp("huge_claim.npy"),
             NpyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': (1000000, 1000000, 1000000), }", 64));
  WriteBytes(Temp("negative_dim.npy"), NpyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': (3, -7, 33), }", 64));
  WriteBytes(Temp("fortran.npy"), NpyBytes("{'descr': '<f4', 'fortran_order': True, 'shape': (3, 7, 33), }", 4 * 693));
  WriteBytes(Temp("big_endian.npy"), NpyBytes("{'descr': '>f4', 'fortran_order': False, 'shape': (3, 7, 33), }", 4 * 693));
  WriteBytes(Temp("float16.npy"), NpyBytes("{'descr': '<f2', 'fortran_order': False, 'shape': (3, 7, 33), }", 2 * 693));
  WriteBytes(Temp("bad_dict.npy"), NpyBytes("{'descr': '<f4', 'shape': (3, 7, 33), }", 4 * 693));
  WriteBytes(Temp("overflow_shape.npy"),
             NpyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 4294967296), }", 64));
  const std::vector<double> f64(3 * 7 * 33, 0.5);
  ASSERT_TRUE(npy::WriteNpy(Temp("float64.npy"), npy::DType::kFloat64, {3, 7, 33}, f64.data()).ok());
  const std::vector<float> flat(3 * 7 * 33, 0.5f);
  ASSERT_TRUE(npy::WriteNpy(Temp("rank2.npy"), npy::DType::kFloat32, {21, 33}, flat.data()).ok());
  const std::vector<int32_t> ints(3 * 7 * 33, 1);
  ASSERT_TRUE(npy::WriteNpy(Temp("int32_queries.npy"), npy::DType::kInt32, {3, 7, 33}, ints.data()).ok());
  const std::vector<int64_t> negative = {2, -1, 4}, long_lens = {1, 2, 3, 4};
  ASSERT_TRUE(npy::WriteNpy(Temp("lens_negative.npy"), npy::DType::kInt64, {3}, negative.data()).ok());
  ASSERT_TRUE(npy::WriteNpy(Temp("lens_too_many.npy"), npy::DType::kInt64, {4}, long_lens.data()).ok());
  ASSERT_TRUE(npy::WriteNpy(Temp("lens_rank3.npy"), npy::DType::kInt64, {3, 1, 1}, negative.data()).ok());
  ASSERT_TRUE(npy::WriteNpy(Temp("lens_float.npy"), npy::DType::kFloat32, {3}, flat.data()).ok());
  WriteBytes(Temp("truncated.safetensors"), model_bytes.substr(0, model_bytes.size() - 5));
  WriteBytes(Temp("garbage.safetensors"), std::string(64, '\x7f'));
  WriteBytes(Temp("huge_header.safetensors"), std::string("\xff\xff\xff\xff\xff\xff\xff\x7f{}", 10));
  std::string bad_json = model_bytes;
  bad_json[8] = '[';  // the header is a JSON object; make it not one
  WriteBytes(Temp("bad_json.safetensors"), bad_json);
  const std::string out = Temp("out.npy");
  auto dot = [&](const std::string& queries, const std::string& keys, const std::string& values,
                 const std::string& extra = "") {
    return "run dot --queries " + queries + " --keys " + keys + " --values " + values + " --out " + out + extra;
  };
  auto additive = [&](const std::string& model, const std::string& extra = "") {
    return "run additive --model " + model + " --queries " + toy + "queries.npy --keys " + toy +
           "keys.npy --values " + toy + "values.npy --out " + out + extra;
  };
  // Each message names the file or flag and says what is wrong with it.
  const struct {
    std::string args, message_part;
  } cases[] = {
      {dot(Temp("missing.npy"), k, v), "missing.npy: cannot open"},
      {dot(dir_.string(), k, v), dir_.string() + ": cannot read: not a regular file"},
      {dot(Temp("truncated.npy"), k, v), "truncated.npy: shape (3, 7, 33) needs 2772 bytes but the file holds 2765"},
      {dot(Temp("header_only.npy"), k, v), "header_only.npy: truncated header"},
      {dot(Temp("garbage.npy"), k, v), "garbage.npy: not a .npy file (bad magic)"},
      {dot(Temp("empty.npy"), k, v), "empty.npy: empty file"},
      {dot(Temp("huge_claim.npy"), k, v), "huge_claim.npy: shape (1000000, 1000000, 1000000) needs"},
      {dot(Temp("negative_dim.npy"), k, v), "negative_dim.npy: malformed header: 'shape' has a negative dimension"},
      {dot(Temp("fortran.npy"), k, v), "fortran.npy: fortran_order arrays are not supported"},
      {dot(Temp("big_endian.npy"), k, v), "big_endian.npy: unsupported dtype '>f4'"},
      {dot(Temp("float16.npy"), k, v), "float16.npy: unsupported dtype '<f2'"},
      {dot(Temp("bad_dict.npy"), k, v), "bad_dict.npy: header has no 'fortran_order' key"},
      {dot(Temp("overflow_shape.npy"), k, v), "overflow_shape.npy: shape (4294967296, 4294967296, 4294967296) is too large"},
      {dot(Temp("float64.npy"), k, v), "float64.npy: dtype is float64; want float32"},
      {dot(Temp("rank2.npy"), k, v), "rank2.npy: shape (21, 33) has rank 2; want rank 3"},
      {dot(Temp("int32_queries.npy"), k, v), "int32_queries.npy: dtype is int32; want float32"},
      {dot(q, q, v), "values has shape (3, 19, 5) but must be (B, M, Dv) = (3, 7, *)"},  // keys of 7 rows, values of 19
      {dot(q, k, q), "values has shape (3, 7, 33) but must be (B, M, Dv) = (3, 19, *)"},
      {dot(q, k, v, " --valid-lens " + Temp("lens_negative.npy")), "valid_lens[1] is -1; lengths must be >= 0"},
      {dot(q, k, v, " --valid-lens " + Temp("lens_too_many.npy")), "valid_lens has shape (4,) but the batch size is 3"},
      {dot(q, k, v, " --valid-lens " + Temp("lens_rank3.npy")), "lens_rank3.npy: shape (3, 1, 1) has rank 3"},
      {dot(q, k, v, " --valid-lens " + Temp("lens_float.npy")), "lens_float.npy: dtype is float32; want int32 or int64"},
      {dot(q, k, v, " --valid-lens " + Temp("truncated.npy")), "truncated.npy: shape (3, 7, 33) needs"},
      {dot(q, k, v, " --weights-out " + out), "name the same file"},
      {dot(q, k, v, " --weights-out " + dir_.string()), "is a directory"},
      {dot(q, k, v, " --threads -1"), "--threads is -1; it must be in [1, 1024]"},
      {dot(q, k, v, " --isa mmx"), "--isa is 'mmx'"},
      {dot(q, k, v, " --precision fp16"), "--precision is 'fp16'; want fp32 or bf16"},
      {dot(q, k, v, " --threads"), "--threads needs a value"},
      {dot(q, k, v, " --values " + v), "--values is given twice"},
      {dot(q, k, v, " --model " + toy + "model.safetensors"), "unknown flag --model"},
      {additive(Temp("truncated.safetensors")), "truncated.safetensors: tensor 'w_v.weight' has data_offsets"},
      {additive(Temp("garbage.safetensors")), "garbage.safetensors: header length 9187201950435737471 exceeds"},
      {additive(Temp("huge_header.safetensors")), "huge_header.safetensors: header length 9223372036854775807 exceeds"},
      {additive(Temp("bad_json.safetensors")), "bad_json.safetensors: malformed header: header is an array"},
      {additive(concat_model), "unexpected tensor \"attn.bias\"; an additive attention state_dict has only"},
      {additive(Temp("missing.safetensors")), "missing.safetensors: cannot open"},
  };
  ASSERT_GE(std::size(cases), 30u);
  for (const auto& c : cases) {
    SCOPED_TRACE(c.args);
    WriteBytes(out, "an earlier result");
    const Result r = Run(c.args);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_EQ(r.err.rfind("attnscore: error: ", 0), 0u) << r.err;
    EXPECT_NE(r.err.find(c.message_part), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_TRUE(Slurp(out) == "an earlier result") << "--out was overwritten";
    for (const auto& entry : fs::directory_iterator(dir_)) {
      EXPECT_EQ(entry.path().string().find(".tmp."), std::string::npos) << entry.path();
    }
  }
}

// run --info lists each matmul the run made and oneDNN's implementation for
// it; under a cap none of them may use code above it.
TEST_F(CliTest, RunInfoNamesEachMatmulAndItsImplementation) {
  const Result info = Run("info");
  ASSERT_EQ(info.exit_code, 0) << info.err;
  EXPECT_NE(info.out.find("onednn matmuls: none created yet\n"), std::string::npos) << info.out;
  const bool avx2 = info.out.find(" AVX2 ") != std::string::npos;
  for (const std::string isa : {"sse4", "avx2"}) {
    SCOPED_TRACE(isa);
    if (isa == "avx2" && !avx2) continue;
    const std::string out = Temp("o.npy");
    // bf16: the dot product's matmul path (fp32 runs the tile kernels).
    const Result r =
        Run(DotArgs("dot_odd_per_query", out) + " --info --precision bf16 --isa " + isa);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(fs::exists(out));
    EXPECT_NE(r.out.find("isa cap: " + isa + "\n"), std::string::npos) << r.out;
    // Most implementation names do not carry their ISA; oneDNN's own does.
    EXPECT_NE(r.out.find(std::string("onednn isa: ") + (isa == "sse4" ? "sse41\n" : "avx2\n")),
              std::string::npos) << r.out;
    const size_t list = r.out.find("onednn matmuls: ");
    ASSERT_NE(list, std::string::npos) << r.out;
    const int count = std::atoi(r.out.c_str() + list + 16);
    EXPECT_GE(count, 2) << r.out;  // Q·Kᵀ and W·V at least
    // count lines "  B x (m x k) . (k x n)[, extras]: IMPLEMENTATION, R run(s)"
    std::istringstream lines(r.out.substr(r.out.find('\n', list) + 1));
    std::string line;
    int listed = 0;
    while (std::getline(lines, line)) {
      ++listed;
      EXPECT_EQ(line.rfind("  ", 0), 0u) << line;
      EXPECT_NE(line.find(") . ("), std::string::npos) << line;
      EXPECT_NE(line.find(": "), std::string::npos) << line;
      const size_t runs = line.rfind(", ");
      ASSERT_NE(runs, std::string::npos) << line;
      EXPECT_GE(std::atoi(line.c_str() + runs + 2), 1) << line;
      EXPECT_TRUE(line.substr(line.size() - 4) == " run" || line.substr(line.size() - 5) == " runs")
          << line;
      EXPECT_EQ(line.find(isa == "sse4" ? "avx" : "avx512"), std::string::npos) << line;
    }
    EXPECT_EQ(listed, count) << r.out;
  }
}

// `run OP` on a golden case of a model (additive or concat).
std::string ModelArgs(const std::string& op, const std::string& name, const std::string& out) {
  const std::string dir = std::string(ATTNSCORE_GOLDEN_DIR) + "/" + name + "/";
  return "run " + op + " --model " + dir + "model.safetensors --queries " + dir +
         "queries.npy --keys " + dir + "keys.npy --values " + dir + "values.npy" +
         (GoldenExists(name, "valid_lens") ? " --valid-lens " + dir + "valid_lens.npy" : "") +
         " --out " + out;
}

TEST_F(CliTest, RunAdditiveMatchesTheSeedModule) {
  for (const char* name : {"additive_toy", "additive_h1_per_query"}) {
    SCOPED_TRACE(name);
    const std::string out = Temp("o.npy"), weights = Temp("w.npy");
    const Result r = Run(ModelArgs("additive", name, out) + " --weights-out " + weights);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_LE(MaxDiff(Read(out), Read(Golden(name, "out"))), 1e-5 * 40);
    EXPECT_LE(MaxDiff(Read(weights), Read(Golden(name, "weights"))), 1e-5);
  }
}

TEST_F(CliTest, RunAdditiveRejectsBadModelsAndShapes) {
  const std::string out = Temp("o.npy");
  const std::string toy = std::string(ATTNSCORE_GOLDEN_DIR) + "/additive_toy/";
  // A model file that is not one, a model of other sizes, queries of the wrong width.
  std::string args = ModelArgs("additive", "additive_toy", out);
  std::string wrong = args;
  wrong.replace(wrong.find(toy + "model.safetensors"), toy.size() + 17, toy + "keys.npy");
  ExpectBadInput(Run(wrong), toy + "keys.npy: ", out);
  wrong = args;
  const std::string other = std::string(ATTNSCORE_GOLDEN_DIR) + "/additive_no_lens/model.safetensors";
  wrong.replace(wrong.find(toy + "model.safetensors"), toy.size() + 17, other);
  ExpectBadInput(Run(wrong), "AdditiveAttention: queries has shape (2, 1, 20)", out);
  ExpectBadInput(Run(args + " --weights-out " + out), "name the same file", out);
}

TEST_F(CliTest, BenchAdditivePrintsTriplesPerNs) {
  const Result r = Run("bench additive --batch 2 --queries 5 --keys 40 --query-dim 6 --key-dim 3 "
                       "--hidden 9 --value-dim 4 --valid-lens random --repeat 3 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* key : {"\"op\": \"additive\"", "\"hidden\": 9", "\"key_dim\": 3",
                          "\"triples_per_ns\": ", "\"gflops\": "}) {
    EXPECT_NE(r.out.find(key), std::string::npos) << key << " in " << r.out;
  }
}

TEST_F(CliTest, RunConcatMatchesTheSeedModule) {
  for (const char* name : {"concat_tutorial", "concat_odd_per_batch_int32"}) {
    SCOPED_TRACE(name);
    const std::string out = Temp("o.npy"), weights = Temp("w.npy");
    const Result r = Run(ModelArgs("concat", name, out) + " --weights-out " + weights);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const npy::NpyArray want = Read(Golden(name, "out"));
    double largest = 0;
    for (int64_t e = 0; e < want.size(); ++e) largest = std::max(largest, double{std::abs(want.data<float>()[e])});
    EXPECT_LE(MaxDiff(Read(out), want), 1e-4 * (1 + largest));
    EXPECT_LE(MaxDiff(Read(weights), Read(Golden(name, "weights"))), 1e-5);
  }
}

TEST_F(CliTest, RunConcatRejectsBadModelsAndShapes) {
  const std::string out = Temp("o.npy"), weights = Temp("w.npy");
  const std::string args = ModelArgs("concat", "concat_tutorial", out) + " --weights-out " + weights;
  const std::string tutorial = std::string(ATTNSCORE_GOLDEN_DIR) + "/concat_tutorial/";
  // Another model's state_dict; queries too wide for the model (Dq from Q
  // leaves no key columns); values with the wrong number of rows.
  std::string wrong = args;
  wrong.replace(wrong.find(tutorial + "model.safetensors"), tutorial.size() + 17,
                std::string(ATTNSCORE_GOLDEN_DIR) + "/additive_toy/model.safetensors");
  ExpectBadInput(Run(wrong), "unexpected tensor", out);
  wrong = args;
  wrong.replace(wrong.find(tutorial + "queries.npy"), tutorial.size() + 11, tutorial + "values.npy");
  ExpectBadInput(Run(wrong), "/values.npy has Dq = 64, which the model cannot take", out);
  ExpectBadInput(Run(wrong), "query_size is 64 but attn.weight has 64 columns", out);
  wrong = args;
  wrong.replace(wrong.find(tutorial + "values.npy"), tutorial.size() + 10,
                std::string(ATTNSCORE_GOLDEN_DIR) + "/concat_odd_per_query/values.npy");
  ExpectBadInput(Run(wrong), "ConcatAttention: values has shape (2, 17, 5)", out);
  EXPECT_FALSE(fs::exists(weights));
}

TEST_F(CliTest, RunBilinearMatchesTheSeedModuleAndRefusesAnotherModel) {
  const std::string out = Temp("o.npy"), weights = Temp("w.npy");
  const Result r = Run(ModelArgs("bilinear", "bilinear_per_query", out) + " --weights-out " + weights);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const npy::NpyArray values = Read(Golden("bilinear_per_query", "values"));
  double largest = 0;
  for (int64_t e = 0; e < values.size(); ++e) largest = std::max(largest, double{std::abs(values.data<float>()[e])});
  EXPECT_LE(MaxDiff(Read(out), Read(Golden("bilinear_per_query", "out"))), 1e-5 * (1 + largest));
  EXPECT_LE(MaxDiff(Read(weights), Read(Golden("bilinear_per_query", "weights"))), 1e-5);
  std::filesystem::remove(out);
  std::string wrong = ModelArgs("bilinear", "bilinear_per_query", out);
  const std::string model = std::string(ATTNSCORE_GOLDEN_DIR) + "/bilinear_per_query/model.safetensors";
  wrong.replace(wrong.find(model), model.size(),
                std::string(ATTNSCORE_GOLDEN_DIR) + "/concat_tutorial/model.safetensors");
  ExpectBadInput(Run(wrong), "a bilinear attention state_dict has only W.weight", out);
}

TEST_F(CliTest, RunMultiHeadMatchesTheSeedModule) {
  for (const auto& [name, heads] : {std::pair{"multihead_h8_bias_per_query", 8},
                                    std::pair{"multihead_h1_per_batch_int32", 1}}) {
    SCOPED_TRACE(name);
    const std::string out = Temp("o.npy"), weights = Temp("w.npy");
    const Result r = Run(ModelArgs("multihead", name, out) + " --heads " + std::to_string(heads) +
                         " --weights-out " + weights);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const npy::NpyArray want = Read(Golden(name, "out"));
    double largest = 0;
    for (int64_t e = 0; e < want.size(); ++e) largest = std::max(largest, double{std::abs(want.data<float>()[e])});
    EXPECT_LE(MaxDiff(Read(out), want), 1e-4 * (1 + largest));
    const npy::NpyArray got_weights = Read(weights);
    EXPECT_EQ(got_weights.shape, Read(Golden(name, "weights")).shape);  // (B, heads, N, M)
    EXPECT_LE(MaxDiff(got_weights, Read(Golden(name, "weights"))), 1e-5);
  }
}

// d2l's causal lengths 1..N from a file, or --causal top-left: the same bytes.
TEST_F(CliTest, RunMultiHeadCausalFlagEqualsTheCausalLengths) {
  const std::string with_lens = Temp("lens.npy"), with_flag = Temp("flag.npy");
  std::string args = ModelArgs("multihead", "multihead_causal_self", with_lens) + " --heads 4";
  ASSERT_EQ(Run(args).exit_code, 0);
  args = ModelArgs("multihead", "multihead_causal_self", with_flag) + " --heads 4";
  const std::string lens_flag = " --valid-lens " + Golden("multihead_causal_self", "valid_lens");
  args.erase(args.find(lens_flag), lens_flag.size());
  const Result r = Run(args + " --causal top-left");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(Slurp(with_lens), Slurp(with_flag));
}

TEST_F(CliTest, RunMultiHeadRejectsBadFlagsModelsAndShapes) {
  const std::string out = Temp("o.npy");
  const std::string args = ModelArgs("multihead", "multihead_h8_bias_per_query", out);
  ExpectBadInput(Run(args), "needs the model parameter num_heads (heads; divides H); give it with --heads", out);
  ExpectBadInput(Run(args + " --heads 3"),
                 "MultiHeadAttention: num_heads is 3; it must be at least 1 and divide num_hiddens H = 32",
                 out);
  ExpectBadInput(Run(args + " --heads 0"), "--heads", out);
  ExpectBadInput(Run(args + " --heads 8 --causal diagonal"),
                 "--causal wants none, top-left or bottom-right, got 'diagonal'", out);
  std::string wrong = args + " --heads 8";
  const std::string model = std::string(ATTNSCORE_GOLDEN_DIR) + "/multihead_h8_bias_per_query/model.safetensors";
  wrong.replace(wrong.find(model), model.size(),
                std::string(ATTNSCORE_GOLDEN_DIR) + "/concat_tutorial/model.safetensors");
  ExpectBadInput(Run(wrong), "unexpected tensor", out);
  wrong = args + " --heads 8";
  const std::string queries = Golden("multihead_h8_bias_per_query", "queries");
  wrong.replace(wrong.find(queries), queries.size(), Golden("multihead_h8_bias_per_query", "keys"));
  ExpectBadInput(Run(wrong),
                 "MultiHeadAttention: queries has shape (2, 7, 10) but must be (B, N, Dq) = (*, *, 12)",
                 out);
  ExpectBadInput(Run(args + " --heads 8 --precision bf16"), "only dot has a bf16 mode", out);
}

TEST_F(CliTest, BenchConcatPrintsJson) {
  const Result r = Run("bench concat --batch 3 --queries 5 --keys 17 --query-dim 6 --key-dim 3 "
                       "--value-dim 4 --out-dim 7 --valid-lens random --weights --repeat 3 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* key : {"\"op\": \"concat\"", "\"key_dim\": 3", "\"out_dim\": 7", "\"gflops\": "}) {
    EXPECT_NE(r.out.find(key), std::string::npos) << key << " in " << r.out;
  }
  ExpectBadInput(Run("bench concat --batch 1 --queries 1 --keys 4 --hidden 3"), "--hidden");
}

TEST_F(CliTest, BenchTakesLengthsFromAFile) {
  const std::vector<int64_t> lens = {3, 40};
  ASSERT_TRUE(npy::WriteNpy(Temp("lens.npy"), npy::DType::kInt64, {2}, lens.data()).ok());
  Result r = Run("bench dot --batch 2 --queries 3 --keys 40 --repeat 2 --json --valid-lens " +
                 Temp("lens.npy"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // 2 L (D + Dv) per query over valid keys: the file's lengths set the FLOPs.
  EXPECT_NE(r.out.find("\"gflops\": "), std::string::npos) << r.out;
  ExpectBadInput(Run("bench dot --batch 3 --queries 3 --keys 40 --valid-lens " + Temp("lens.npy")),
                 "want int32 or int64 of shape (3,) or (3, 3)");
  r = Run("bench softmax --batch 2 --queries 3 --keys 40 --repeat 2 --json");
  EXPECT_NE(r.out.find("\"gflops\": null"), std::string::npos) << r.out;
}

// The text after `"key": ` in a one-line JSON object: a list up to its
// ']', anything else up to the next `, "` or the closing brace.
std::string JsonValue(const std::string& json, const std::string& key) {
  const size_t at = json.find("\"" + key + "\": ");
  if (at == std::string::npos) return "";
  const size_t from = at + key.size() + 4;
  if (json[from] == '[') return json.substr(from, json.find(']', from) + 1 - from);
  size_t to = json.find(", \"", from);
  if (to == std::string::npos) to = json.rfind('}');
  return json.substr(from, to - from);
}

// bench --json prints one object on one line: the documented keys in the
// documented order (docs/cli.md), ", " and ": " as separators, integers for
// the sizes, at most 3 decimals for the times and GB/s.
TEST_F(CliTest, BenchJsonIsOneLineWithTheDocumentedKeysInOrder) {
  const std::vector<std::string> common = {
      "op",      "batch",     "queries", "keys",      "query_dim", "value_dim",    "valid_lens",
      "threads", "isa",       "precision", "repeat",  "median_us", "min_us",       "gflops",
      "gbytes_per_s", "highway_target", "onednn_implementations"};
  const struct {
    const char* args;
    std::vector<std::string> extra;
  } cases[] = {
      {"softmax", {}},
      {"dot --query-dim 5 --value-dim 6 --weights", {}},
      {"additive --query-dim 6 --key-dim 3 --hidden 9", {"hidden", "key_dim", "triples_per_ns"}},
      {"concat --query-dim 6 --key-dim 3 --out-dim 7", {"key_dim", "out_dim"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.args);
    const Result r = Run(std::string("bench ") + c.args +
                         " --batch 2 --queries 5 --keys 17 --valid-lens random --repeat 2 --json --threads 2");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out.front(), '{') << r.out;
    ASSERT_GE(r.out.size(), 3u);
    EXPECT_EQ(r.out.substr(r.out.size() - 2), "}\n") << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
    std::vector<std::string> keys = common;
    keys.insert(keys.end(), c.extra.begin(), c.extra.end());
    size_t last = 0;
    for (const std::string& key : keys) {
      const size_t at = r.out.find("\"" + key + "\": ");
      ASSERT_NE(at, std::string::npos) << key << " in " << r.out;
      EXPECT_GT(at, last) << key << " out of order in " << r.out;
      last = at;
    }
    // Exactly these keys: one ": " after each, none elsewhere.
    size_t separators = 0;
    for (size_t at = r.out.find("\": "); at != std::string::npos; at = r.out.find("\": ", at + 1)) {
      ++separators;
    }
    EXPECT_EQ(separators, keys.size()) << r.out;
    EXPECT_EQ(JsonValue(r.out, "op"), "\"" + std::string(c.args).substr(0, std::string(c.args).find(' ')) + "\"");
    EXPECT_EQ(JsonValue(r.out, "batch"), "2");
    EXPECT_EQ(JsonValue(r.out, "queries"), "5");
    EXPECT_EQ(JsonValue(r.out, "keys"), "17");
    EXPECT_EQ(JsonValue(r.out, "valid_lens"), "\"random\"");
    EXPECT_EQ(JsonValue(r.out, "threads"), "2");
    EXPECT_EQ(JsonValue(r.out, "repeat"), "2");
    for (const char* key : {"median_us", "min_us", "gbytes_per_s"}) {
      const std::string value = JsonValue(r.out, key);
      ASSERT_FALSE(value.empty()) << key;
      EXPECT_EQ(value.find_first_not_of("0123456789."), std::string::npos) << key << ": " << value;
      const size_t point = value.find('.');
      if (point != std::string::npos) {
        EXPECT_LE(value.size() - point - 1, 3u) << key << ": " << value;
      }
      EXPECT_GT(std::atof(value.c_str()), 0.0) << key << ": " << value;
    }
    EXPECT_LE(std::atof(JsonValue(r.out, "min_us").c_str()),
              std::atof(JsonValue(r.out, "median_us").c_str())) << r.out;
    const std::string implementations = JsonValue(r.out, "onednn_implementations");
    EXPECT_EQ(implementations.front(), '[') << implementations;
    EXPECT_EQ(implementations.back(), ']') << implementations;
  }
}

// The --valid-lens text is a JSON string: a FILE.npy path with a quote and a
// backslash comes out escaped.
TEST_F(CliTest, BenchJsonEscapesTheLengthsPath) {
  const std::vector<int64_t> lens = {3, 40};
  const std::string path = Temp("a\"b\\c.npy");
  ASSERT_TRUE(npy::WriteNpy(path, npy::DType::kInt64, {2}, lens.data()).ok());
  const Result r = Run("bench dot --batch 2 --queries 3 --keys 40 --repeat 2 --json --valid-lens '" + path + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\"valid_lens\": \"" + dir_.string() + "/a\\\"b\\\\c.npy\""), std::string::npos)
      << r.out;
}

// Without --json, bench prints two lines (docs/cli.md), then with --info
// what info prints, including the matmuls the bench made.
TEST_F(CliTest, BenchPrintsTwoLinesAndInfo) {
  Result r = Run("bench dot --batch 2 --queries 8 --keys 40 --repeat 2 --valid-lens full --threads 2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // The cap may come from $ATTNSCORE_ISA.
  EXPECT_EQ(r.out.rfind("dot (2, 8, 40) valid-lens full, 2 thread(s), isa ", 0), 0u) << r.out;
  EXPECT_NE(r.out.find(", fp32\nmedian "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" over 2 runs; "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" GFLOP/s, "), std::string::npos) << r.out;
  EXPECT_EQ(r.out.substr(r.out.size() - 6), " GB/s\n") << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 2) << r.out;
  r = Run("bench additive --batch 2 --queries 8 --keys 40 --repeat 2 --info");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find(" triples/ns, "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" GB/s\nattnscore " ATTNSCORE_VERSION_STRING "\nhighway targets on this cpu: "), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("highway target in use: "), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("onednn matmuls: none created yet"), std::string::npos) << r.out;
  r = Run("bench softmax --batch 2 --queries 3 --keys 40 --repeat 2 --info");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.find("GFLOP/s"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("onednn matmuls: none created yet\n"), std::string::npos) << r.out;
}

// bench multihead in its three modes (docs/cli.md), and a clear refusal
// for each flag that does not apply.
TEST_F(CliTest, BenchMultiHeadTimesEachModeAndRefusesWhatDoesNotApply) {
  Result r =
      Run("bench multihead --batch 2 --queries 3 --keys 9 --query-dim 8 --heads 4 --kv-heads 2 "
          "--causal bottom-right --valid-lens random --repeat 2 --weights");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(
      r.out.rfind("multihead op (2, 3, 9) heads 4 kv-heads 2 D 8 causal bottom-right valid-lens "
                  "random, 1 thread(s), isa ",
                  0),
      0u)
      << r.out;
  EXPECT_NE(r.out.find(", fp32\nmedian "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" GFLOP/s, "), std::string::npos) << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 2) << r.out;
  r =
      Run("bench multihead --batch 2 --queries 1 --keys 40 --heads 4 --kv-heads 1 --decode "
          "--repeat 2 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* field :
       {"\"op\": \"multihead\"", "\"mode\": \"decode\"", "\"pool\": false", "\"heads\": 4",
        "\"kv_heads\": 1", "\"causal\": \"none\"", "\"highway_target\": "}) {
    EXPECT_NE(r.out.find(field), std::string::npos) << field << " in " << r.out;
  }
  // With --pool the cache's 40 keys a sequence take blocks of a pool.
  r =
      Run("bench multihead --batch 2 --queries 1 --keys 40 --heads 4 --kv-heads 1 --decode --pool "
          "--repeat 2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("multihead decode from a pool (2, 1, 40) heads 4 kv-heads 1 ", 0), 0u)
      << r.out;
  r = Run("bench multihead --batch 2 --queries 1 --keys 40 --decode --pool --repeat 2 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const int64_t block = sysconf(_SC_PAGESIZE) / (64 * static_cast<int64_t>(sizeof(float)));
  EXPECT_NE(r.out.find("\"mode\": \"decode\", \"pool\": true, \"block_positions\": " +
                       std::to_string(block) +
                       ", \"blocks\": " + std::to_string(2 * ((40 + block - 1) / block)) + ", "),
            std::string::npos)
      << r.out;
  r =
      Run("bench multihead --batch 1 --queries 2 --keys 5 --query-dim 4 --heads 2 --module --bias "
          "--repeat 2 --info");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("multihead module (1, 2, 5) heads 2 ", 0), 0u) << r.out;
  EXPECT_NE(r.out.find(" GB/s\nattnscore " ATTNSCORE_VERSION_STRING "\n"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("onednn matmuls: "), std::string::npos) << r.out;

  const std::string shape = "bench multihead --batch 1 --queries 2 --keys 5 ";
  ExpectBadInput(Run(shape + "--heads 8 --kv-heads 3"),
                 "must be a multiple of the key-value heads");
  ExpectBadInput(Run(shape + "--module --kv-heads 2"), "which has neither --kv-heads nor --decode");
  ExpectBadInput(Run(shape + "--decode --causal top-left"),
                 "--causal and --valid-lens do not apply");
  ExpectBadInput(Run(shape + "--decode --valid-lens full"),
                 "--causal and --valid-lens do not apply");
  ExpectBadInput(Run(shape + "--bias"), "--bias is for --module");
  ExpectBadInput(Run(shape + "--pool"), "--pool is for --decode");
  ExpectBadInput(Run(shape + "--module --pool"), "--pool is for --decode");
  ExpectBadInput(Run("bench multihead --batch 1 --queries 6 --keys 5 --decode"),
                 "the 6 new queries must be among the 5 cached keys");
  ExpectBadInput(Run(shape + "--causal sideways"), "--causal wants none, top-left or bottom-right");
  ExpectBadInput(Run(shape + "--json --info"), "--info and --json both print to stdout");
  ExpectBadInput(Run(shape + "--precision bf16"),
                 "only dot has a bf16 mode; multihead runs in fp32");
  ExpectBadInput(Run(shape + "--hidden 8"), "--hidden");
  ExpectBadInput(Run(shape + "--softcap -2"), "--softcap is '-2'; want a finite number >= 0");
  ExpectBadInput(Run(shape + "--softcap nan"), "--softcap is 'nan'; want a finite number >= 0");
  ExpectBadInput(Run(shape + "--module --softcap 2"), "--softcap is for the op and --decode");
  r = Run("bench multihead --batch 2 --queries 1 --keys 40 --decode --softcap 3 --repeat 2 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\"softcap\": 3"), std::string::npos) << r.out;
  r = Run(shape + "--softcap 2.5 --repeat 2 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\"softcap\": 2.5"), std::string::npos) << r.out;
  r = Run(shape + "--softcap 2.5 --repeat 2");  // the cap named on the first line
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find(" causal none softcap 2.500000 valid-lens "), std::string::npos) << r.out;
  // The sliding window: each side from -1 (unbounded); the decode's left side alone.
  ExpectBadInput(Run(shape + "--window-left -2"), "--window-left is -2");
  ExpectBadInput(Run(shape + "--window-right x"), "--window-right");
  ExpectBadInput(Run(shape + "--decode --window-right 3"),
                 "--window-right is for the op: a cache's queries see no key past their own");
  ExpectBadInput(Run(shape + "--module --window-right 0"),
                 "--window-left and --window-right are for the op");
  r = Run(shape + "--window-left 1 --window-right 0 --repeat 2 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\"window_left\": 1, \"window_right\": 0"), std::string::npos) << r.out;
  r = Run(shape + "--window-left 1 --repeat 2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find(" causal none window (1, -1) valid-lens "), std::string::npos) << r.out;
  // Sinks: one logit for every head, the op's and the decode's.
  ExpectBadInput(Run(shape + "--sinks nan"), "--sinks is 'nan'; want a number (a logit)");
  ExpectBadInput(Run(shape + "--module --sinks 1"), "--sinks is for the op and --decode");
  r = Run(shape + "--decode --sinks 1.5 --repeat 2 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\"sinks\": 1.5"), std::string::npos) << r.out;
  r = Run(shape + "--sinks -2 --repeat 2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find(" causal none sinks -2.000000 valid-lens "), std::string::npos) << r.out;
  // ALiBi with BLOOM's slopes and a random bias, the op's and the decode's.
  ExpectBadInput(Run(shape + "--module --alibi"), "--alibi is for the op and --decode");
  ExpectBadInput(Run(shape + "--module --random-bias"), "--random-bias is for the op and --decode");
  r = Run(shape + "--alibi --random-bias --repeat 2 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\"alibi\": true, \"random_bias\": true"), std::string::npos) << r.out;
  r = Run(shape + "--decode --window-left 3 --alibi --random-bias --repeat 2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find(" alibi random-bias window (3, -1) "), std::string::npos) << r.out;
}

// run --info prints info after the outputs are written; the softmax makes
// no matmul. A failed run prints no info.
TEST_F(CliTest, RunInfoFollowsTheRun) {
  const std::string y = Temp("y.npy");
  Result r = Run(SoftmaxArgs(y) + " --info");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(fs::exists(y));
  EXPECT_EQ(r.out.rfind("attnscore " ATTNSCORE_VERSION_STRING "\n", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("onednn matmuls: none created yet\n"), std::string::npos) << r.out;
  r = Run("run softmax --x " + Temp("missing.npy") + " --out " + Temp("z.npy") + " --info");
  ExpectBadInput(r, "missing.npy", Temp("z.npy"));
  EXPECT_TRUE(r.out.empty()) << r.out;
}

TEST_F(CliTest, UsageErrors) {
  ExpectBadInput(Run("frobnicate"), "unknown command 'frobnicate'");
  ExpectBadInput(Run("run"), "run wants an op");
  ExpectBadInput(Run("run attn --out x.npy"),
                 "run wants an op: softmax, dot, multihead_attention, multihead_attention_packed, "
                 "kv_cache_attend, kv_cache_step, additive, concat, "
                 "bilinear or multihead, got 'attn'");
  ExpectBadInput(Run("run concat --queries q.npy --keys k.npy --values v.npy --out x.npy"),
                 "'run concat' needs --model");
  ExpectBadInput(Run("run additive --queries q.npy --keys k.npy --values v.npy --out x.npy"),
                 "'run additive' needs --model");
  ExpectBadInput(Run("run softmax --x a.npy"), "'run softmax' needs --out");
  ExpectBadInput(Run("run softmax --x a.npy --out b.npy --bogus 1"), "unknown flag --bogus");
  ExpectBadInput(Run("run softmax --x a.npy --x b.npy --out c.npy"), "--x is given twice");
  ExpectBadInput(Run("run softmax --x a.npy --out"), "--out needs a value");
  ExpectBadInput(Run(SoftmaxArgs(Temp("y.npy")) + " --threads 0"), "--threads is 0", Temp("y.npy"));
  ExpectBadInput(Run(SoftmaxArgs(Temp("y.npy")) + " --threads two"), "--threads wants an integer");
  ExpectBadInput(Run(SoftmaxArgs(Temp("y.npy")) + " --isa avx9000"), "--isa is 'avx9000'");
  ExpectBadInput(Run(SoftmaxArgs(Temp("y.npy")), "ATTNSCORE_ISA=bogus"), "ATTNSCORE_ISA is 'bogus'");
  ExpectBadInput(Run("bench softmax --queries 3 --keys 4"), "'bench softmax' needs --batch");
  ExpectBadInput(Run("bench attn --batch 1 --queries 3 --keys 4"), "bench wants an op");
  ExpectBadInput(Run("bench concat --batch 1 --queries 3 --keys 4 --out-dim 0"), "--out-dim is 0");
  ExpectBadInput(Run("bench dot --batch 1 --queries 3 --keys 4 --valid-lens sometimes"),
                 "--valid-lens is 'sometimes'");
  ExpectBadInput(Run("bench dot --batch 0 --queries 3 --keys 4"), "--batch is 0");
  ExpectBadInput(Run("bench dot --batch +2 --queries 3 --keys 4"), "--batch wants an integer");
  ExpectBadInput(Run("bench dot --batch 1048576 --queries 1048576 --keys 4"), "bench queries would need");
  ExpectBadInput(Run("info extra"), "unexpected argument 'extra'");
  ExpectBadInput(Run("bench softmax --batch 1 --queries 2 --keys 3 --weights"),
                 "unknown flag --weights for 'bench softmax'");
  ExpectBadInput(Run("bench dot --batch 1 --queries 2 --keys 3 --hidden 4"),
                 "unknown flag --hidden for 'bench dot'");
  ExpectBadInput(Run("bench additive --batch 1 --queries 2 --keys 3 --hidden 0"), "--hidden is 0");
}

TEST_F(CliTest, BadFilesLeaveNoOutput) {
  const std::string out = Temp("out.npy");
  const std::string text = Temp("text.npy");
  std::ofstream(text) << "not numpy at all";
  std::vector<int64_t> bad_lens = {2, -1};
  ASSERT_TRUE(npy::WriteNpy(Temp("neg.npy"), npy::DType::kInt64, {2}, bad_lens.data()).ok());
  std::vector<float> float_lens = {2, 3};
  ASSERT_TRUE(npy::WriteNpy(Temp("flens.npy"), npy::DType::kFloat32, {2}, float_lens.data()).ok());
  const std::string x = Golden("softmax_seed_per_batch", "x");

  ExpectBadInput(Run("run softmax --x " + Temp("missing.npy") + " --out " + out), "missing.npy", out);
  ExpectBadInput(Run("run softmax --x " + text + " --out " + out), "text.npy", out);
  ExpectBadInput(Run("run softmax --x " + Golden("softmax_seed_per_batch", "valid_lens") +
                     " --out " + out), "dtype is int64; want float32", out);
  ExpectBadInput(Run("run softmax --x " + std::string(ATTNSCORE_GOLDEN_DIR) +
                     "/npy/f32_2x3.npy --out " + out), "shape (2, 3) has rank 2; want rank 3", out);
  ExpectBadInput(Run("run softmax --x " + x + " --valid-lens " + Temp("neg.npy") + " --out " + out),
                 "valid_lens[1] is -1", out);
  ExpectBadInput(Run("run softmax --x " + x + " --valid-lens " + Temp("flens.npy") + " --out " + out),
                 "want int32 or int64", out);
  ExpectBadInput(Run("run softmax --x " + x + " --valid-lens " + x + " --out " + out),
                 "want int32 or int64", out);
  ExpectBadInput(Run("run softmax --x " + x + " --out " + Temp("no/such/dir/y.npy")), "--out");
  // keys from another case: D differs from the queries'.
  ExpectBadInput(Run("run dot --queries " + Golden("dot_toy", "queries") + " --keys " +
                     Golden("dot_no_lens", "keys") + " --values " + Golden("dot_toy", "values") +
                     " --out " + out),
                 "keys has shape (2, 9, 16)", out);
  // The weights cannot be written: the output written first is removed too.
  ExpectBadInput(Run(DotArgs("dot_toy", out) + " --weights-out " + Temp("no/dir/w.npy")),
                 "--weights-out", out);
  ExpectBadInput(Run(DotArgs("dot_toy", out) + " --weights-out " + out), "name the same file", out);
  ExpectBadInput(Run(DotArgs("dot_toy", out) + " --weights-out " + dir_.string() + "/./out.npy"),
                 "name the same file", out);
  // A directory as an output: refused before anything is written.
  ExpectBadInput(Run(DotArgs("dot_toy", out) + " --weights-out " + dir_.string()), "is a directory",
                 out);
  for (const auto& entry : fs::directory_iterator(dir_)) {
    EXPECT_EQ(entry.path().string().find("partial"), std::string::npos) << entry.path();
  }
}

TEST_F(CliTest, FailedRunLeavesAnExistingOutputAlone) {
  const std::string out = Temp("keep.npy");
  std::ofstream(out) << "precious";
  ExpectBadInput(Run(DotArgs("dot_toy", out) + " --weights-out " + Temp("no/dir/w.npy")),
                 "--weights-out");
  EXPECT_EQ(Slurp(out), "precious");
}

TEST_F(CliTest, HugeOutputsAreRefusedBeforeAllocating) {
  // Inputs of 768 KB whose weights would be (1, 65536, 65536): 16 GiB.
  std::vector<float> tall(65536, 1.0f);
  for (const char* name : {"q.npy", "k.npy", "v.npy"}) {
    ASSERT_TRUE(npy::WriteNpy(Temp(name), npy::DType::kFloat32, {1, 65536, 1}, tall.data()).ok());
  }
  ExpectBadInput(Run("run dot --queries " + Temp("q.npy") + " --keys " + Temp("k.npy") +
                     " --values " + Temp("v.npy") + " --out " + Temp("o.npy") + " --weights-out " +
                     Temp("w.npy")),
                 "--weights-out would need more than 2^31 floats", Temp("o.npy"));
}

}  // namespace
}  // namespace attnscore::test
