// Engine creation: options, the process-wide ISA cap, the runtime report.
#include <fenv.h>
#include <omp.h>
#include <sys/resource.h>
#include <xmmintrin.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <string>

#include "api/isa.h"
#include "base/valid_lens.h"
#include "base/workspace.h"
#include "test_util.h"

namespace attnscore::test {
namespace {

TEST(Engine, RejectsBadThreadCount) {
  EngineOptions options;
  options.threads = 0;
  std::unique_ptr<Engine> engine;
  const Status s = Engine::Create(options, &engine);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("threads is 0"), std::string::npos) << s.message();
  EXPECT_EQ(engine, nullptr);
}

TEST(Engine, RejectsThreadsAboveTheMaximum) {
  for (const int threads : {kMaxThreads + 1, 5000, std::numeric_limits<int>::max()}) {
    EngineOptions options;
    options.threads = threads;
    std::unique_ptr<Engine> engine;
    const Status s = Engine::Create(options, &engine);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << threads;
    EXPECT_NE(s.message().find("threads is " + std::to_string(threads)), std::string::npos)
        << s.message();
    EXPECT_EQ(engine, nullptr);
  }
}

// Creates a 64-thread engine with ~64 MiB of address space left above what
// is mapped now, too little for 64 threads with 8 MiB stacks; prints the
// Status and returns 0 when Create refused with Unsupported.
int CreateWithoutRoomForThreads() {
  long pages = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld", &pages) != 1) pages = 0;
    std::fclose(f);
  }
  const rlim_t limit = static_cast<rlim_t>(pages) * 4096 + (rlim_t{64} << 20);
  const rlimit address_space{limit, limit};
  setrlimit(RLIMIT_AS, &address_space);
  EngineOptions options;
  options.threads = 64;
  std::unique_ptr<Engine> engine;
  const Status s = Engine::Create(options, &engine);
  std::fprintf(stderr, "%s\n", s.message().c_str());
  return s.code() == StatusCode::kUnsupported && engine == nullptr ? 0 : 3;
}

// Where the system cannot start the threads, Create says so; OpenMP itself
// would end the process at the first call instead. Run in a child process.
TEST(Engine, ThreadsThatCannotStartGiveAStatusNotAnExit) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "a sanitizer's runtime needs more address space than the limit leaves";
#endif
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(std::exit(CreateWithoutRoomForThreads()), ::testing::ExitedWithCode(0),
              "cannot start 64 threads");
}

TEST(Engine, RejectsEnumValuesOutsideTheirEnums) {
  EngineOptions options;
  options.isa = static_cast<Isa>(99);
  std::unique_ptr<Engine> engine;
  Status s = Engine::Create(options, &engine);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("isa is 99"), std::string::npos) << s.message();
  options.isa = static_cast<Isa>(-1);
  EXPECT_EQ(Engine::Create(options, &engine).code(), StatusCode::kInvalidArgument);
  options = EngineOptions();
  options.precision = static_cast<Precision>(2);
  EXPECT_EQ(Engine::Create(options, &engine).code(), StatusCode::kInvalidArgument);
  // The refused values fixed nothing: the default engine still comes up.
  EXPECT_TRUE(Engine::Create(EngineOptions(), &engine).ok());
  EXPECT_NE(std::string(IsaName(engine->options().isa)), "unknown");
}

