// Masked softmax of many rows whose outputs are too large to stay in cache:
// a pipeline of rows, each written once with non-temporal stores, per
// target. Included by masked_softmax-inl.h.
#if defined(ATTNSCORE_KERNELS_MASKED_SOFTMAX_STREAM_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTNSCORE_KERNELS_MASKED_SOFTMAX_STREAM_INL_H_
#undef ATTNSCORE_KERNELS_MASKED_SOFTMAX_STREAM_INL_H_
#else
#define ATTNSCORE_KERNELS_MASKED_SOFTMAX_STREAM_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "hwy/highway.h"
#include "kernels/masked_softmax.h"
#include "kernels/masked_softmax_passes-inl.h"

HWY_BEFORE_NAMESPACE();
namespace attnscore {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

// Stores e[0, valid)·scale, then zeros up to width, into y with non-temporal
// stores: y is not read again soon, so it should not evict the caller's data,
// and streaming skips the read-for-ownership of each line. The stores go out
// a few vectors at a time, in between the next row's arithmetic: issued as
// one run, they stall the core on the memory's write speed, and the
// arithmetic cannot start until they drain.
//
// Non-temporal stores need aligned addresses, and rows seldom start on one
// (a malloc'd array is 16 bytes past a line, where no 32- or 64-byte vector
// starts), so a row's tail and the next row's head share a vector. Stored
// plainly, that line is first read from memory, and the core waits for it:
// on (64, 128, 512) 16 bytes off a line, 1.94 ms against 1.20 aligned. So
// where the next row starts right after a row, as rows of one array do, the
// two go out together as one aligned vector, put together in registers
// (through memory, the load could not be forwarded from the two stores and
// waited for every store queued before them: 10% of the op's samples).
template <class D>
class RowStreamer {
 public:
  bool idle() const { return e_ == nullptr; }

  // Finishes the row streaming now, if any, and starts this one.
  void Next(D d, const float* HWY_RESTRICT e, float scale, size_t valid, size_t width,
            float* HWY_RESTRICT y) {
    const size_t lanes = hn::Lanes(d);
    const size_t head = UnalignedHead(d, y, width);
    size_t tail = 0;  // the previous row's last floats, after its whole vectors
    if (!idle()) {
      Store(d, width_);
      tail = width_ - next_;
    }
    if (tail > 0 && head + tail == lanes && y_ + width_ == y) {
      const hn::RebindToSigned<D> di;
      // Lane k gets the head's lane k - tail (mod lanes; the others are the tail's).
      const auto from = hn::And(hn::Sub(hn::Iota(di, 0), hn::Set(di, static_cast<int32_t>(tail))),
                                hn::Set(di, static_cast<int32_t>(lanes - 1)));
      const auto head_values = ScaledTail(d, e, std::min(head, valid), hn::Set(d, scale));
      hn::Stream(hn::IfThenElse(hn::FirstN(d, tail), TailValues(d),
                                hn::TableLookupLanes(head_values, hn::IndicesFromVec(d, from))),
                 d, y_ + next_);
    } else {
      if (tail > 0) StoreTail(d, TailValues(d), tail, y_ + next_);
      const size_t values = std::min(head, valid);  // fewer than a vector
      if (values > 0) StoreTail(d, ScaledTail(d, e, values, hn::Set(d, scale)), values, y);
      if (head > valid) Fill(d, 0.0f, y + valid, head - valid);
    }
    e_ = e;
    scale_ = scale;
    valid_ = valid;
    width_ = width;
    y_ = y;
    next_ = head;
  }

  // Streams up to `vectors` more whole vectors: scaled exps, the one that
  // straddles the valid length, zeros, each in a loop of its own. The row's
  // fields are copied to locals first: stores through float pointers could
  // alias scale_, and the old single loop reloaded it after every store and
  // tested three conditions per vector. On (64, 128, 512) this took the op
  // from 0.589 to 0.671 of memcpy's speed (medians of 16 alternated runs).
  HWY_INLINE void Store(D d, size_t vectors) {
    const size_t lanes = hn::Lanes(d);
    const size_t valid = valid_, width = width_;
    const float* HWY_RESTRICT e = e_;
    float* HWY_RESTRICT y = y_;
    const auto scale = hn::Set(d, scale_);
    size_t next = next_;
    for (; vectors > 0 && next + lanes <= valid; --vectors, next += lanes) {
      hn::Stream(hn::Mul(hn::LoadU(d, e + next), scale), d, y + next);
    }
    if (vectors > 0 && next < valid && next + lanes <= width) {
      hn::Stream(ScaledTail(d, e + next, valid - next, scale), d, y + next);
      --vectors;
      next += lanes;
    }
    for (; vectors > 0 && next + lanes <= width; --vectors, next += lanes) {
      hn::Stream(hn::Zero(d), d, y + next);
    }
    next_ = next;
  }

