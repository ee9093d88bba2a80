// A server's step on a KvCache (docs/semantics.md section 5.3): packed
// appends with a count per sequence and packed queries with a count per
// sequence (0: idle), and Attend's window, ALiBi, bias and mask over
// sequences of different lengths. Against float64 math written from the
// definitions, per sequence, in each precision (bf16: on the rounded keys
// and values; int8: within its coding's error of the keys as given), on
// every target; the refusals, with nothing written or appended.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "multihead_cases.h"
#include "test_util.h"

namespace attnscore::test {
namespace {

class KvCacheStepTest : public PerTarget {};
ATTNSCORE_INSTANTIATE_PER_TARGET(KvCacheStepTest);

constexpr int64_t kHeads = 4, kKvHeads = 2, kDepth = 16, kValueDim = 16;
constexpr int64_t kPosition = kKvHeads * kDepth;  // floats of one position's keys

// One sequence's history: its keys (L, Hkv, D) and values (L, Hkv, Dv).
struct History {
  std::vector<float> k, v;
  int64_t length() const { return static_cast<int64_t>(k.size()) / kPosition; }
  void Add(const std::vector<float>& keys, const std::vector<float>& values) {
    k.insert(k.end(), keys.begin(), keys.end());
    v.insert(v.end(), values.begin(), values.end());
  }
};

std::unique_ptr<KvCache> MakeCache(int64_t batch, Precision precision) {
  KvCacheShape shape;
  shape.batch = batch, shape.capacity = 96, shape.kv_heads = kKvHeads;
  shape.key_dim = kDepth, shape.value_dim = kValueDim, shape.precision = precision;
  std::unique_ptr<KvCache> cache;
  EXPECT_TRUE(KvCache::Create(shape, &cache).ok());
  return cache;
}

// A cache of B = lengths.size() sequences, sequence b holding lengths[b]
// random positions (seeds from `seed`), and their histories.
std::vector<History> FilledSequences(KvCache* cache, const std::vector<int64_t>& lengths,
                                     uint32_t seed) {
  std::vector<History> history(lengths.size());
  for (size_t b = 0; b < lengths.size(); ++b) {
    const auto own = static_cast<uint32_t>(seed + 7 * b);
    history[b].Add(RandomFloats(lengths[b] * kPosition, own),
                   RandomFloats(lengths[b] * kKvHeads * kValueDim, own + 1, 3.0f));
    EXPECT_TRUE(cache
                    ->AppendTo(static_cast<int64_t>(b),
                               ConstTensor(history[b].k.data(), {lengths[b], kKvHeads, kDepth}),
                               ConstTensor(history[b].v.data(), {lengths[b], kKvHeads, kValueDim}))
                    .ok());
  }
  return history;
}

// Float64 attention of sequence `history`'s newest n positions by queries
// (n, Hq, D), causal, with `form` (its bias and mask (1, Hq, n, L)): out (n,
// Hq, Dv) and weights (1, Hq, n, L). K and V as the precision holds them
// (int8: as given).
std::vector<double> SequenceReference(const History& history, const std::vector<float>& q,
                                      int64_t n, Form form, Precision precision,
                                      std::vector<double>* weights) {
  const Shape s{1, n, history.length(), kHeads, kKvHeads, kDepth, kValueDim};
  Inputs in(s, 0);
  in.q = q, in.k = history.k, in.v = history.v;
  if (precision == Precision::kBf16) {
    for (std::vector<float>* x : {&in.k, &in.v}) {
      for (float& e : *x) e = RoundedToBf16(e);
    }
  }
  form.causal = Causal::kBottomRight;
  return Reference(s, in, {}, false, form, weights);
}

double Tolerance(Precision precision, const std::vector<float>& values) {
  // int8 codes err about 1% of V ~ N(0, 9) (kv_cache_int8_test.cc).
  return precision == Precision::kInt8 ? 0.05 : OutTolerance(values);
}

// Each option at once: a window of 8, ALiBi, a cap and sinks.
KvCacheAttendOptions EveryOption(const std::vector<float>& slopes,
                                 const std::vector<float>& sinks) {
  KvCacheAttendOptions options;
  options.softcap = 2.5f;
  options.window = {8, -1};
  options.alibi_slopes = ConstTensor(slopes.data(), {kHeads});
  options.sinks = ConstTensor(sinks.data(), {kHeads});
  return options;
}

// The acceptance step: sequence 0 prefills 30 positions, sequence 1 decodes
// one, sequence 2 idles, in one AppendPacked and one AttendPacked; each gets
// its own answer, plain and with every option; sequence 2's cache is left as
// it was, as a later step on it shows.
TEST_P(KvCacheStepTest, PackedStepGivesEachSequenceItsOwnAnswer) {
  const std::vector<float> slopes = {0.25f, 0.125f, 0.0625f, 0.5f},
                           sinks = {0.5f, -1.0f, 2.0f, 0.0f};
  for (Precision precision : {Precision::kFp32, Precision::kBf16, Precision::kInt8}) {
    for (bool options_on : {false, true}) {
      SCOPED_TRACE(std::string(PrecisionName(precision)) + (options_on ? " every option" : ""));
      const KvCacheAttendOptions options =
          options_on ? EveryOption(slopes, sinks) : KvCacheAttendOptions();
      Form form;
      if (options_on) form = {Causal::kNone, 0, 2.5, 8, -1, sinks, slopes};
      std::unique_ptr<KvCache> cache = MakeCache(3, precision);
      ASSERT_TRUE(cache);
      // The histories before the step: 5, 40 and 20 positions.
      std::vector<History> history = FilledSequences(cache.get(), {5, 40, 20}, 1);
      // The step's packed rows: 30 of sequence 0, then 1 of sequence 1.
      const std::vector<int64_t> counts = {30, 1, 0};
      const std::vector<float> k = RandomFloats(31 * kPosition, 51),
                               v = RandomFloats(31 * kKvHeads * kValueDim, 52, 3.0f),
                               q = RandomFloats(31 * kHeads * kDepth, 53);
      const TensorView<const int64_t> count_view(counts.data(), {3});
      ASSERT_TRUE(cache
                      ->AppendPacked(ConstTensor(k.data(), {31, kKvHeads, kDepth}),
                                     ConstTensor(v.data(), {31, kKvHeads, kValueDim}), count_view)
                      .ok());
      history[0].Add({k.begin(), k.begin() + 30 * kPosition},
                     {v.begin(), v.begin() + 30 * kKvHeads * kValueDim});
      history[1].Add({k.begin() + 30 * kPosition, k.end()},
                     {v.begin() + 30 * kKvHeads * kValueDim, v.end()});
      EXPECT_EQ(cache->length(0), 35);
      EXPECT_EQ(cache->length(1), 41);
      EXPECT_EQ(cache->length(2), 20);
      std::vector<float> out(31 * kHeads * kValueDim, kSentinel);
      ASSERT_TRUE(cache
                      ->AttendPacked(DefaultEngine(), ConstTensor(q.data(), {31, kHeads, kDepth}),
                                     count_view, options,
                                     Tensor(out.data(), {31, kHeads, kValueDim}))
                      .ok());
      std::vector<double> weights;
      const std::vector<double> prefill = SequenceReference(
          history[0], {q.begin(), q.begin() + 30 * kHeads * kDepth}, 30, form, precision, &weights);
      const std::vector<double> decode = SequenceReference(
          history[1], {q.begin() + 30 * kHeads * kDepth, q.end()}, 1, form, precision, &weights);
      EXPECT_LE(MaxAbsDiff(out.data(), prefill), Tolerance(precision, history[0].v));
      EXPECT_LE(MaxAbsDiff(out.data() + 30 * kHeads * kValueDim, decode),
                Tolerance(precision, history[1].v));

      // Sequence 2 holds its 20 positions as they were: a decode step on it
      // alone (sequences 0 and 1 idle) sees them and its new one.
      const std::vector<float> k2 = RandomFloats(kPosition, 61),
                               v2 = RandomFloats(kKvHeads * kValueDim, 62, 3.0f),
                               q2 = RandomFloats(kHeads * kDepth, 63);
      const std::vector<int64_t> only_last = {0, 0, 1};
      const TensorView<const int64_t> last_view(only_last.data(), {3});
      ASSERT_TRUE(cache
                      ->AppendPacked(ConstTensor(k2.data(), {1, kKvHeads, kDepth}),
                                     ConstTensor(v2.data(), {1, kKvHeads, kValueDim}), last_view)
                      .ok());
      history[2].Add(k2, v2);
      std::vector<float> out2(kHeads * kValueDim, kSentinel);
      ASSERT_TRUE(cache
                      ->AttendPacked(DefaultEngine(), ConstTensor(q2.data(), {1, kHeads, kDepth}),
                                     last_view, options,
                                     Tensor(out2.data(), {1, kHeads, kValueDim}))
                      .ok());
      EXPECT_LE(
          MaxAbsDiff(out2.data(), SequenceReference(history[2], q2, 1, form, precision, &weights)),
          Tolerance(precision, history[2].v));
      EXPECT_EQ(cache->length(0), 35);
      EXPECT_EQ(cache->length(1), 41);
    }
  }
}

// Packed queries of one count per sequence are Attend's (B, N, Hq, D) call:
// the same bits.
TEST_P(KvCacheStepTest, EqualCountsGiveAttendsBits) {
  for (Precision precision : {Precision::kFp32, Precision::kBf16, Precision::kInt8}) {
    SCOPED_TRACE(PrecisionName(precision));
    std::unique_ptr<KvCache> cache = MakeCache(3, precision);
    ASSERT_TRUE(cache);
    const std::vector<int64_t> counts = {17, 33, 9};
    const std::vector<float> k = RandomFloats(59 * kPosition, 71),
                             v = RandomFloats(59 * kKvHeads * kValueDim, 72, 3.0f),
                             q = RandomFloats(3 * 2 * kHeads * kDepth, 73);
    ASSERT_TRUE(cache
                    ->AppendPacked(ConstTensor(k.data(), {59, kKvHeads, kDepth}),
                                   ConstTensor(v.data(), {59, kKvHeads, kValueDim}),
                                   TensorView<const int64_t>(counts.data(), {3}))
                    .ok());
    const std::vector<int64_t> twos = {2, 2, 2};
    std::vector<float> packed(3 * 2 * kHeads * kValueDim, kSentinel), plain(packed);
    ASSERT_TRUE(cache
                    ->AttendPacked(DefaultEngine(), ConstTensor(q.data(), {6, kHeads, kDepth}),
                                   TensorView<const int64_t>(twos.data(), {3}),
                                   KvCacheAttendOptions(),
                                   Tensor(packed.data(), {6, kHeads, kValueDim}))
                    .ok());
    ASSERT_TRUE(cache
                    ->Attend(DefaultEngine(), ConstTensor(q.data(), {3, 2, kHeads, kDepth}),
                             Tensor(plain.data(), {3, 2, kHeads, kValueDim}))
                    .ok());
    EXPECT_EQ(packed, plain);
  }
}

// Attend over sequences of 23, 40 and 9 positions (runs of one length where
// the options place queries) with a window, ALiBi, a bias and a mask shaped
// (B, Hq, N, L): each sequence's out and weights against its own math, its
// weights 0 past its length.
TEST_P(KvCacheStepTest, AttendPlacesEachSequencesQueriesAtItsOwnLength) {
  const std::vector<float> slopes = {0.25f, 0.125f, 0.0625f, 0.5f},
                           sinks = {0.5f, -1.0f, 2.0f, 0.0f};
  const std::vector<int64_t> lengths = {23, 40, 9};
  const int64_t n = 3, longest = 40;
  for (Precision precision : {Precision::kFp32, Precision::kBf16, Precision::kInt8}) {
    SCOPED_TRACE(PrecisionName(precision));
    std::unique_ptr<KvCache> cache = MakeCache(3, precision);
    ASSERT_TRUE(cache);
    std::vector<History> history = FilledSequences(cache.get(), lengths, 100);
    const std::vector<float> q = RandomFloats(3 * n * kHeads * kDepth, 131);
    // A bias per (b, h, i, j) and a mask on every fifth key of head 1.
    const std::vector<float> bias = RandomFloats(3 * kHeads * n * longest, 132, 0.5f);
    std::vector<uint8_t> mask(bias.size(), 1);
    for (size_t at = 0; at < mask.size(); ++at) {
      if ((at / (n * longest)) % kHeads == 1 && at % 5 == 0) mask[at] = 0;
    }
    KvCacheAttendOptions options = EveryOption(slopes, sinks);
    options.bias = ConstTensor(bias.data(), {3, kHeads, n, longest});
    options.mask = TensorView<const uint8_t>(mask.data(), {3, kHeads, n, longest});
    std::vector<float> out(3 * n * kHeads * kValueDim, kSentinel),
        weights(3 * kHeads * n * longest, kSentinel);
    ASSERT_TRUE(cache
                    ->Attend(DefaultEngine(), ConstTensor(q.data(), {3, n, kHeads, kDepth}),
                             options, Tensor(out.data(), {3, n, kHeads, kValueDim}),
                             Tensor(weights.data(), {3, kHeads, n, longest}))
                    .ok());
    for (int64_t b = 0; b < 3; ++b) {
      SCOPED_TRACE("sequence " + std::to_string(b));
      const int64_t length = lengths[static_cast<size_t>(b)];
      Form form{Causal::kNone, 0, 2.5, 8, -1, sinks, slopes};
      form.bias.clear(), form.mask.clear();
      for (int64_t h = 0; h < kHeads; ++h) {
        for (int64_t i = 0; i < n; ++i) {
          const size_t row = static_cast<size_t>(((b * kHeads + h) * n + i) * longest);
          form.bias.insert(form.bias.end(), bias.begin() + row, bias.begin() + row + length);
          form.mask.insert(form.mask.end(), mask.begin() + row, mask.begin() + row + length);
        }
      }
      std::vector<double> expected_weights;
      const std::vector<double> expected = SequenceReference(
          history[b],
          {q.begin() + b * n * kHeads * kDepth, q.begin() + (b + 1) * n * kHeads * kDepth}, n, form,
          precision, &expected_weights);
      EXPECT_LE(MaxAbsDiff(out.data() + b * n * kHeads * kValueDim, expected),
                Tolerance(precision, history[b].v));
      if (precision == Precision::kInt8) continue;  // weights: scores off by the keys' coding
      for (int64_t h = 0; h < kHeads; ++h) {
        for (int64_t i = 0; i < n; ++i) {
          const float* row = weights.data() + ((b * kHeads + h) * n + i) * longest;
          const double* want = expected_weights.data() + (h * n + i) * length;
          for (int64_t j = 0; j < longest; ++j) {
            const double expect = j < length ? want[j] : 0.0;
            ASSERT_NEAR(row[j], expect, kWeightTolerance)
                << "head " << h << " query " << i << " key " << j;
          }
        }
      }
    }
  }
}

// Runs of more than one sequence that share a count and a length, from a
// sequence past the first, with a window and ALiBi: each against its own
// math (lengths 10, 30, 30, 30 and 12; 1, 2, 2, 0 and 3 queries).
TEST_P(KvCacheStepTest, RunsOfSequencesOfOneLengthPlaceTheirQueries) {
  const std::vector<float> slopes = {0.25f, 0.125f, 0.0625f, 0.5f};
  const std::vector<int64_t> lengths = {10, 30, 30, 30, 12};
  const std::vector<int64_t> query_counts = {1, 2, 2, 0, 3};
  for (Precision precision : {Precision::kFp32, Precision::kBf16}) {
    SCOPED_TRACE(PrecisionName(precision));
    std::unique_ptr<KvCache> cache = MakeCache(5, precision);
    ASSERT_TRUE(cache);
    std::vector<History> history = FilledSequences(cache.get(), lengths, 300);
    const std::vector<float> q = RandomFloats(8 * kHeads * kDepth, 331);
    KvCacheAttendOptions options;
    options.window = {6, -1};
    options.alibi_slopes = ConstTensor(slopes.data(), {kHeads});
    std::vector<float> out(8 * kHeads * kValueDim, kSentinel);
    ASSERT_TRUE(cache
                    ->AttendPacked(DefaultEngine(), ConstTensor(q.data(), {8, kHeads, kDepth}),
                                   TensorView<const int64_t>(query_counts.data(), {5}), options,
                                   Tensor(out.data(), {8, kHeads, kValueDim}))
                    .ok());
    Form form{Causal::kNone, 0, 0, 6, -1, {}, slopes};
    for (int64_t b = 0, row = 0; b < 5; row += query_counts[static_cast<size_t>(b)], ++b) {
      const int64_t n = query_counts[static_cast<size_t>(b)];
      if (n == 0) continue;
      SCOPED_TRACE("sequence " + std::to_string(b));
      std::vector<double> weights;
      const std::vector<double> expected = SequenceReference(
          history[b], {q.begin() + row * kHeads * kDepth, q.begin() + (row + n) * kHeads * kDepth},
          n, form, precision, &weights);
      EXPECT_LE(MaxAbsDiff(out.data() + row * kHeads * kValueDim, expected),
                Tolerance(precision, history[b].v));
    }
  }
}

// The catalogue's step refuses an output of the wrong shape before it
// appends: with room for the step's rows once (capacity 2), the next step
// still fits.
TEST(KvCacheStep, TheCataloguesStepChecksItsOutputBeforeAppending) {
  std::unique_ptr<Op> op;
  ASSERT_TRUE(Op::Create("kv_cache_step",
                         {{"batch", "2"},
                          {"capacity", "2"},
                          {"kv_heads", "2"},
                          {"key_dim", "16"},
                          {"value_dim", "16"}},
                         {}, &op)
                  .ok());
  const std::vector<float> k = RandomFloats(3 * kPosition, 1),
                           q = RandomFloats(3 * kHeads * kDepth, 2);
  const std::vector<int64_t> counts = {2, 1};
  std::vector<float> out(3 * kHeads * kValueDim, kSentinel);
  const std::vector<NamedTensor> inputs = {{"queries", q.data(), {3, kHeads, kDepth}},
                                           {"query_counts", counts.data(), {2}},
                                           {"keys", k.data(), {3, kKvHeads, kDepth}},
                                           {"values", k.data(), {3, kKvHeads, kValueDim}},
                                           {"counts", counts.data(), {2}}};
  EXPECT_EQ(
      op->Run(DefaultEngine(), inputs, {}, {{"output", out.data(), {3, kHeads, kValueDim - 1}}})
          .message(),
      "KvCache: out has shape (3, 4, 15) but must be (T, Hq, Dv) = (3, 4, 16)");
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float x) { return x == kSentinel; }));
  ASSERT_EQ(op->Run(DefaultEngine(), inputs, {}, {{"output", out.data(), {3, kHeads, kValueDim}}})
                .message(),
            "");
  EXPECT_EQ(op->Run(DefaultEngine(), inputs, {}, {{"output", out.data(), {3, kHeads, kValueDim}}})
                .message(),
            "KvCache: sequence 0 holds 2 of its 2 positions; 2 more do not fit");
}

