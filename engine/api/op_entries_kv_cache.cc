// The catalogue's KV cache entries (kv_cache_attend, kv_cache_step): each
// Op holds a cache of its own, made from its model parameters.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "api/op_impl.h"
#include "attnscore/kv_cache.h"
#include "base/checks.h"
#include "ops/multihead.h"
#include "ops/multihead_window.h"

namespace attnscore {
namespace internal {
namespace {

using internal::CheckTensor;
using internal::kAnyDim;

// A cache of its own and a lock: each Run appends, then attends, as one
// step (kv_cache_attend: every sequence the same count; kv_cache_step:
// packed rows with a count per sequence).
class CacheEntry : public Op::Impl {
 public:
  CacheEntry(const OpSpec& entry, std::unique_ptr<KvCache> cache)
      : Op::Impl(entry), cache_(std::move(cache)) {
    const KvCacheShape& s = cache_->shape();
    for (const auto& [name, value] :
         {std::pair{"batch", s.batch}, std::pair{"capacity", s.capacity},
          std::pair{"kv_heads", s.kv_heads}, std::pair{"key_dim", s.key_dim},
          std::pair{"value_dim", s.value_dim}, std::pair{"block_positions", s.block_positions},
          std::pair{"blocks", s.blocks}}) {
      model_params[name] = std::to_string(value);
    }
    fixed_dims = {{"B", s.batch}, {"Hkv", s.kv_heads}, {"D", s.key_dim}, {"Dv", s.value_dim}};
  }

 protected:
  // The call's score options: its parameters, and its sinks, ALiBi slopes
  // and (where it has one) bias at inputs `sinks` onwards.
  static KvCacheAttendOptions Options(const BoundCall& call, size_t sinks) {
    KvCacheAttendOptions options;
    options.scale = call.options.scale;
    options.softcap = call.options.softcap;
    options.window = call.options.window;
    options.sinks = call.Floats(sinks);
    options.alibi_slopes = call.Floats(sinks + 1);
    if (sinks + 2 < call.inputs.size()) options.bias = call.Floats(sinks + 2);
    return options;
  }
  // The checks of the options that need no sizes: scale, cap and window.
  static Status CheckParams(const BoundCall& call) {
    ATTNSCORE_RETURN_IF_ERROR(
        ops::CheckScoreOptions("KvCache", call.options.scale, call.options.softcap));
    return ops::CheckWindow("KvCache", call.options.window);
  }
  // Queries with `heads` query heads, a multiple of the cache's.
  Status CheckHeads(const ConstTensor& queries, int64_t heads) const {
    if (heads % cache_->shape().kv_heads == 0) return Status::Ok();
    return Status::InvalidArgument("KvCache: queries " + ShapeString(queries) + " have " +
                                   std::to_string(heads) + " heads; the cache's " +
                                   std::to_string(cache_->shape().kv_heads) +
                                   " key-value heads must divide them");
  }
  // What the attend would refuse of the outputs, checked before anything is
  // appended: each given output of the shape Check found (its dims named by
  // `layouts`), writable, and sharing no memory with the queries or the
  // views `read`.
  static Status CheckOutputs(const BoundCall& call, const Shapes& shapes,
                             const std::vector<const char*>& layouts,
                             const MultiHeadOptions& read) {
    static const char* const kNames[] = {"out", "attention_weights"};
    Tensor given[2];
    for (size_t o = 0; o < call.outputs.size() && o < 2; ++o) {
      const Tensor& out = call.outputs[o];
      if (out.empty()) continue;
      const std::vector<int64_t>& want = shapes[o];  // rank 3 or 4
      ATTNSCORE_RETURN_IF_ERROR(
          want.size() == 3
              ? CheckTensor("KvCache", kNames[o], out, {want[0], want[1], want[2]}, layouts[o])
              : CheckTensor("KvCache", kNames[o], out, {want[0], want[1], want[2], want[3]},
                            layouts[o]));
      given[o] = out;
    }
    ATTNSCORE_RETURN_IF_ERROR(internal::CheckOutputsApart(
        "KvCache", {{"queries", call.Floats(0)}}, given[0], given[1], ValidLens::None(), 1, 1));
    return ops::OptionsApart("KvCache", read, given[0], given[1]);
  }

  mutable std::mutex mutex_;
  std::unique_ptr<KvCache> cache_;
};

class KvCacheEntry : public CacheEntry {
 public:
  using CacheEntry::CacheEntry;

  Status Check(const Engine&, const BoundCall& call, Shapes* shapes) const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return CheckStep(call, shapes);
  }

  Status Run(const Engine& engine, const BoundCall& call) const override {
    std::lock_guard<std::mutex> lock(mutex_);
    Shapes shapes;
    ATTNSCORE_RETURN_IF_ERROR(CheckStep(call, &shapes));
    ATTNSCORE_RETURN_IF_ERROR(
        CheckOutputs(call, shapes, {"(B, N, Hq, Dv)", "(B, Hq, N, L)"}, Terms(call)));
    if (call.inputs[1] != nullptr) {
      ATTNSCORE_RETURN_IF_ERROR(cache_->Append(call.Floats(1), call.Floats(2)));
    }
    return cache_->Attend(engine, call.Floats(0), Options(call, 3), call.outputs[0],
                          call.outputs[1]);
  }