  // Streams the rest of the row, its tail stored plainly; afterwards the
  // streamer is idle.
  void Finish(D d) {
    if (idle()) return;
    Store(d, width_);
    if (next_ < width_) StoreTail(d, TailValues(d), width_ - next_, y_ + next_);
    e_ = nullptr;
  }

 private:
  // The row's last, partial vector, from next_ on (fewer than Lanes(d) left).
  hn::Vec<D> TailValues(D d) const {
    return next_ < valid_ ? ScaledTail(d, e_ + next_, valid_ - next_, hn::Set(d, scale_))
                          : hn::Zero(d);
  }

  const float* e_ = nullptr;
  float scale_ = 0.0f;
  size_t valid_ = 0, width_ = 0, next_ = 0;
  float* y_ = nullptr;
};

// Rows ahead whose valid scores are prefetched into L2: the hardware
// prefetcher alone does not know where a row's valid part ends and leaves
// the loads waiting. Only the valid parts are prefetched, not whole rows:
// measured on (64, 128, 512), 0.68 of memcpy's speed against 0.64.
constexpr size_t kPrefetchRows = 4;

// Every cache line holding some of row[0, count).
HWY_INLINE void PrefetchScores(const float* row, size_t count) {
  if (count == 0) return;
  constexpr uintptr_t kLine = 64;
  const uintptr_t end = reinterpret_cast<uintptr_t>(row + count);
  // Into L2 (locality 1): copies in L1 crowd out the row buffers (2.5-2.9 ms
  // against 2.9-3.4 ms into L1 on an AMD EPYC, alternated runs in the engine).
  for (uintptr_t line = reinterpret_cast<uintptr_t>(row) & ~(kLine - 1); line < end; line += kLine) {
    __builtin_prefetch(reinterpret_cast<const void*>(line), 0, 1);
  }
}

// Where the streamed rows' exps start from: not the row's max but the max
// of its first vector, known before any pass over the row. Any shift gives
// the same softmax in exact arithmetic; the max is there so that no exp
// overflows and none loses accuracy (exp's error grows with x - shift).
// Every exp is at most their sum, so a sum of at most kMaxShiftedSum bounds
// each x - shift by ln(2^20) = 13.9, within fast_exp-inl.h's bound (1.1e-6
// measured; the weights' tolerance is 1e-5 absolute). A larger sum, a sum
// that is not finite (a NaN or +Inf score on AVX-512, or a shift far below
// the max), or a probe that saw a NaN or an Inf (the other targets, whose
// exp hides a NaN) sends the row through the max pass and the exps against
// the max: MaskedSoftmaxRow's bits. So the max pass, its loop and its
// mispredicted exit are gone from rows whose max is not far above their
// first scores. (On the other targets a row with a -Inf score takes both
// passes too: the probe cannot tell it from +Inf.)
constexpr float kMaxShiftedSum = 0x1p20f;

// The streamed rows in a pipeline of three stages, each on a different row:
// row r's shift, row r - 1's exps (its shift taken a stage ago, so the exps
// do not wait for its load and reduction), and the stores of row r - 2 (its
// sum known a stage ago), spread over the exps. So no row's stores wait on
// its sum. (With a max pass as the first stage, against one row at a time:
// 878 -> 810 us.)
//
// What a row carries from its first stage to its exps.
struct RowShift {
  float shift;
  bool empty;  // valid = 0: no exps, FillSpecialRow instead
};

template <class D>
HWY_INLINE RowShift FirstVectorMax(D d, const kernels::StreamedRow& row) {
  if (row.valid == 0) return {0.0f, true};
  const auto first = row.valid >= hn::Lanes(d) ? hn::LoadU(d, row.x)
                                                : LoadTail(d, row.x, row.valid, row.x[0]);
  return {hn::GetLane(hn::MaxOfLanes(d, first)), false};
}

// Row's exps into e, then row starts streaming (the row before it finishes).
template <class D>
HWY_INLINE void ExpPass(D d, const kernels::StreamedRow& row, RowShift first, size_t width,
                        float* e, RowStreamer<D>& streamer) {
  float sum = std::numeric_limits<float>::quiet_NaN();
  if (!first.empty) {
    // Six stores of the row streaming per four exps (about 40 instructions;
    // four or eight were slower), and the probe where exp hides a NaN
    // (kExpKeepsNaN).
    bool all_finite = true;
    sum = ExpAndSum<!kExpKeepsNaN>(d, row.x, row.valid, first.shift, e, /*read_soon=*/false,
                                   [&] { streamer.Store(d, 6); }, &all_finite);
    if (!(all_finite && sum <= kMaxShiftedSum)) {
      sum = MaxShiftedExpsAndSum(d, row.x, row.valid, e, /*read_soon=*/false);
    }
  }
  if (std::isnan(sum)) {  // valid = 0 too
    streamer.Finish(d);
    return FillSpecialRow(d, row.valid, width, row.y);
  }
  streamer.Next(d, e, 1.0f / sum, row.valid, width, row.y);
}

// Whether no two rows share a vector: each starts on a vector boundary and
// is whole vectors long.
template <class D>
HWY_INLINE bool RowsOnVectors(D d, const kernels::StreamedRow* rows, size_t count, size_t width) {
  bool aligned = width % hn::Lanes(d) == 0;
  for (size_t k = 0; k < count; ++k) aligned &= UnalignedHead(d, rows[k].y, width) == 0;
  return aligned;
}

// sorted[0, count) = rows[0, count) by valid length, shortest first, ties in
// array order; count <= kMaxStreamedRows. The passes' loops run as many
// times as the row is long, and in array order random lengths make each
// loop's exit a mispredicted branch; sorted, a row's loops mostly run as
// often as the row's before. Each key's rank is a count of the smaller ones:
// no branches, where a comparison sort would mispredict as much as it saves.
template <class D>
HWY_INLINE void SortByValidLength(D /*d*/, const kernels::StreamedRow* rows, size_t count,
                                  kernels::StreamedRow* sorted) {
  const hn::Rebind<int32_t, D> di;
  const size_t lanes = hn::Lanes(di);
  // Length, then index, in one key (lengths past 2^24 all tie, in array order).
  HWY_ALIGN int32_t keys[kernels::kMaxStreamedRows + hn::MaxLanes(di)];
  for (size_t k = 0; k < count + lanes; ++k) {
    keys[k] = k < count ? static_cast<int32_t>(std::min<size_t>(rows[k].valid, size_t{1} << 24) *
                                                   kernels::kMaxStreamedRows + k)
                        : std::numeric_limits<int32_t>::max();
  }
  for (size_t k = 0; k < count; ++k) {
    const auto key = hn::Set(di, keys[k]);
    size_t rank = 0;
    for (size_t j = 0; j < count; j += lanes) {
      rank += hn::CountTrue(di, hn::Lt(hn::Load(di, keys + j), key));
    }
    sorted[rank] = rows[k];
  }
}

void MaskedSoftmaxRowsStream(const kernels::StreamedRow* rows, size_t count, size_t width,
                             float* row_buffers) {
  const hn::ScalableTag<float> d;
  // Rows that share no vector can go in any order: by length. Rows that do
  // stay in array order, where each row's tail and the next row's head go
  // out as one vector (see RowStreamer); keeping those vectors for rows in
  // any order cost more than the order saved. Measured on (64, 128, 512)
  // with random lengths, rows on a line: 785 -> 705 us.
  kernels::StreamedRow sorted[kernels::kMaxStreamedRows];
  if (count <= kernels::kMaxStreamedRows && RowsOnVectors(d, rows, count, width)) {
    SortByValidLength(d, rows, count, sorted);
    rows = sorted;
  }
  RowStreamer<hn::ScalableTag<float>> streamer;
  RowShift previous{};
  for (size_t r = 0; r <= count; ++r) {
    RowShift current{};
    if (r < count) {
      if (r + kPrefetchRows < count) {
        PrefetchScores(rows[r + kPrefetchRows].x, rows[r + kPrefetchRows].valid);
      }
      current = FirstVectorMax(d, rows[r]);
    }
    if (r > 0) {
      // Row r - 1's exps must not overwrite those of row r - 2, still streaming.
      ExpPass(d, rows[r - 1], previous, width, row_buffers + (r % 2) * width, streamer);
    }
    previous = current;
  }
  streamer.Finish(d);
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace attnscore
HWY_AFTER_NAMESPACE();

#endif  // ATTNSCORE_KERNELS_MASKED_SOFTMAX_STREAM_INL_H_ toggle
