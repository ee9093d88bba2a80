// The seeds' toy calls in the steady state: after a warm-up call, the engine
// makes no C++ heap allocation (operator new; malloc from C code such as
// oneDNN or libgomp is not counted, and the toys call neither). Its own
// binary, because it replaces the global allocation functions with counting
// ones. On 2 threads the toys stay on the caller's thread (internal::ThreadsFor).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "attnscore/attnscore.h"
#include "test_util.h"

namespace {
std::atomic<int64_t> allocations{0};

void* Counted(std::size_t size, std::size_t alignment) {
  allocations.fetch_add(1, std::memory_order_relaxed);
  size = size == 0 ? 1 : size;
  void* p = alignment <= alignof(std::max_align_t)
                ? std::malloc(size)
                : std::aligned_alloc(alignment, (size + alignment - 1) / alignment * alignment);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
}  // namespace

// Every replaceable form of operator new counts; delete only frees.
void* operator new(std::size_t size) { return Counted(size, 0); }
void* operator new[](std::size_t size) { return Counted(size, 0); }
void* operator new(std::size_t size, std::align_val_t a) {
  return Counted(size, static_cast<std::size_t>(a));
}
void* operator new[](std::size_t size, std::align_val_t a) {
  return Counted(size, static_cast<std::size_t>(a));
}
void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
  try {
    return Counted(size, 0);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t size, const std::nothrow_t&) noexcept {
  try {
    return Counted(size, 0);
  } catch (...) {
    return nullptr;
  }
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }

namespace attnscore::test {
namespace {

constexpr int kCalls = 1000;

// Allocations made by `calls` runs of call(), after one warm-up run.
template <class Call>
int64_t AllocationsInSteadyState(Call call) {
  call();
  const int64_t before = allocations.load();
  for (int i = 0; i < kCalls; ++i) call();
  return allocations.load() - before;
}

std::unique_ptr<Engine> EngineWith(int threads) {
  EngineOptions options;
  options.threads = threads;
  std::unique_ptr<Engine> engine;
  const Status s = Engine::Create(options, &engine);
  EXPECT_TRUE(s.ok()) << s.message();
  return engine;
}

class SmallCalls : public ::testing::TestWithParam<int> {};
INSTANTIATE_TEST_SUITE_P(Threads, SmallCalls, ::testing::Values(1, 2),
                         [](const auto& info) { return std::to_string(info.param) + "_threads"; });

TEST_P(SmallCalls, DotProductToyAllocatesNothing) {
  const std::unique_ptr<Engine> engine = EngineWith(GetParam());
  GoldenAttention g;
  LoadGoldenAttention("dot_toy", &g);
  const int64_t b = g.queries.shape[0], n = g.queries.shape[1], m = g.keys.shape[1],
                d = g.queries.shape[2], dv = g.values.shape[2];
  std::vector<float> out(static_cast<size_t>(b * n * dv)), weights(static_cast<size_t>(b * n * m));
  for (bool with_weights : {false, true}) {
    SCOPED_TRACE(with_weights ? "with weights" : "without weights");
    Status status;
    const int64_t count = AllocationsInSteadyState([&] {
      status = engine->DotProductAttention(
          ConstTensor(g.queries.data<float>(), {b, n, d}), ConstTensor(g.keys.data<float>(), {b, m, d}),
          ConstTensor(g.values.data<float>(), {b, m, dv}), g.lens, Tensor(out.data(), {b, n, dv}),
          with_weights ? Tensor(weights.data(), {b, n, m}) : Tensor());
    });
    ASSERT_TRUE(status.ok()) << status.message();
    EXPECT_EQ(count, 0) << "allocations in " << kCalls << " calls";
    if (with_weights) ExpectMatchesGolden(g, out, weights);
  }
}

TEST_P(SmallCalls, AdditiveToyAllocatesNothing) {
  const std::unique_ptr<Engine> engine = EngineWith(GetParam());
  std::unique_ptr<AdditiveAttention> model;
  const Status loaded =
      AdditiveAttention::Load(std::string(ATTNSCORE_GOLDEN_DIR) + "/additive_toy/model.safetensors", &model);
  ASSERT_TRUE(loaded.ok()) << loaded.message();
  GoldenAttention g;
  LoadGoldenAttention("additive_toy", &g);
  const int64_t b = g.queries.shape[0], n = g.queries.shape[1], m = g.keys.shape[1],
                dv = g.values.shape[2];
  std::vector<float> out(static_cast<size_t>(b * n * dv)), weights(static_cast<size_t>(b * n * m));
  for (bool with_weights : {false, true}) {
    SCOPED_TRACE(with_weights ? "with weights" : "without weights");
    Status status;
    const int64_t count = AllocationsInSteadyState([&] {
      status = model->Forward(*engine, ConstTensor(g.queries.data<float>(), {b, n, g.queries.shape[2]}),
                              ConstTensor(g.keys.data<float>(), {b, m, g.keys.shape[2]}),
                              ConstTensor(g.values.data<float>(), {b, m, dv}), g.lens,
                              Tensor(out.data(), {b, n, dv}),
                              with_weights ? Tensor(weights.data(), {b, n, m}) : Tensor());
    });
    ASSERT_TRUE(status.ok()) << status.message();
    EXPECT_EQ(count, 0) << "allocations in " << kCalls << " calls";
    if (with_weights) ExpectMatchesGolden(g, out, weights);
  }
}

// The counter itself works: without it, a zero above proves nothing.
// (Direct calls: a new/delete pair in an expression may be optimised away.)
TEST(CountingAllocator, CountsAllocations) {
  const int64_t before = allocations.load();
  void* p = ::operator new(16);
  ::operator delete(p);
  EXPECT_EQ(allocations.load() - before, 1);
}

}  // namespace
}  // namespace attnscore::test