// Refusals name the argument; nothing is appended or written.
TEST(KvCacheStep, RefusesBadCountsChangingNothing) {
  std::unique_ptr<KvCache> cache = MakeCache(2, Precision::kFp32);
  ASSERT_TRUE(cache);
  const std::vector<float> k = RandomFloats(100 * kPosition, 1),
                           v = RandomFloats(100 * kKvHeads * kValueDim, 2);
  const auto append = [&](std::vector<int64_t> counts, int64_t rows) {
    return cache
        ->AppendPacked(
            ConstTensor(k.data(), {rows, kKvHeads, kDepth}),
            ConstTensor(v.data(), {rows, kKvHeads, kValueDim}),
            TensorView<const int64_t>(counts.data(), {static_cast<int64_t>(counts.size())}))
        .message();
  };
  EXPECT_EQ(append({3, 2}, 4), "KvCache: counts sum to 5; the packed rows are 4");
  EXPECT_EQ(append({-1, 5}, 4), "KvCache: counts[0] is -1; a count is >= 0");
  EXPECT_EQ(append({3}, 3),
            "KvCache: counts has shape (1); want (B,) = (2,) integers, one per sequence, by a "
            "stride >= 0");
  EXPECT_EQ(append({0, 97}, 97),
            "KvCache: sequence 1 holds 0 of its 96 positions; 97 more do not fit");
  EXPECT_EQ(cache->length(0), 0);
  EXPECT_EQ(cache->length(1), 0);
  ASSERT_EQ(append({4, 0}, 4), "");

  const std::vector<float> q = RandomFloats(8 * kHeads * kDepth, 3);
  std::vector<float> out(8 * kHeads * kValueDim, kSentinel);
  const auto attend = [&](std::vector<int64_t> counts, int64_t rows,
                          const KvCacheAttendOptions& options = KvCacheAttendOptions()) {
    return cache
        ->AttendPacked(DefaultEngine(), ConstTensor(q.data(), {rows, kHeads, kDepth}),
                       TensorView<const int64_t>(counts.data(), {2}), options,
                       Tensor(out.data(), {rows, kHeads, kValueDim}))
        .message();
  };
  EXPECT_EQ(attend({2, 1}, 3),
            "KvCache: query_counts[1] is 1 but sequence 1 holds 0 positions; its queries are its "
            "newest, so append their keys and values first");
  EXPECT_EQ(attend({5, 0}, 5),
            "KvCache: query_counts[0] is 5 but sequence 0 holds 4 positions; its queries are its "
            "newest, so append their keys and values first");
  const std::vector<float> bias(kHeads * 4, 0.0f);
  KvCacheAttendOptions with_bias;
  with_bias.bias = ConstTensor(bias.data(), {1, kHeads, 1, 4});
  EXPECT_EQ(attend({1, 0}, 1, with_bias),
            "KvCache: a bias or mask is shaped (B, Hq, N, L) for one N; packed queries take "
            "neither");
  KvCacheAttendOptions bad_window;
  bad_window.window = {-2, -1};
  EXPECT_EQ(attend({1, 0}, 1, bad_window).rfind("KvCache: window", 0), 0u);
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float x) { return x == kSentinel; }));

  // A bias shaped for the wrong L is refused by Attend, naming (B, Hq, N, M).
  std::vector<float> plain_out(2 * kHeads * kValueDim, kSentinel);
  ASSERT_EQ(append({0, 4}, 4), "");
  KvCacheAttendOptions wrong_bias;
  wrong_bias.bias = ConstTensor(bias.data(), {1, kHeads, 1, 3});
  EXPECT_EQ(cache
                ->Attend(DefaultEngine(), ConstTensor(q.data(), {2, 1, kHeads, kDepth}), wrong_bias,
                         Tensor(plain_out.data(), {2, 1, kHeads, kValueDim}))
                .message(),
            "KvCache: bias has shape (1, 4, 1, 3); want (B, Hq, N, M) = (2, 4, 1, 4), each dim "
            "that or 1, and strides >= 0 that address it");
  EXPECT_TRUE(
      std::all_of(plain_out.begin(), plain_out.end(), [](float x) { return x == kSentinel; }));
}

