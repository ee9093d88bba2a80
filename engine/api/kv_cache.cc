// KvCache: each sequence's keys and values kept heads-first, (Hkv, capacity,
// D) per sequence, so that a head's cached keys are one contiguous block
// (read in one stream by decoding): floats, bfloat16 words (rounded once,
// as they are appended), or int8 codes with their scales, that the
// multi-head op's decode form reads as they are (kv_cache_attend.cc).
#include "attnscore/kv_cache.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <new>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "api/engine_access.h"
#include "api/kv_cache_bytes.h"
#include "api/kv_cache_storage.h"
#include "base/aligned_floats.h"
#include "base/call_scope.h"
#include "base/checks.h"
#include "ops/multihead.h"

namespace attnscore {
namespace {

using internal::CheckTensor;
using internal::kAnyDim;
using kv_cache_storage::kOp;

// Bytes of an element stored in `precision`.
int64_t ElementBytes(Precision precision) {
  switch (precision) {
    case Precision::kBf16:
      return 2;
    case Precision::kInt8:
      return 1;
    default:
      return 4;
  }
}

// A count the checks work out in double, as a reader wants it: an integer,
// or past 2^53 (where a double stops counting one by one) three digits and
// an exponent.
std::string CountText(double count) {
  char text[32];
  std::snprintf(text, sizeof text, count < 9007199254740992.0 ? "%.0f" : "%.3g", count);
  return text;
}

// The pool's two numbers, once Create has found every dim at least 1 and
// B · capacity · Hkv · (D + Dv) at most 2^40: both 0 (no pool), or at
// least 1 each, a block of one head's keys or values whole pages, and with
// capacity rounded up to whole blocks still at most 2^40 floats.
Status CheckPoolShape(const KvCacheShape& shape) {
  const std::string call = "KvCache::Create: ";
  if (shape.block_positions == 0 && shape.blocks == 0) return Status::Ok();
  for (const auto& [name, size] :
       {std::pair{"block_positions", shape.block_positions}, std::pair{"blocks", shape.blocks}}) {
    if (size < 1) {
      return Status::InvalidArgument(call + name + " is " + std::to_string(size) +
                                     "; a pool needs at least 1 (or both 0 for none)");
    }
  }
  const int64_t multiple =
      KvCache::BlockPositionsMultiple(shape.key_dim, shape.value_dim, shape.precision);
  if (shape.block_positions % multiple != 0) {
    return Status::InvalidArgument(
        call + "block_positions is " + std::to_string(shape.block_positions) + "; a block of a " +
        "head's keys (D = " + std::to_string(shape.key_dim) + ") and of its values (Dv = " +
        std::to_string(shape.value_dim) + "), in " + PrecisionName(shape.precision) +
        ", must be whole " + std::to_string(internal::AlignedFloats::PageBytes()) +
        "-byte pages, so block_positions must be a multiple of " + std::to_string(multiple));
  }
  const double blocks_per_sequence =
      std::ceil(static_cast<double>(shape.capacity) / static_cast<double>(shape.block_positions));
  const double floats = static_cast<double>(shape.batch) * blocks_per_sequence *
                        static_cast<double>(shape.block_positions) *
                        static_cast<double>(shape.kv_heads) *
                        (static_cast<double>(shape.key_dim) + static_cast<double>(shape.value_dim));
  if (floats > 1099511627776.0) {
    return Status::InvalidArgument(call +
                                   "B · capacity rounded up to whole blocks · Hkv · (D + Dv) is " +
                                   CountText(floats) + " floats, more than 2^40");
  }
  return Status::Ok();
}

}  // namespace

KvCache::KvCache(std::unique_ptr<Storage> storage) : storage_(std::move(storage)) {}
KvCache::~KvCache() = default;

int64_t KvCache::BlockPositionsMultiple(int64_t key_dim, int64_t value_dim, Precision precision) {
  if (key_dim < 1 || value_dim < 1) return 0;
  const auto page = static_cast<int64_t>(internal::AlignedFloats::PageBytes());
  const int64_t bytes = ElementBytes(precision);
  // The fewest positions whose rows of `features` elements are whole pages:
  // page / gcd(page, bytes · features). features is taken modulo the page:
  // bytes · (features mod page) ≡ bytes · features (mod page), and the
  // product stays below 4 · page, whatever the dim.
  const auto whole_pages = [page, bytes](int64_t features) {
    return page / std::gcd(page, (features % page) * bytes);
  };
  const int64_t multiple = std::lcm(whole_pages(key_dim), whole_pages(value_dim));
  // bf16 and int8 blocks are also whole key groups (int8's share scales).
  return precision == Precision::kFp32 ? multiple : std::lcm(multiple, kKeyGroup);
}

Status KvCache::Create(const KvCacheShape& shape, std::unique_ptr<KvCache>* cache) {
  if (cache == nullptr) return Status::InvalidArgument("KvCache::Create: cache is null");
  if (shape.precision != Precision::kFp32 && shape.precision != Precision::kBf16 &&
      shape.precision != Precision::kInt8) {
    return Status::InvalidArgument("KvCache::Create: precision is " +
                                   std::to_string(static_cast<int>(shape.precision)) +
                                   ", not a Precision (fp32, bf16 or int8)");
  }
  const std::pair<const char*, int64_t> dims[] = {{"batch", shape.batch},
                                                  {"capacity", shape.capacity},
                                                  {"kv_heads", shape.kv_heads},
                                                  {"key_dim", shape.key_dim},
                                                  {"value_dim", shape.value_dim}};
  // Each dim at least 1, and B · capacity · Hkv · (D + Dv) floats at most 2^40.
  double floats = static_cast<double>(shape.key_dim) + static_cast<double>(shape.value_dim);
  for (const auto& [name, size] : dims) {
    if (size < 1) {
      return Status::InvalidArgument(std::string("KvCache::Create: ") + name + " is " +
                                     std::to_string(size) + "; it must be at least 1");
    }
    if (name != std::string("key_dim") && name != std::string("value_dim")) {
      floats *= static_cast<double>(size);
    }
  }
  if (floats > 1099511627776.0) {
    return Status::InvalidArgument("KvCache::Create: B · capacity · Hkv · (D + Dv) is " +
                                   CountText(floats) + " floats, more than 2^40");
  }
  ATTNSCORE_RETURN_IF_ERROR(CheckPoolShape(shape));
  return internal::Guarded("KvCache::Create", [&] {
    auto storage = std::make_unique<Storage>();
    storage->shape = shape;
    // Whole blocks (bf16 and int8 blocks are whole key groups), or whole key groups.
    const int64_t block = shape.block_positions > 0 ? shape.block_positions
                          : storage->grouped()      ? kKeyGroup
                                                    : 1;
    storage->positions = (shape.capacity + block - 1) / block * block;
    storage->element_bytes = ElementBytes(shape.precision);
    // The floats whose bytes hold the elements.
    const auto floats_of = [&](int64_t features) {
      const int64_t elements = shape.batch * shape.kv_heads * storage->positions * features;
      return static_cast<size_t>((elements * storage->element_bytes + 3) / 4);
    };
    const auto make = [&](size_t floats) {
      return storage->pooled() ? internal::AlignedFloats::Reserved(floats)
                               : internal::AlignedFloats(floats);
    };
    storage->keys = make(floats_of(shape.key_dim));
    storage->values = make(floats_of(shape.value_dim));
    if (storage->int8()) {
      const int64_t heads = shape.batch * shape.kv_heads;
      storage->key_params =
          make(static_cast<size_t>(heads * storage->groups() * 2 * shape.key_dim));
      storage->value_scales = make(static_cast<size_t>(heads * storage->positions));
      storage->open_keys =
          internal::AlignedFloats(static_cast<size_t>(heads * kKeyGroup * shape.key_dim));
    }
    storage->lengths.assign(static_cast<size_t>(shape.batch), 0);
    cache->reset(new KvCache(std::move(storage)));
    return Status::Ok();
  });
}

const KvCacheShape& KvCache::shape() const { return storage_->shape; }

int64_t KvCache::length(int64_t sequence) const {
  if (sequence < 0 || sequence >= storage_->shape.batch) return 0;
  return storage_->lengths[static_cast<size_t>(sequence)];
}

int64_t KvCache::blocks_in_use() const { return storage_->blocks_in_use; }

Status KvCache::Append(ConstTensor keys, ConstTensor values) {
  const KvCacheShape& s = storage_->shape;
  ATTNSCORE_RETURN_IF_ERROR(
      CheckTensor(kOp, "keys", keys, {s.batch, kAnyDim, s.kv_heads, s.key_dim}, "(B, T, Hkv, D)"));
  const int64_t rows = keys.dims[1];
  ATTNSCORE_RETURN_IF_ERROR(CheckTensor(
      kOp, "values", values, {s.batch, rows, s.kv_heads, s.value_dim}, "(B, T, Hkv, Dv)"));
  for (int64_t b = 0; b < s.batch; ++b) ATTNSCORE_RETURN_IF_ERROR(storage_->CheckRoom(b, rows));
  ATTNSCORE_RETURN_IF_ERROR(storage_->CheckCodable(keys, values));
  ATTNSCORE_RETURN_IF_ERROR(storage_->TakeBlocks(
      [rows](int64_t) { return rows; }, std::to_string(rows) + " positions to every sequence"));
  for (int64_t b = 0; b < s.batch; ++b) {
    storage_->Copy(b, keys, values, b * keys.strides[0], b * values.strides[0]);
  }
  return Status::Ok();
}

Status KvCache::AppendPacked(ConstTensor keys, ConstTensor values,
                             TensorView<const int64_t> counts) {
  const KvCacheShape& s = storage_->shape;
  ATTNSCORE_RETURN_IF_ERROR(
      CheckTensor(kOp, "keys", keys, {kAnyDim, s.kv_heads, s.key_dim}, "(T, Hkv, D)"));
  const int64_t rows = keys.dims[0];
  ATTNSCORE_RETURN_IF_ERROR(
      CheckTensor(kOp, "values", values, {rows, s.kv_heads, s.value_dim}, "(T, Hkv, Dv)"));
  ATTNSCORE_RETURN_IF_ERROR(storage_->CheckCounts("counts", counts, rows, /*held=*/false));
  ATTNSCORE_RETURN_IF_ERROR(storage_->CheckCodable(keys, values));
  // The counts as checked, read once (whatever memory they lie in).
  std::vector<int64_t> per_sequence(static_cast<size_t>(s.batch));
  for (int64_t b = 0; b < s.batch; ++b) {
    per_sequence[static_cast<size_t>(b)] = counts.data[b * counts.strides[0]];
  }
  const auto count = [&](int64_t b) { return per_sequence[static_cast<size_t>(b)]; };
  ATTNSCORE_RETURN_IF_ERROR(
      storage_->TakeBlocks(count, std::to_string(rows) + " packed positions"));
  // Sequence b's rows, from the packed row after those of the ones before it.
  for (int64_t b = 0, row = 0; b < s.batch; row += count(b), ++b) {
    if (count(b) == 0) continue;
    const ConstTensor k_b(keys.data + row * keys.strides[0], {count(b), s.kv_heads, s.key_dim},
                          {keys.strides[0], keys.strides[1], keys.strides[2]});
    const ConstTensor v_b(values.data + row * values.strides[0],
                          {count(b), s.kv_heads, s.value_dim},
                          {values.strides[0], values.strides[1], values.strides[2]});
    storage_->Copy(b, k_b, v_b, 0, 0);
  }
  return Status::Ok();
}

Status KvCache::AppendTo(int64_t sequence, ConstTensor keys, ConstTensor values) {
  const KvCacheShape& s = storage_->shape;
  if (sequence < 0 || sequence >= s.batch) {
    return Status::InvalidArgument(std::string(kOp) + ": sequence is " + std::to_string(sequence) +
                                   "; the cache has sequences 0.." + std::to_string(s.batch - 1));
  }
  ATTNSCORE_RETURN_IF_ERROR(
      CheckTensor(kOp, "keys", keys, {kAnyDim, s.kv_heads, s.key_dim}, "(T, Hkv, D)"));
  const int64_t rows = keys.dims[0];
  ATTNSCORE_RETURN_IF_ERROR(
      CheckTensor(kOp, "values", values, {rows, s.kv_heads, s.value_dim}, "(T, Hkv, Dv)"));
  ATTNSCORE_RETURN_IF_ERROR(storage_->CheckRoom(sequence, rows));
  ATTNSCORE_RETURN_IF_ERROR(storage_->CheckCodable(keys, values));
  ATTNSCORE_RETURN_IF_ERROR(storage_->TakeBlocks(
      [rows, sequence](int64_t b) { return b == sequence ? rows : 0; },
      std::to_string(rows) + " positions to sequence " + std::to_string(sequence)));
  storage_->Copy(sequence, keys, values, 0, 0);
  return Status::Ok();
}

Status KvCache::Clear(int64_t sequence) {
  if (sequence < 0 || sequence >= storage_->shape.batch) {
    return Status::InvalidArgument(std::string(kOp) + ": sequence is " + std::to_string(sequence) +
                                   "; the cache has sequences 0.." +
                                   std::to_string(storage_->shape.batch - 1));
  }
  Storage& s = *storage_;
  const int64_t held = s.lengths[static_cast<size_t>(sequence)];
  if (s.pooled()) {
    // Its blocks' pages, head by head: whole pages, as CheckPoolShape made them.
    const int64_t written = s.BlocksFor(held) * s.shape.block_positions;
    for (int64_t h = 0; h < s.shape.kv_heads; ++h) {
      s.keys.Discard(
          static_cast<size_t>(s.Offset(sequence, h, 0, s.shape.key_dim) * s.element_bytes / 4),
          static_cast<size_t>(written * s.shape.key_dim * s.element_bytes / 4));
      s.values.Discard(
          static_cast<size_t>(s.Offset(sequence, h, 0, s.shape.value_dim) * s.element_bytes / 4),
          static_cast<size_t>(written * s.shape.value_dim * s.element_bytes / 4));
    }
    if (s.int8()) {  // the sequence's scales, but for the pages it shares with its neighbours'
      const int64_t heads = s.shape.kv_heads;
      const int64_t params = s.groups() * 2 * s.shape.key_dim;
      s.key_params.Discard(static_cast<size_t>(sequence * heads * params),
                           static_cast<size_t>(heads * params));
      s.value_scales.Discard(static_cast<size_t>(sequence * heads * s.positions),
                             static_cast<size_t>(heads * s.positions));
    }
    s.blocks_in_use -= s.BlocksFor(held);
  }
  s.lengths[static_cast<size_t>(sequence)] = 0;
  return Status::Ok();
}

std::vector<std::pair<const void*, size_t>> internal::KvCacheBytes::Held(const KvCache& cache) {
  const KvCache::Storage& s = *cache.storage_;
  std::vector<std::pair<const void*, size_t>> spans;
  for (int64_t b = 0; b < s.shape.batch; ++b) {
    const auto held = static_cast<size_t>(s.lengths[static_cast<size_t>(b)] * s.element_bytes);
    for (int64_t h = 0; h < s.shape.kv_heads; ++h) {
      spans.emplace_back(s.At<char>(s.keys, b, h, 0, s.shape.key_dim * s.element_bytes),
                         held * static_cast<size_t>(s.shape.key_dim));
    }
    for (int64_t h = 0; h < s.shape.kv_heads; ++h) {
      spans.emplace_back(s.At<char>(s.values, b, h, 0, s.shape.value_dim * s.element_bytes),
                         held * static_cast<size_t>(s.shape.value_dim));
    }
    if (!s.int8()) continue;
    // Its scales: each key group's lo and step, each value row's scale.
    const int64_t length = s.lengths[static_cast<size_t>(b)];
    const auto key_groups = static_cast<size_t>((length + kKeyGroup - 1) / kKeyGroup);
    for (int64_t h = 0; h < s.shape.kv_heads; ++h) {
      spans.emplace_back(s.KeyParams(b, h, 0),
                         key_groups * 2 * static_cast<size_t>(s.shape.key_dim) * sizeof(float));
      spans.emplace_back(s.ValueScale(b, h, 0), static_cast<size_t>(length) * sizeof(float));
    }
  }
  return spans;
}

}  // namespace attnscore