 private:
  // The step's shapes, checked before anything is appended: keys and values
  // come together, the queries are (B, N, Hq, D) with N at most what every
  // sequence will hold, and the options are as Attend will find them.
  Status CheckStep(const BoundCall& call, Shapes* shapes) const {
    const KvCacheShape& s = cache_->shape();
    ATTNSCORE_RETURN_IF_ERROR(CheckParams(call));
    const ConstTensor q = call.Floats(0), k = call.Floats(1);
    if ((call.inputs[1] == nullptr) != (call.inputs[2] == nullptr)) {
      return Status::InvalidArgument("KvCache: keys and values are appended together; got one");
    }
    const int64_t appended = call.inputs[1] != nullptr && k.rank == 4 ? k.dims[1] : 0;
    ATTNSCORE_RETURN_IF_ERROR(CheckTensor("KvCache", "queries", q,
                                          {s.batch, kAnyDim, kAnyDim, s.key_dim}, "(B, N, Hq, D)"));
    int64_t longest = 0;
    for (int64_t b = 0; b < s.batch; ++b) {
      const int64_t held = cache_->length(b) + appended;
      if (held < q.dims[1]) {
        return Status::InvalidArgument("KvCache: sequence " + std::to_string(b) + " will hold " +
                                       std::to_string(held) + " positions but queries " +
                                       ShapeString(q) + " are its newest " +
                                       std::to_string(q.dims[1]));
      }
      longest = std::max(longest, held);
    }
    ATTNSCORE_RETURN_IF_ERROR(CheckHeads(q, q.dims[2]));
    ATTNSCORE_RETURN_IF_ERROR(
        ops::CheckScoreTerms("KvCache", Terms(call), s.batch, q.dims[2], q.dims[1], longest));
    *shapes = {{s.batch, q.dims[1], q.dims[2], s.value_dim},
               {s.batch, q.dims[2], q.dims[1], longest}};
    return Status::Ok();
  }
  // The views the options read: sinks, ALiBi slopes, bias (inputs 3 to 5).
  static MultiHeadOptions Terms(const BoundCall& call) {
    MultiHeadOptions terms;
    terms.sinks = call.Floats(3);
    terms.alibi_slopes = call.Floats(4);
    terms.bias = call.Floats(5);
    return terms;
  }
};

// One server step: packed keys and values (T, Hkv, ·) appended with a
// count per sequence, then packed queries (Tq, Hq, D) with a count per
// sequence (KvCache::AppendPacked, AttendPacked).
class KvCacheStepEntry : public CacheEntry {
 public:
  using CacheEntry::CacheEntry;

  Status Check(const Engine&, const BoundCall& call, Shapes* shapes) const override {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<int64_t> counts, query_counts;
    return CheckStep(call, &counts, &query_counts, shapes);
  }

  Status Run(const Engine& engine, const BoundCall& call) const override {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<int64_t> counts, query_counts;
    Shapes shapes;
    ATTNSCORE_RETURN_IF_ERROR(CheckStep(call, &counts, &query_counts, &shapes));
    ATTNSCORE_RETURN_IF_ERROR(CheckOutputs(call, shapes, {"(T, Hq, Dv)"}, Terms(call)));
    const auto view = [&](const std::vector<int64_t>& per) {
      return TensorView<const int64_t>(per.data(), {cache_->shape().batch});
    };
    if (call.inputs[2] != nullptr) {
      ATTNSCORE_RETURN_IF_ERROR(cache_->AppendPacked(call.Floats(2), call.Floats(3), view(counts)));
    }
    return cache_->AttendPacked(engine, call.Floats(0), view(query_counts), Options(call, 5),
                                call.outputs[0]);
  }

 private:
  // A count per sequence from an int32 or int64 input (B,): each >= 0.
  Status CountsOf(const NamedTensor* t, const char* name, std::vector<int64_t>* counts) const {
    const int64_t batch = cache_->shape().batch;
    if (t->rank != 1 || t->dims[0] != batch) {
      return Status::InvalidArgument("KvCache: " + std::string(name) + " has " +
                                     std::to_string(t->rank == 1 ? t->dims[0] : -1) +
                                     " counts; want (B,) = (" + std::to_string(batch) + ",)");
    }
    counts->resize(static_cast<size_t>(batch));
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t count = t->dtype == DataType::kInt64 ? static_cast<const int64_t*>(t->data)[b]
                                                         : static_cast<const int32_t*>(t->data)[b];
      if (count < 0) {
        return Status::InvalidArgument("KvCache: " + std::string(name) + "[" + std::to_string(b) +
                                       "] is " + std::to_string(count) + "; a count is >= 0");
      }
      (*counts)[static_cast<size_t>(b)] = count;
    }
    return Status::Ok();
  }

