// The multi-head op's sliding window (docs/semantics.md section 5.4): query
// i at p = i + M - N sees keys p - left <= j <= p + right. Against float64
// math written from that definition, outputs and weights, on every path the
// op takes (the grouped row path over whole rows and key blocks, the
// windowed prefill's blocks of queries), with each kind of lengths and each
// causal mask, with a soft cap, over heads-first views and in bf16 mode;
// rows the window leaves no key; keys and values outside a query's window
// never reaching it (NaN there); the same bits for any thread count; the
// refusals.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "multihead_cases.h"
#include "test_util.h"

namespace attnscore::test {
namespace {

class MultiHeadWindowTest : public PerTarget {};
ATTNSCORE_INSTANTIATE_PER_TARGET(MultiHeadWindowTest);

std::string WindowName(const Form& form) {
  return "window (" + std::to_string(form.window_left) + ", " + std::to_string(form.window_right) +
         ")";
}

void ExpectReference(const Engine& engine, const Shape& s, const Inputs& in,
                     const std::vector<int64_t>& lens, bool per_query, const Form& form) {
  SCOPED_TRACE(WindowName(form));
  ExpectMatchesReference(engine, s, in, lens, per_query, form);
}

// Windows narrow and wide, one-sided and two-sided; (0, 0) sees one key.
const std::vector<std::pair<int64_t, int64_t>> kWindows = {{0, 0},  {3, -1}, {5, 2},
                                                           {-1, 4}, {40, 0}, {150, 9}};

TEST_P(MultiHeadWindowTest, MatchesTheReferenceOnEveryPathLengthKindAndMask) {
  // N = 1 and 3: the grouped row path (M 3,000: its keys cut into blocks);
  // N = 9, 70 and 300: the windowed prefill (300 in three query blocks).
  const std::vector<Shape> shapes = {{2, 1, 11, 4, 4, 16, 5},    {2, 3, 40, 8, 2, 16, 16},
                                     {1, 2, 3000, 2, 1, 64, 16}, {2, 9, 13, 4, 2, 16, 8},
                                     {1, 70, 70, 2, 1, 16, 4},   {1, 300, 320, 2, 2, 16, 8}};
  ForEachShapeLengthKindAndMask(
      shapes, 500,
      [](const Shape& s, const Inputs& in, const std::vector<int64_t>& lens, bool per_query,
         Causal causal) {
        for (const auto& [left, right] : kWindows) {
          Form form{causal};
          form.window_left = left;
          form.window_right = right;
          ExpectReference(DefaultEngine(), s, in, lens, per_query, form);
        }
      });
}

// More queries than keys, no causal mask: the first queries sit before key
// 0 (p < 0), and a window's right side leaves them no key (weights 0,
// output 0). Per-query lengths below a window's start do the same; a length
// of 0 keeps d2l's uniform weights over all M.
TEST_P(MultiHeadWindowTest, RowsLeftNoKeyAreZeroAndLengthZeroStaysUniform) {
  for (const Shape& s : {Shape{2, 12, 5, 2, 1, 16, 8}, Shape{1, 3, 2, 2, 2, 8, 4}}) {
    SCOPED_TRACE(s.Name());
    const Inputs in(s, 31);
    for (const auto& [left, right] : kWindows) {
      Form form;
      form.window_left = left;
      form.window_right = right;
      ExpectReference(DefaultEngine(), s, in, {}, false, form);
    }
  }
  const Shape s{2, 200, 200, 2, 1, 16, 8};
  const Inputs in(s, 37);
  std::vector<int64_t> lens(static_cast<size_t>(s.batch * s.queries));
  for (size_t r = 0; r < lens.size(); ++r) lens[r] = static_cast<int64_t>(r % 7 == 0 ? 0 : r % 50);
  for (Causal causal : {Causal::kNone, Causal::kBottomRight}) {
    Form form{causal};
    form.window_left = 20;
    form.window_right = 0;
    ExpectReference(DefaultEngine(), s, in, lens, true, form);
  }
}

// NaN in keys and values that a query's window leaves out reaches no query
// that does not see them: on the row path and the windowed prefill, whose
// blocks score and mix keys outside some of their rows' windows.
TEST_P(MultiHeadWindowTest, KeysAndValuesOutsideTheWindowNeverReachTheQuery) {
  for (const Shape& s : {Shape{1, 2, 400, 2, 1, 16, 8}, Shape{1, 260, 260, 2, 1, 16, 8}}) {
    SCOPED_TRACE(s.Name());
    Inputs in(s, 43);
    Form form{Causal::kBottomRight};
    form.window_left = 30;
    form.window_right = 0;
    // Keys 0, 100 and 230 poisoned: only queries whose windows hold them see NaN.
    const std::vector<int64_t> poisoned = {0, 100, 230};
    for (int64_t j : poisoned) {
      for (int64_t g = 0; g < s.kv_heads; ++g) {
        in.k[static_cast<size_t>((j * s.kv_heads + g) * s.depth)] = NAN;
        in.v[static_cast<size_t>((j * s.kv_heads + g) * s.value_dim)] = NAN;
      }
    }
    const Result r = RunMultiHead(DefaultEngine(), s, in, ValidLens::None(), OptionsOf(s, form));
    for (int64_t i = 0; i < s.queries; ++i) {
      const int64_t p = i + s.keys - s.queries;
      const bool sees = std::any_of(poisoned.begin(), poisoned.end(),
                                    [&](int64_t j) { return j <= p && j >= p - 30; });
      for (int64_t h = 0; h < s.heads; ++h) {
        const float* o = r.out.data() + (i * s.heads + h) * s.value_dim;
        EXPECT_EQ(std::isnan(o[0]), sees) << "query " << i << " head " << h;
      }
    }
  }
}

// With a soft cap; over heads-first views (the same bits as token-major);
// in bf16 mode against float64 math on the rounded inputs.
TEST(MultiHeadWindowForms, CapsHeadsFirstViewsAndBf16Mode) {
  const Shape s{2, 140, 150, 4, 2, 16, 8};
  const Inputs in(s, 47);
  Form form{Causal::kBottomRight, 1.5, 1.0};
  form.window_left = 33;
  form.window_right = 0;
  ExpectReference(DefaultEngine(), s, in, {}, false, form);

  const Result token_major =
      RunMultiHead(DefaultEngine(), s, in, ValidLens::None(), OptionsOf(s, form));
  EXPECT_EQ(RunHeadsFirst(DefaultEngine(), s, in, OptionsOf(s, form)), token_major.out);

  EngineOptions options;
  options.precision = Precision::kBf16;
  std::unique_ptr<Engine> bf16;
  ASSERT_TRUE(Engine::Create(options, &bf16).ok());
  Inputs rounded = in;
  for (std::vector<float>* x : {&rounded.q, &rounded.k, &rounded.v}) {
    for (float& e : *x) e = RoundedToBf16(e);
  }
  std::vector<double> weights;
  const std::vector<double> expected = Reference(s, rounded, {}, false, form, &weights);
  const Result r = RunMultiHead(*bf16, s, rounded, ValidLens::None(), OptionsOf(s, form));
  EXPECT_LE(MaxAbsDiff(r.weights.data(), weights), kWeightTolerance);
  EXPECT_LE(MaxAbsDiff(r.out.data(), expected), std::pow(2.0, -9) * (OutTolerance(in.v) / 1e-5));
}

TEST(MultiHeadWindowThreads, GivesTheSameBitsForAnyThreadCount) {
  const std::unique_ptr<Engine> two = EngineWithThreads(2);
  for (const Shape& s : {Shape{1, 1, 3000, 8, 2, 64, 64}, Shape{2, 300, 300, 4, 4, 32, 32}}) {
    SCOPED_TRACE(s.Name());
    const Inputs in(s, 71);
    Form form{Causal::kBottomRight};
    form.window_left = 100;
    form.window_right = 0;
    const Result one = RunMultiHead(DefaultEngine(), s, in, ValidLens::None(), OptionsOf(s, form));
    const Result both = RunMultiHead(*two, s, in, ValidLens::None(), OptionsOf(s, form));
    EXPECT_EQ(one.out, both.out);
    EXPECT_EQ(one.weights, both.weights);
  }
}

// A side below -1 is refused by name, and nothing is written.
TEST(MultiHeadWindowErrors, RefusesASideBelowMinusOneNamingItAndWritesNothing) {
  const Shape s{2, 3, 5, 4, 2, 8, 6};
  const Inputs in(s, 3);
  for (const Window window :
       {Window{-2, 0}, Window{0, -5}, Window{std::numeric_limits<int64_t>::min(), -1}}) {
    std::vector<float> out(s.out(), kSentinel), weights(s.weights(), kSentinel);
    MultiHeadOptions options;
    options.window = window;
    const Status status = DefaultEngine().MultiHeadAttention(
        QueriesOf(s, in.q), KeysOf(s, in.k), ValuesOf(s, in.v), ValidLens::None(), options,
        Tensor(out.data(), {s.batch, s.queries, s.heads, s.value_dim}),
        Tensor(weights.data(), {s.batch, s.heads, s.queries, s.keys}));
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(status.message(), "MultiHeadAttention: window is (" + std::to_string(window.left) +
                                    ", " + std::to_string(window.right) +
                                    "); each side must be >= 0, or -1 for unbounded");
    EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float x) { return x == kSentinel; }));
    EXPECT_TRUE(
        std::all_of(weights.begin(), weights.end(), [](float x) { return x == kSentinel; }));
  }
  // Sides as large as int64 allows bound nothing: the call without a window.
  const Shape t{1, 5, 9, 2, 1, 8, 4};
  const Inputs in_t(t, 5);
  Form form;
  form.window_left = std::numeric_limits<int64_t>::max();
  form.window_right = std::numeric_limits<int64_t>::max();
  const Result wide = RunMultiHead(DefaultEngine(), t, in_t, ValidLens::None(), OptionsOf(t, form));
  const Result none = RunMultiHead(DefaultEngine(), t, in_t, ValidLens::None(), MultiHeadOptions{});
  EXPECT_EQ(wide.out, none.out);
}

}  // namespace
}  // namespace attnscore::test
