// What an Op holds: its entry's spec, its model parameters, and the call
// that checks and runs bound inputs. api/op.cc binds a caller's named
// tensors and text parameters; api/op_entries.cc has one Impl per entry.
#ifndef ATTNSCORE_API_OP_IMPL_H_
#define ATTNSCORE_API_OP_IMPL_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "attnscore/catalogue.h"
#include "attnscore/multihead_options.h"
#include "attnscore/valid_lens.h"

namespace attnscore {

// A call's inputs and outputs by their spec's position; an absent optional
// input is null, an output not asked for an empty Tensor.
struct BoundCall {
  std::vector<const NamedTensor*> inputs;
  std::vector<Tensor> outputs;
  MultiHeadOptions options;  // causal and scale, where the entry takes them

  ConstTensor Floats(size_t input) const;       // empty when absent
  ValidLens Lens(size_t input) const;           // None when absent
  SequenceOffsets Offsets(size_t input) const;  // none when absent
};

using Shapes = std::vector<std::vector<int64_t>>;

struct Op::Impl {
  explicit Impl(const OpSpec& entry) : spec(entry) {}
  virtual ~Impl() = default;

  // Every check of Run, and each output's shape in spec.outputs' order.
  virtual Status Check(const Engine& engine, const BoundCall& call, Shapes* shapes) const = 0;
  virtual Status Run(const Engine& engine, const BoundCall& call) const = 0;

  const OpSpec& spec;
  Params model_params;
  std::map<std::string, int64_t> fixed_dims;
};

namespace internal {

// A model's parameters parsed: `params` by their spec's names, each an
// integer, or for a choice its index among the spec's choices.
using ModelSizes = std::map<std::string, int64_t>;

// The entry `spec` made from its model parameters and weights (by name,
// already checked against spec.weights).
Status MakeOpImpl(const OpSpec& spec, const ModelSizes& sizes,
                  const std::map<std::string, ConstTensor>& weights,
                  std::unique_ptr<Op::Impl>* impl);
// A KV cache entry (kv_cache_attend, kv_cache_step) with a cache of the
// sizes its model parameters give (api/op_entries_kv_cache.cc).
Status MakeKvCacheImpl(const OpSpec& spec, const ModelSizes& sizes,
                       std::unique_ptr<Op::Impl>* impl);
// The model `spec` loaded from a .safetensors file by its typed Load.
Status LoadOpImpl(const OpSpec& spec, const std::string& path, const ModelSizes& sizes,
                  std::unique_ptr<Op::Impl>* impl);

}  // namespace internal
}  // namespace attnscore

#endif  // ATTNSCORE_API_OP_IMPL_H_
