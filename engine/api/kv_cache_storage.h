// A KvCache's storage (kv_cache.h): where each sequence's keys and values,
// and an int8 cache's scales, lie, and how appended rows are stored there.
// For kv_cache.cc alone.
#ifndef ATTNSCORE_API_KV_CACHE_STORAGE_H_
#define ATTNSCORE_API_KV_CACHE_STORAGE_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "attnscore/kv_cache.h"
#include "base/aligned_floats.h"
#include "base/call_scope.h"
#include "base/checks.h"
#include "kernels/attention_row.h"
#include "kernels/bf16.h"
#include "kernels/int8.h"
#include "ops/dot_product_paths.h"

namespace attnscore {
namespace kv_cache_storage {

inline constexpr const char* kOp = "KvCache";
inline constexpr auto kKeyGroup = static_cast<int64_t>(kernels::kCachedKeyGroup);

// The offset of element `at` of a view.
inline int64_t ElementOffset(const ConstTensor& t, const int64_t* at) {
  int64_t offset = 0;
  for (int d = 0; d < t.rank; ++d) offset += at[d] * t.strides[d];
  return offset;
}

// True where some element of a view of rank 3 or 4 is not finite: x · 0 is
// 0 for a finite x and NaN for ±Inf or NaN, so a row's products summed are
// 0 or NaN (a loop the compiler vectorises, where the search below is not).
inline bool HasNonFinite(const ConstTensor& t) {
  const int rows_rank = t.rank - 1;
  const int64_t outer = rows_rank == 3 ? t.dims[0] : 1;
  for (int64_t o = 0; o < outer; ++o) {
    const float* block = t.data + (rows_rank == 3 ? o * t.strides[0] : 0);
    for (int64_t i = 0; i < t.dims[t.rank - 3]; ++i) {
      for (int64_t j = 0; j < t.dims[t.rank - 2]; ++j) {
        const float* row = block + i * t.strides[t.rank - 3] + j * t.strides[t.rank - 2];
        const int64_t step = t.strides[t.rank - 1];
        float zero = 0.0f;
        for (int64_t e = 0; e < t.dims[t.rank - 1]; ++e) zero += row[e * step] * 0.0f;
        if (zero != 0.0f) return true;
      }
    }
  }
  return false;
}

// True, with `at` its index, where the view's elements from dim `dim` on
// (the index before it in `at`, its offset `offset`) hold one that is not
// finite.
inline bool FindNonFinite(const ConstTensor& t, int dim, int64_t offset, int64_t* at) {
  if (dim >= kMaxRank) return false;
  for (at[dim] = 0; at[dim] < t.dims[dim]; ++at[dim]) {
    const int64_t here = offset + at[dim] * t.strides[dim];
    if (dim + 1 < t.rank ? FindNonFinite(t, dim + 1, here, at) : !std::isfinite(t.data[here])) {
      return true;
    }
  }
  return false;
}

}  // namespace kv_cache_storage

using kv_cache_storage::kKeyGroup;

struct KvCache::Storage {
  KvCacheShape shape;
  // Positions kept per head of a sequence: its capacity, rounded up to
  // whole blocks where there is a pool, so that every block is whole pages.
  int64_t positions = 0;
  // Bytes of one stored element: 4 (fp32), 2 (bf16 words) or 1 (int8 codes).
  int64_t element_bytes = 4;
  // (B, Hkv, positions, D) and (B, Hkv, positions, Dv) elements, on cache
  // lines and huge pages: with D a multiple of 16, no vector load of a row
  // splits a line (rows 16 bytes off a line made decoding's kernels a fifth
  // slower in cache). With a pool, reserved: pages take memory as positions
  // are written and give it back when their sequence is cleared.
  internal::AlignedFloats keys, values;
  // bf16 and int8 keys lie a group of kKeyGroup positions at a time, each
  // group channel-major (kernels::Bf16Keys, Int8Keys): its positions'
  // bytes, whole.
  // int8 only: each head's key groups' lo and step per channel, (B, Hkv,
  // positions / kKeyGroup, 2, D); each value row's scale, (B, Hkv,
  // positions); and each head's open group's keys as given, (B, Hkv,
  // kKeyGroup, D), from which the group is coded again as positions join
  // it, so that a group's codes are always those of its own keys as given.
  internal::AlignedFloats key_params, value_scales, open_keys;
  std::vector<int64_t> lengths;  // (B)
  int64_t blocks_in_use = 0;     // Σ_b BlocksFor(lengths[b])