// A pool's blocks are taken for each sequence's own count, all or none.
TEST(KvCacheStep, PackedAppendTakesEachSequencesBlocks) {
  const int64_t block = KvCache::BlockPositionsMultiple(kDepth, kValueDim);
  KvCacheShape shape;
  shape.batch = 3, shape.capacity = 4 * block, shape.kv_heads = kKvHeads;
  shape.key_dim = kDepth, shape.value_dim = kValueDim;
  shape.block_positions = block, shape.blocks = 3;
  std::unique_ptr<KvCache> cache;
  ASSERT_TRUE(KvCache::Create(shape, &cache).ok());
  const std::vector<float> k = RandomFloats(4 * block * kPosition, 1),
                           v = RandomFloats(4 * block * kKvHeads * kValueDim, 2);
  const auto append = [&](std::vector<int64_t> counts) {
    int64_t rows = 0;
    for (int64_t c : counts) rows += c;
    return cache
        ->AppendPacked(ConstTensor(k.data(), {rows, kKvHeads, kDepth}),
                       ConstTensor(v.data(), {rows, kKvHeads, kValueDim}),
                       TensorView<const int64_t>(counts.data(), {3}))
        .message();
  };
  // Sequence 0 two blocks, sequence 2 one position (a block), sequence 1 idle.
  ASSERT_EQ(append({block + 1, 0, 1}), "");
  EXPECT_EQ(cache->blocks_in_use(), 3);
  EXPECT_EQ(append({0, 1, 0}), "KvCache: the pool has 0 of its 3 blocks of " +
                                   std::to_string(block) +
                                   " positions free; appending 1 packed positions needs 1");
  EXPECT_EQ(cache->length(1), 0);
  ASSERT_EQ(append({block - 1, 0, 1}), "");  // within the blocks held
  EXPECT_EQ(cache->blocks_in_use(), 3);
}

}  // namespace
}  // namespace attnscore::test