  // The step's counts and shapes, checked before anything is appended:
  // keys, values and counts come together, each sequence's appended rows
  // fit its capacity, and its queries are among the positions it will hold.
  Status CheckStep(const BoundCall& call, std::vector<int64_t>* counts,
                   std::vector<int64_t>* query_counts, Shapes* shapes) const {
    const KvCacheShape& s = cache_->shape();
    ATTNSCORE_RETURN_IF_ERROR(CheckParams(call));
    const bool appends = call.inputs[2] != nullptr;
    if (appends != (call.inputs[3] != nullptr) || appends != (call.inputs[4] != nullptr)) {
      return Status::InvalidArgument(
          "KvCache: keys, values and counts are appended together; got only some");
    }
    counts->assign(static_cast<size_t>(s.batch), 0);
    if (appends) ATTNSCORE_RETURN_IF_ERROR(CountsOf(call.inputs[4], "counts", counts));
    ATTNSCORE_RETURN_IF_ERROR(CountsOf(call.inputs[1], "query_counts", query_counts));
    const ConstTensor q = call.Floats(0);
    ATTNSCORE_RETURN_IF_ERROR(
        CheckTensor("KvCache", "queries", q, {kAnyDim, kAnyDim, s.key_dim}, "(Tq, Hq, D)"));
    ATTNSCORE_RETURN_IF_ERROR(CheckHeads(q, q.dims[1]));
    int64_t total = 0;  // each count below capacity: no overflow
    for (int64_t b = 0; b < s.batch; ++b) {
      const int64_t held = cache_->length(b), added = (*counts)[static_cast<size_t>(b)];
      if (added > s.capacity - held) {
        return Status::InvalidArgument("KvCache: sequence " + std::to_string(b) + " holds " +
                                       std::to_string(held) + " of its " +
                                       std::to_string(s.capacity) + " positions; " +
                                       std::to_string(added) + " more do not fit");
      }
      if ((*query_counts)[static_cast<size_t>(b)] > held + added) {
        return Status::InvalidArgument("KvCache: query_counts[" + std::to_string(b) + "] is " +
                                       std::to_string((*query_counts)[static_cast<size_t>(b)]) +
                                       " but sequence " + std::to_string(b) + " will hold " +
                                       std::to_string(held + added) + " positions");
      }
      total += (*query_counts)[static_cast<size_t>(b)];
    }
    if (total != q.dims[0]) {
      return Status::InvalidArgument("KvCache: query_counts sum to " + std::to_string(total) +
                                     "; the packed rows are " + std::to_string(q.dims[0]));
    }
    ATTNSCORE_RETURN_IF_ERROR(
        ops::CheckScoreTerms("KvCache", Terms(call), s.batch, q.dims[1], 1, 1));
    *shapes = {{q.dims[0], q.dims[1], s.value_dim}};
    return Status::Ok();
  }
  // The views the options read: sinks and ALiBi slopes (inputs 5 and 6).
  static MultiHeadOptions Terms(const BoundCall& call) {
    MultiHeadOptions terms;
    terms.sinks = call.Floats(5);
    terms.alibi_slopes = call.Floats(6);
    return terms;
  }
};

int64_t SizeOr(const ModelSizes& sizes, const char* name, int64_t otherwise) {
  const auto found = sizes.find(name);
  return found == sizes.end() ? otherwise : found->second;
}

}  // namespace

Status MakeKvCacheImpl(const OpSpec& spec, const ModelSizes& sizes,
                       std::unique_ptr<Op::Impl>* impl) {
  KvCacheShape shape;
  shape.batch = SizeOr(sizes, "batch", 1);
  shape.capacity = SizeOr(sizes, "capacity", 0);
  shape.kv_heads = SizeOr(sizes, "kv_heads", 1);
  shape.key_dim = SizeOr(sizes, "key_dim", 0);
  shape.value_dim = SizeOr(sizes, "value_dim", 0);
  shape.block_positions = SizeOr(sizes, "block_positions", 0);
  shape.blocks = SizeOr(sizes, "blocks", 0);
  // kv_precision's index among its choices: fp32, bf16, int8.
  constexpr Precision kChoices[] = {Precision::kFp32, Precision::kBf16, Precision::kInt8};
  shape.precision = kChoices[std::clamp<int64_t>(SizeOr(sizes, "kv_precision", 0), 0, 2)];
  std::unique_ptr<KvCache> cache;
  ATTNSCORE_RETURN_IF_ERROR(KvCache::Create(shape, &cache));
  if (spec.name == "kv_cache_step") {
    *impl = std::make_unique<KvCacheStepEntry>(spec, std::move(cache));
  } else {
    *impl = std::make_unique<KvCacheEntry>(spec, std::move(cache));
  }
  return Status::Ok();
}

}  // namespace internal
}  // namespace attnscore