  bool pooled() const { return shape.block_positions > 0; }
  bool int8() const { return shape.precision == Precision::kInt8; }
  // Keys in groups of kKeyGroup positions, each channel-major (bf16, int8).
  bool grouped() const { return shape.precision != Precision::kFp32; }
  int64_t groups() const { return positions / kKeyGroup; }  // an int8 head's key groups
  float* KeyParams(int64_t b, int64_t h, int64_t group) const {
    return const_cast<float*>(key_params.data()) +
           ((b * shape.kv_heads + h) * groups() + group) * 2 * shape.key_dim;
  }
  float* ValueScale(int64_t b, int64_t h, int64_t t) const {
    return const_cast<float*>(value_scales.data()) + (b * shape.kv_heads + h) * positions + t;
  }
  float* OpenKey(int64_t b, int64_t h, int64_t t) const {
    return const_cast<float*>(open_keys.data()) +
           ((b * shape.kv_heads + h) * kKeyGroup + t % kKeyGroup) * shape.key_dim;
  }
  // The pool's blocks a sequence of `length` positions holds.
  int64_t BlocksFor(int64_t length) const {
    return pooled() ? (length + shape.block_positions - 1) / shape.block_positions : 0;
  }

  // The offset, in elements, of position t of head h of sequence b in an
  // array of `features` elements a position.
  int64_t Offset(int64_t b, int64_t h, int64_t t, int64_t features) const {
    return ((b * shape.kv_heads + h) * positions + t) * features;
  }
  // Where that position starts, as elements of type T.
  template <typename T>
  T* At(const internal::AlignedFloats& data, int64_t b, int64_t h, int64_t t,
        int64_t features) const {
    return reinterpret_cast<T*>(const_cast<float*>(data.data())) + Offset(b, h, t, features);
  }
  // The first `keys` positions of every sequence, (B, keys, Hkv, F) by strides.
  template <typename T>
  TensorView<const T> View(const internal::AlignedFloats& data, int64_t keys,
                           int64_t features) const {
    return TensorView<const T>(
        At<const T>(data, 0, 0, 0, features), {shape.batch, keys, shape.kv_heads, features},
        {shape.kv_heads * positions * features, features, positions * features, 1});
  }
  // A bf16 cache's first `keys` positions of keys, as the op reads them.
  ops::dot_product::Bf16KeyView Bf16Keys(int64_t keys_held) const {
    ops::dot_product::Bf16KeyView view;
    static_cast<TensorView<const uint16_t>&>(view) = View<uint16_t>(keys, keys_held, shape.key_dim);
    return view;
  }
  // An int8 cache's first `keys` positions, as the op reads them.
  ops::dot_product::Int8KeyView Int8Keys(int64_t keys_held) const {
    ops::dot_product::Int8KeyView view;
    static_cast<TensorView<const uint8_t>&>(view) = View<uint8_t>(keys, keys_held, shape.key_dim);
    view.params = key_params.data();
    view.params_strides[1] = groups() * 2 * shape.key_dim;
    view.params_strides[0] = shape.kv_heads * view.params_strides[1];
    return view;
  }
  ops::dot_product::Int8ValueView Int8Values(int64_t keys_held) const {
    ops::dot_product::Int8ValueView view;
    static_cast<TensorView<const int8_t>&>(view) = View<int8_t>(values, keys_held, shape.value_dim);
    view.scales = value_scales.data();
    view.scales_strides[1] = positions;
    view.scales_strides[0] = shape.kv_heads * positions;
    return view;
  }
  // Calls put(d, word) with each of a position's `features` elements,
  // `step` apart in `src`, rounded to bf16: a slice at a time, gathered
  // into a buffer on the stack.
  template <class Put>
  static void RoundEach(const float* src, int64_t step, int64_t features, Put put) {
    constexpr int64_t kSlice = 256;
    float gathered[kSlice];
    uint16_t words[kSlice];
    for (int64_t d0 = 0; d0 < features; d0 += kSlice) {
      const int64_t n = std::min(kSlice, features - d0);
      const float* from = src + d0 * step;
      if (step != 1) {
        for (int64_t d = 0; d < n; ++d) gathered[d] = from[d * step];
        from = gathered;
      }
      kernels::RoundToBf16(from, static_cast<size_t>(n), words);
      for (int64_t d = 0; d < n; ++d) put(d0 + d, words[d]);
    }
  }
  // Stores one position's `features` elements, `step` apart in `src`, as a
  // row at dst.
  void Store(const float* src, int64_t step, int64_t features, void* dst) const {
    if (element_bytes == 4) {
      auto* out = static_cast<float*>(dst);
      for (int64_t d = 0; d < features; ++d) out[d] = src[d * step];
      return;
    }
    auto* out = static_cast<uint16_t*>(dst);
    RoundEach(src, step, features, [out](int64_t d, uint16_t word) { out[d] = word; });
  }
  // Stores position t's key of head h of sequence b in a bf16 cache: each
  // word where kernels::Bf16KeyWord puts it in the position's group.
  void StoreBf16Key(const float* src, int64_t step, int64_t b, int64_t h, int64_t t) const {
    uint16_t* group = At<uint16_t>(keys, b, h, t / kKeyGroup * kKeyGroup, shape.key_dim);
    const auto lane = static_cast<size_t>(t % kKeyGroup),
               depth = static_cast<size_t>(shape.key_dim);
    RoundEach(src, step, shape.key_dim, [&](int64_t d, uint16_t word) {
      group[kernels::Bf16KeyWord(lane, static_cast<size_t>(d), depth)] = word;
    });
  }
  // Position t of head h of sequence b, as int8 codes: its key joins its
  // group's open keys, and where `code_group` the group is coded (again)
  // from them; its value is coded alone.
  void StoreInt8(const float* key, int64_t key_step, const float* value, int64_t value_step,
                 int64_t b, int64_t h, int64_t t, bool code_group) const {
    float* open = OpenKey(b, h, t);
    for (int64_t d = 0; d < shape.key_dim; ++d) open[d] = key[d * key_step];
    kernels::CodeValueRow(value, value_step, static_cast<size_t>(shape.value_dim),
                          At<int8_t>(values, b, h, t, shape.value_dim), ValueScale(b, h, t));
    if (!code_group) return;
    const int64_t first = t / kKeyGroup * kKeyGroup;
    kernels::CodeKeyGroup(OpenKey(b, h, first), shape.key_dim, static_cast<size_t>(t - first + 1),
                          static_cast<size_t>(shape.key_dim),
                          At<uint8_t>(keys, b, h, first, shape.key_dim),
                          KeyParams(b, h, t / kKeyGroup));
  }
  // Copies keys (rows, Hkv, D) and values (rows, Hkv, Dv) of checked views
  // to sequence b's positions from its length on (rounded to bf16, or
  // coded, where the cache holds bf16 or int8).
  void Copy(int64_t b, const ConstTensor& k, const ConstTensor& v, int64_t k_offset,
            int64_t v_offset) {
    const int64_t rows = k.dims[k.rank - 3];
    const int s = k.rank - 3;  // the views' position dim
    const int64_t held = lengths[static_cast<size_t>(b)];
    for (int64_t t = 0; t < rows; ++t) {
      for (int64_t h = 0; h < shape.kv_heads; ++h) {
        if (int8()) {
          // A group is coded when it fills and where the append ends: a
          // group's keys are coded once per append that reaches into it.
          const int64_t position = held + t;
          StoreInt8(k.data + k_offset + t * k.strides[s] + h * k.strides[s + 1], k.strides[s + 2],
                    v.data + v_offset + t * v.strides[s] + h * v.strides[s + 1], v.strides[s + 2],
                    b, h, position, position % kKeyGroup == kKeyGroup - 1 || t == rows - 1);
          continue;
        }
        const int64_t position = held + t;
        if (grouped()) {  // bf16
          StoreBf16Key(k.data + k_offset + t * k.strides[s] + h * k.strides[s + 1],
                       k.strides[s + 2], b, h, position);
        } else {
          Store(k.data + k_offset + t * k.strides[s] + h * k.strides[s + 1], k.strides[s + 2],
                shape.key_dim, At<char>(keys, b, h, position, shape.key_dim * element_bytes));
        }
        Store(v.data + v_offset + t * v.strides[s] + h * v.strides[s + 1], v.strides[s + 2],
              shape.value_dim, At<char>(values, b, h, held + t, shape.value_dim * element_bytes));
      }
    }
    lengths[static_cast<size_t>(b)] += rows;
  }
  // Sequences [first, first + count) attended by queries (count, N, Hq, D)
  // in one op call, out (count, N, Hq, Dv) and weights (count, Hq, N, L) or
  // empty, all checked (kv_cache_attend.cc).
  Status AttendRun(const internal::CallContext& call, int64_t first, int64_t count,
                   const ConstTensor& queries, const KvCacheAttendOptions& options,
                   const Tensor& out, const Tensor& weights) const;
  // The checks of Attend's options and of its queries' heads, (..., Hq, D).
  Status CheckAttend(const ConstTensor& queries, const KvCacheAttendOptions& options) const;
  // The checks of a packed call's per-sequence counts (`name`): (B,), each
  // >= 0, summing to the packed `rows`; where `held`, each at most its
  // sequence's length (queries are its newest positions), else each fitting
  // its capacity. Messages name the sequence.
  Status CheckCounts(const char* name, const TensorView<const int64_t>& counts, int64_t rows,
                     bool held) const {
    const std::string prefix = std::string(kv_cache_storage::kOp) + ": " + name;
    if (counts.rank != 1 || counts.data == nullptr || counts.dims[0] != shape.batch ||
        counts.strides[0] < 0 || counts.strides[0] > INT64_MAX / 8 / shape.batch) {
      return Status::InvalidArgument(
          prefix + (counts.data == nullptr ? " is null" : " has shape " + ShapeString(counts)) +
          "; want (B,) = (" + std::to_string(shape.batch) +
          ",) integers, one per sequence, by a stride >= 0");
    }
    int64_t total = 0;
    for (int64_t b = 0; b < shape.batch; ++b) {
      const int64_t count = counts.data[b * counts.strides[0]];
      const int64_t length = lengths[static_cast<size_t>(b)];
      if (count < 0) {
        return Status::InvalidArgument(prefix + "[" + std::to_string(b) + "] is " +
                                       std::to_string(count) + "; a count is >= 0");
      }
      if (held && count > length) {
        return Status::InvalidArgument(
            prefix + "[" + std::to_string(b) + "] is " + std::to_string(count) + " but sequence " +
            std::to_string(b) + " holds " + std::to_string(length) +
            " positions; its queries are its newest, so append their keys and values first");
      }
      if (!held) ATTNSCORE_RETURN_IF_ERROR(CheckRoom(b, count));
      total += count;  // each count below capacity or length: no overflow
    }
    if (total != rows) {
      return Status::InvalidArgument(prefix + " sum to " + std::to_string(total) +
                                     "; the packed rows are " + std::to_string(rows));
    }
    return Status::Ok();
  }
  // An int8 cache codes finite elements only: the first other one is refused.
  Status CheckCodable(const ConstTensor& k, const ConstTensor& v) const {
    if (!int8()) return Status::Ok();
    for (const auto& [name, t] : {std::pair{"keys", &k}, std::pair{"values", &v}}) {
      int64_t at[kMaxRank] = {};
      if (kv_cache_storage::HasNonFinite(*t) && kv_cache_storage::FindNonFinite(*t, 0, 0, at)) {
        std::string where;
        for (int d = 0; d < t->rank; ++d) where += (d > 0 ? ", " : "") + std::to_string(at[d]);
        return Status::InvalidArgument(
            std::string(kv_cache_storage::kOp) + ": an int8 cache holds finite " +
            "keys and values; " + name + "[" + where + "] is " +
            std::to_string(t->data[kv_cache_storage::ElementOffset(*t, at)]));
      }
    }
    return Status::Ok();
  }
  Status CheckRoom(int64_t b, int64_t rows) const {
    const int64_t held = lengths[static_cast<size_t>(b)];
    if (rows > shape.capacity - held) {
      return Status::InvalidArgument(std::string(kv_cache_storage::kOp) + ": sequence " +
                                     std::to_string(b) + " holds " + std::to_string(held) +
                                     " of its " + std::to_string(shape.capacity) + " positions; " +
                                     std::to_string(rows) + " more do not fit");
    }
    return Status::Ok();
  }
  // Takes from the pool the blocks rows(b) more positions need for each
  // sequence b, once CheckRoom has found they fit each capacity; or, where
  // too few are free, refuses, taking none. `what` names the append.
  template <class Rows>
  Status TakeBlocks(Rows rows, const std::string& what) {
    int64_t needed = 0;
    for (int64_t b = 0; b < shape.batch; ++b) {
      const int64_t held = lengths[static_cast<size_t>(b)];
      needed += BlocksFor(held + rows(b)) - BlocksFor(held);
    }
    if (needed > shape.blocks - blocks_in_use) {
      return Status::InvalidArgument(
          std::string(kv_cache_storage::kOp) + ": the pool has " +
          std::to_string(shape.blocks - blocks_in_use) + " of its " + std::to_string(shape.blocks) +
          " blocks of " + std::to_string(shape.block_positions) + " positions free; appending " +
          what + " needs " + std::to_string(needed));
    }
    blocks_in_use += needed;
    return Status::Ok();
  }
};

}  // namespace attnscore

#endif  // ATTNSCORE_API_KV_CACHE_STORAGE_H_