// The Check methods make the op's own input checks: the same shapes the op
// wants, and the same message for bad input, with nothing allocated.
TEST(Engine, CheckReportsOutputShapesAndTheOpsOwnErrors) {
  const std::vector<float> q = RandomFloats(2 * 3 * 4, 1), k = RandomFloats(2 * 5 * 4, 2),
                           v = RandomFloats(2 * 5 * 6, 3);
  const ConstTensor qv(q.data(), {2, 3, 4}), kv(k.data(), {2, 5, 4}), vv(v.data(), {2, 5, 6});
  const int64_t lens[] = {2, 9};
  const Engine& engine = DefaultEngine();
  OutputShapes shapes;
  ASSERT_TRUE(
      engine.CheckDotProductAttention(qv, kv, vv, ValidLens::PerBatch(lens, 2), &shapes).ok());
  EXPECT_EQ(shapes.out, (std::array<int64_t, 3>{2, 3, 6}));
  EXPECT_EQ(shapes.attention_weights, (std::array<int64_t, 3>{2, 3, 5}));
  ASSERT_TRUE(engine.CheckMaskedSoftmax(kv, ValidLens::None(), &shapes).ok());
  EXPECT_EQ(shapes.out, (std::array<int64_t, 3>{2, 5, 4}));
  EXPECT_EQ(shapes.attention_weights, shapes.out);

  std::vector<float> out(2 * 3 * 6);
  const int64_t negative[] = {2, -1};
  const ConstTensor short_v(v.data(), {2, 4, 6});
  const struct {
    ConstTensor values;
    ValidLens lens;
  } bad[] = {{short_v, ValidLens::None()}, {vv, ValidLens::PerBatch(negative, 2)},
             {vv, ValidLens::PerBatch(lens, 1)}, {ConstTensor(nullptr, {2, 5, 6}), ValidLens::None()}};
  for (const auto& c : bad) {
    const Status checked = engine.CheckDotProductAttention(qv, kv, c.values, c.lens, &shapes);
    const Status ran =
        engine.DotProductAttention(qv, kv, c.values, c.lens, Tensor(out.data(), {2, 3, 6}));
    EXPECT_EQ(checked.code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(checked.message(), ran.message());
  }
  EXPECT_EQ(engine.CheckDotProductAttention(qv, kv, vv, ValidLens::None(), nullptr).code(),
            StatusCode::kInvalidArgument);
}

TEST(Engine, CreateRejectsANullOutput) {
  const Status s = Engine::Create(EngineOptions(), nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("engine is null"), std::string::npos) << s.message();
}

// Sets $ATTNSCORE_ISA (unset for null) while alive; puts the old value back.
class ScopedIsaEnv {
 public:
  explicit ScopedIsaEnv(const char* value) {
    if (const char* old = std::getenv("ATTNSCORE_ISA")) old_ = old, had_ = true;
    if (value) setenv("ATTNSCORE_ISA", value, 1); else unsetenv("ATTNSCORE_ISA");
  }
  ~ScopedIsaEnv() {
    if (had_) setenv("ATTNSCORE_ISA", old_.c_str(), 1); else unsetenv("ATTNSCORE_ISA");
  }

 private:
  std::string old_;
  bool had_ = false;
};

TEST(Engine, BestYieldsToTheEnvironmentAndAnExplicitCapDoesNot) {
  Isa isa;
  {
    ScopedIsaEnv env("avx2");
    ASSERT_TRUE(internal::ResolveIsa(Isa::kBest, &isa).ok());
    EXPECT_EQ(isa, Isa::kAvx2);
    ASSERT_TRUE(internal::ResolveIsa(Isa::kSse4, &isa).ok());
    EXPECT_EQ(isa, Isa::kSse4);
  }
  {
    ScopedIsaEnv env(nullptr);
    ASSERT_TRUE(internal::ResolveIsa(Isa::kBest, &isa).ok());
    EXPECT_EQ(isa, Isa::kBest);
  }
  {
    ScopedIsaEnv env("");
    ASSERT_TRUE(internal::ResolveIsa(Isa::kBest, &isa).ok());
    EXPECT_EQ(isa, Isa::kBest);
  }
  {
    ScopedIsaEnv env("avx1024");
    const Status s = internal::ResolveIsa(Isa::kBest, &isa);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("ATTNSCORE_ISA is 'avx1024'"), std::string::npos) << s.message();
    std::unique_ptr<Engine> engine;
    EXPECT_EQ(Engine::Create(EngineOptions(), &engine).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(engine, nullptr);
  }
}

TEST(Engine, IsaCapCannotChangeOnceSet) {
  // The cap was fixed by the first engine: "best", or $ATTNSCORE_ISA.
  const Isa applied = DefaultEngine().options().isa;
  EngineOptions options;
  options.isa = applied == Isa::kScalar ? Isa::kSse4 : Isa::kScalar;
  std::unique_ptr<Engine> engine;
  const Status s = Engine::Create(options, &engine);
  EXPECT_EQ(s.code(), StatusCode::kUnsupported);
  EXPECT_NE(s.message().find(std::string("already '") + IsaName(applied) + "'"),
            std::string::npos) << s.message();
  options.isa = applied;
  EXPECT_TRUE(Engine::Create(options, &engine).ok());
}

TEST(Engine, CallsRestoreTheCallersFloatingPointModeAndThreads) {
  // The caller traps invalid operations and runs 3 OpenMP threads; a row with
  // -Inf among its valid scores makes the kernel compute Inf * 0 internally.
  const float x[] = {1.0f, -std::numeric_limits<float>::infinity(), 2.0f, 5.0f};
  float y[4];
  const int64_t lens[] = {3};
  omp_set_num_threads(3);
  feclearexcept(FE_ALL_EXCEPT);
  feenableexcept(FE_INVALID);
  const unsigned before = _mm_getcsr();
  const Status s = DefaultEngine().MaskedSoftmax(ConstTensor(x, {1, 1, 4}),
                                                 ValidLens::PerBatch(lens, 1), Tensor(y, {1, 1, 4}));
  const unsigned after = _mm_getcsr();
  fedisableexcept(FE_INVALID);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(before & ~0x3Fu, after & ~0x3Fu) << "MXCSR modes and masks restored";
  EXPECT_EQ(omp_get_max_threads(), 3);
  EXPECT_EQ(y[1], 0.0f);
  EXPECT_NEAR(y[0] + y[2], 1.0f, 1e-6f);
  omp_set_num_threads(1);
}

TEST(Engine, ResultsDoNotDependOnTheCallersRoundingMode) {
  const std::vector<float> x = RandomFloats(3 * 64, 5, 2.0f);
  std::vector<float> nearest(x.size()), upward(x.size());
  const auto run = [&](std::vector<float>* y) {
    ASSERT_TRUE(DefaultEngine()
                    .MaskedSoftmax(ConstTensor(x.data(), {3, 1, 64}), ValidLens::None(),
                                   Tensor(y->data(), {3, 1, 64}))
                    .ok());
  };
  run(&nearest);
  for (int mode : {FE_UPWARD, FE_DOWNWARD, FE_TOWARDZERO}) {
    fesetround(mode);
    run(&upward);
    const int after = fegetround();
    fesetround(FE_TONEAREST);
    EXPECT_EQ(after, mode) << "the caller's rounding mode is restored";
    EXPECT_EQ(nearest, upward) << "rounding mode " << mode;
  }
}

TEST(Engine, IsaNamesRoundTrip) {
  for (Isa isa : {Isa::kScalar, Isa::kSse4, Isa::kAvx2, Isa::kAvx512, Isa::kBest}) {
    Isa parsed;
    ASSERT_TRUE(ParseIsa(IsaName(isa), &parsed));
    EXPECT_EQ(parsed, isa);
  }
  Isa parsed;
  EXPECT_FALSE(ParseIsa("avx1024", &parsed));
}

TEST(Engine, DescribeNamesTargetsAndOnednn) {
  const std::string text = DefaultEngine().Describe();
  EXPECT_NE(text.find("highway targets on this cpu:"), std::string::npos) << text;
  EXPECT_NE(text.find("onednn version: 2."), std::string::npos) << text;
  EXPECT_NE(text.find("threads: 1"), std::string::npos) << text;
}

// Info: the targets the CPU has, those the cap allows among them, the one in
// use among those; and every oneDNN matmul a call made, with its runs.
TEST(Engine, InfoReportsTargetsAndTheMatmulsOfACall) {
  // In bf16, 8 queries take the oneDNN path (fp32 runs the tile kernels).
  EngineOptions options;
  options.precision = Precision::kBf16;
  std::unique_ptr<Engine> bf16;
  ASSERT_TRUE(Engine::Create(options, &bf16).ok());
  const Engine& engine = *bf16;
  const int64_t b = 2, n = 8, m = 40, d = 16;
  const std::vector<float> q = RandomFloats(b * n * d, 1), k = RandomFloats(b * m * d, 2),
                           v = RandomFloats(b * m * d, 3);
  std::vector<float> out(b * n * d);
  ASSERT_TRUE(engine
                  .DotProductAttention(ConstTensor(q.data(), {b, n, d}),
                                       ConstTensor(k.data(), {b, m, d}),
                                       ConstTensor(v.data(), {b, m, d}), ValidLens::None(),
                                       Tensor(out.data(), {b, n, d}))
                  .ok());
  const RuntimeInfo info = engine.Info();
  ASSERT_FALSE(info.cpu_targets.empty());
  ASSERT_FALSE(info.allowed_targets.empty());
  const auto has = [](const std::vector<std::string>& names, const std::string& name) {
    return std::find(names.begin(), names.end(), name) != names.end();
  };
  for (const std::string& target : info.allowed_targets) {
    EXPECT_TRUE(has(info.cpu_targets, target) || target == "EMU128" || target == "SCALAR") << target;
  }
  EXPECT_TRUE(has(info.allowed_targets, info.target_in_use)) << info.target_in_use;
  EXPECT_EQ(info.onednn_version.rfind("2.", 0), 0u) << info.onednn_version;
  EXPECT_FALSE(info.onednn_isa.empty());
  EXPECT_EQ(info.options.threads, 1);
  // Q Kᵀ of each entry (at least one run per entry, of this call alone).
  const std::string scores = "(8 x 16) . (16 x 40), scaled";
  const auto made = std::find_if(info.matmuls.begin(), info.matmuls.end(), [&](const MatmulInfo& p) {
    return p.problem.find(scores) != std::string::npos;
  });
  ASSERT_TRUE(made != info.matmuls.end()) << engine.Describe();
  EXPECT_GE(made->runs, 2);
  EXPECT_FALSE(made->implementation.empty());
  EXPECT_NE(engine.Describe().find(made->problem + ": " + made->implementation), std::string::npos);
}

// Lengths resolved once per call: clamped to [0, M], int32 and int64 alike,
// and each entry's widths: its longest length, and all M keys for W V when
// one of its queries has L = 0.
TEST(Engine, ValidLengthsResolveToRowsAndEntryWidths) {
  DirectCall resolver;
  const int64_t batch = 3, queries = 2, keys = 5;
  const int32_t per_query[] = {1, 7, 0, 3, 4, 2};
  internal::RowLengths lens;
  ASSERT_TRUE(internal::RowLengths::Resolve(ValidLens::PerQuery(per_query, batch, queries), batch,
                                            queries, keys, resolver.workspace(), &lens)
                  .ok());
  const int64_t want_rows[] = {1, 5, 0, 3, 4, 2};
  for (int64_t r = 0; r < batch * queries; ++r) {
    EXPECT_EQ(lens.row(r / queries, r % queries), want_rows[r]) << "row " << r;
  }
  EXPECT_EQ(lens.entry(0).longest, 5);
  EXPECT_EQ(lens.entry(0).mix, 5);
  EXPECT_EQ(lens.entry(1).longest, 3);
  EXPECT_EQ(lens.entry(1).mix, keys);  // a query with L = 0 weighs all M keys
  EXPECT_EQ(lens.entry(2).longest, 4);
  EXPECT_EQ(lens.entry(2).mix, 4);

  const int64_t per_batch[] = {0, 9, 2};
  ASSERT_TRUE(internal::RowLengths::Resolve(ValidLens::PerBatch(per_batch, batch), batch, queries,
                                            keys, resolver.workspace(), &lens)
                  .ok());
  const int64_t want_batch[] = {0, 0, 5, 5, 2, 2};
  for (int64_t r = 0; r < batch * queries; ++r) {
    EXPECT_EQ(lens.row(r / queries, r % queries), want_batch[r]) << "row " << r;
  }
  EXPECT_EQ(lens.entry(0).longest, 0);
  EXPECT_EQ(lens.entry(0).mix, keys);

  ASSERT_TRUE(internal::RowLengths::Resolve(ValidLens::None(), batch, queries, keys,
                                            resolver.workspace(), &lens)
                  .ok());
  for (int64_t r = 0; r < batch * queries; ++r) EXPECT_EQ(lens.row(r / queries, r % queries), keys);
  EXPECT_EQ(lens.entry(2).longest, keys);
}

// A workspace's buffers start on a cache line whatever they grew from, keep
// their contents while they do not grow, and each slot is its own buffer;
// each thread of the team has buffers of its own, and the caller's are
// thread 0's.
TEST(Engine, WorkspaceBuffersAreLineAlignedAndStable) {
  DirectCall direct(EngineOptions{.threads = 2});
  internal::Workspace& workspace = direct.workspace();
  for (size_t count : {size_t{1}, size_t{3}, size_t{17}, size_t{1000}, size_t{12345}}) {
    float* a = workspace.Floats(internal::ScratchSlot::kRowBuffer, count);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 64, 0u) << "count=" << count;
    a[count - 1] = 7.0f;
    EXPECT_EQ(workspace.Floats(internal::ScratchSlot::kRowBuffer, count), a);
    EXPECT_EQ(workspace.Floats(internal::ScratchSlot::kRowBuffer, 1), a);  // no smaller buffer
    EXPECT_EQ(a[count - 1], 7.0f);
  }
  float* other = workspace.Floats(internal::ScratchSlot::kWorkspace, 16);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(other) % 64, 0u);
  EXPECT_NE(other, workspace.Floats(internal::ScratchSlot::kRowBuffer, 16));
  float* caller = workspace.Floats(internal::ScratchSlot::kRowTask, 8);
  float* team[2] = {nullptr, nullptr};
  auto work = [&](int t) { team[t] = workspace.Floats(internal::ScratchSlot::kRowTask, 8); };
  ASSERT_TRUE(workspace.team()->TryRun(2, work));
  EXPECT_EQ(team[0], caller);
  if (team[1] != nullptr) {
    EXPECT_NE(team[1], caller);  // the worker joined: its own buffer
  }
}

// What an engine keeps between calls is its workspaces' memory: none before
// its first call, some after one, and no more than a call's worth of
// trimmed buffers after a huge call.
TEST(Engine, InfoReportsTheWorkspaceBytesHeldBetweenCalls) {
  std::unique_ptr<Engine> engine = EngineWithThreads(1);
  EXPECT_EQ(engine->Info().workspace_bytes, 0);
  const int64_t b = 1, n = 512, m = 4096;
  const std::vector<float> x = RandomFloats(static_cast<size_t>(b * n * m), 3);
  std::vector<float> y(x.size());
  ASSERT_TRUE(engine
                  ->MaskedSoftmax(ConstTensor(x.data(), {b, n, m}), ValidLens::None(),
                                  Tensor(y.data(), {b, n, m}))
                  .ok());
  const int64_t held = engine->Info().workspace_bytes;
  EXPECT_GT(held, 0);
  EXPECT_LE(held, static_cast<int64_t>(internal::kKeptScratchBytes) *
                      static_cast<int64_t>(internal::ScratchSlot::kCount));
  EXPECT_NE(engine->Describe().find("workspace bytes held: " + std::to_string(held) + "\n"),
            std::string::npos);
}

// Scratch past kKeptScratchBytes stays between calls only while calls in a
// row ask for it: a one-off large call gives it back as it ends, the second
// of two keeps it (its pages are not mapped and faulted in again), and a
// small call after them gives it back.
TEST(Engine, KeepsLargeScratchOnlyWhileCallsInARowAskForIt) {
  std::unique_ptr<Engine> engine = EngineWithThreads(1);
  const int64_t kept_small = static_cast<int64_t>(internal::kKeptScratchBytes) *
                             static_cast<int64_t>(internal::ScratchSlot::kCount);
  const int64_t m = int64_t{1} << 20;  // the row path's scratch: 4 MiB to 64 MiB
  const std::vector<float> q = RandomFloats(2, 5), k = RandomFloats(m, 6), v = RandomFloats(m, 7);
  std::vector<float> out(2);
  const auto large_call = [&] {
    ASSERT_TRUE(engine
                    ->DotProductAttention(ConstTensor(q.data(), {1, 2, 1}),
                                          ConstTensor(k.data(), {1, m, 1}),
                                          ConstTensor(v.data(), {1, m, 1}), ValidLens::None(),
                                          Tensor(out.data(), {1, 2, 1}))
                    .ok());
  };
  large_call();
  EXPECT_LE(engine->Info().workspace_bytes, kept_small);
  large_call();
  const int64_t kept_large = engine->Info().workspace_bytes;
  EXPECT_GT(kept_large, static_cast<int64_t>(internal::kKeptScratchBytes));
  EXPECT_LE(kept_large, kept_small + static_cast<int64_t>(internal::kKeptRepeatedBytes));
  large_call();
  EXPECT_EQ(engine->Info().workspace_bytes, kept_large);
  const std::vector<float> x = RandomFloats(2 * 3 * 4, 8);
  std::vector<float> y(x.size());
  ASSERT_TRUE(engine
                  ->MaskedSoftmax(ConstTensor(x.data(), {2, 3, 4}), ValidLens::None(),
                                  Tensor(y.data(), {2, 3, 4}))
                  .ok());
  EXPECT_LE(engine->Info().workspace_bytes, kept_small);
}

}  // namespace
}  // namespace attnscore::test
