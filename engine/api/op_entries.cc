// One Op::Impl per catalogue entry, each a thin call of the typed API: the
// generic call checks and computes exactly what the typed one does.
#include <algorithm>
#include <array>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "api/op_impl.h"
#include "attnscore/additive.h"
#include "attnscore/bilinear.h"
#include "attnscore/concat.h"
#include "attnscore/multihead.h"
#include "ops/multihead.h"

namespace attnscore {
namespace internal {
namespace {

using WeightMap = std::map<std::string, ConstTensor>;

ConstTensor Weight(const WeightMap& weights, const char* name) {
  const auto found = weights.find(name);
  return found == weights.end() ? ConstTensor() : found->second;
}

std::vector<int64_t> Shape3(const std::array<int64_t, 3>& dims) {
  return {dims[0], dims[1], dims[2]};
}
std::vector<int64_t> Shape4(const std::array<int64_t, 4>& dims) {
  return {dims[0], dims[1], dims[2], dims[3]};
}

class MaskedSoftmaxEntry : public Op::Impl {
 public:
  using Op::Impl::Impl;
  Status Check(const Engine& engine, const BoundCall& call, Shapes* shapes) const override {
    OutputShapes s;
    ATTNSCORE_RETURN_IF_ERROR(engine.CheckMaskedSoftmax(call.Floats(0), call.Lens(1), &s));
    *shapes = {Shape3(s.out)};
    return Status::Ok();
  }
  Status Run(const Engine& engine, const BoundCall& call) const override {
    return engine.MaskedSoftmax(call.Floats(0), call.Lens(1), call.outputs[0]);
  }
};

// Inputs (queries, keys, values, valid_lens), outputs (output,
// attention_weights) of rank 3: the dot product and the models but multihead.
class AttentionEntry : public Op::Impl {
 public:
  using CheckFn = std::function<Status(const Engine&, ConstTensor, ConstTensor, ConstTensor,
                                       const ValidLens&, OutputShapes*)>;
  using RunFn = std::function<Status(const Engine&, ConstTensor, ConstTensor, ConstTensor,
                                     const ValidLens&, Tensor, Tensor)>;
  AttentionEntry(const OpSpec& entry, CheckFn check, RunFn run)
      : Op::Impl(entry), check_(std::move(check)), run_(std::move(run)) {}

  Status Check(const Engine& engine, const BoundCall& call, Shapes* shapes) const override {
    OutputShapes s;
    ATTNSCORE_RETURN_IF_ERROR(
        check_(engine, call.Floats(0), call.Floats(1), call.Floats(2), call.Lens(3), &s));
    *shapes = {Shape3(s.out), Shape3(s.attention_weights)};
    return Status::Ok();
  }
  Status Run(const Engine& engine, const BoundCall& call) const override {
    return run_(engine, call.Floats(0), call.Floats(1), call.Floats(2), call.Lens(3),
                call.outputs[0], call.outputs[1]);
  }

 private:
  CheckFn check_;
  RunFn run_;
};

// A model class (AdditiveAttention, ConcatAttention, BilinearAttention) as
// an AttentionEntry that shares its ownership.
template <class Model>
std::unique_ptr<Op::Impl> ModelEntry(const OpSpec& spec, std::unique_ptr<Model> model) {
  std::shared_ptr<const Model> net(std::move(model));
  return std::make_unique<AttentionEntry>(
      spec,
      [net](const Engine&, ConstTensor q, ConstTensor k, ConstTensor v, const ValidLens& lens,
            OutputShapes* shapes) { return net->Check(q, k, v, lens, shapes); },
      [net](const Engine& engine, ConstTensor q, ConstTensor k, ConstTensor v,
            const ValidLens& lens, Tensor out,
            Tensor weights) { return net->Forward(engine, q, k, v, lens, out, weights); });
}

std::unique_ptr<Op::Impl> DotProductEntry(const OpSpec& spec) {
  return std::make_unique<AttentionEntry>(
      spec,
      [](const Engine& engine, ConstTensor q, ConstTensor k, ConstTensor v, const ValidLens& lens,
         OutputShapes* shapes) { return engine.CheckDotProductAttention(q, k, v, lens, shapes); },
      [](const Engine& engine, ConstTensor q, ConstTensor k, ConstTensor v, const ValidLens& lens,
         Tensor out,
         Tensor weights) { return engine.DotProductAttention(q, k, v, lens, out, weights); });
}

class MultiHeadOpEntry : public Op::Impl {
 public:
  using Op::Impl::Impl;
  Status Check(const Engine& engine, const BoundCall& call, Shapes* shapes) const override {
    MultiHeadShapes s;
    ATTNSCORE_RETURN_IF_ERROR(engine.CheckMultiHeadAttention(
        call.Floats(0), call.Floats(1), call.Floats(2), call.Lens(3), Options(call), &s));
    *shapes = {Shape4(s.out), Shape4(s.attention_weights)};
    return Status::Ok();
  }
  Status Run(const Engine& engine, const BoundCall& call) const override {
    return engine.MultiHeadAttention(call.Floats(0), call.Floats(1), call.Floats(2), call.Lens(3),
                                     Options(call), call.outputs[0], call.outputs[1]);
  }

 private:
  // The call's options with its sinks, ALiBi slopes and bias, inputs 4 to 6.
  static MultiHeadOptions Options(const BoundCall& call) {
    MultiHeadOptions options = call.options;
    options.sinks = call.Floats(4);
    options.alibi_slopes = call.Floats(5);
    options.bias = call.Floats(6);
    return options;
  }
};

class MultiHeadPackedEntry : public Op::Impl {
 public:
  using Op::Impl::Impl;
  Status Check(const Engine& engine, const BoundCall& call, Shapes* shapes) const override {
    std::array<int64_t, 3> out{};
    ATTNSCORE_RETURN_IF_ERROR(engine.CheckMultiHeadAttentionPacked(
        call.Floats(0), call.Floats(1), call.Floats(2), call.Offsets(3), call.Offsets(4),
        Options(call), &out));
    *shapes = {{out[0], out[1], out[2]}};
    return Status::Ok();
  }
  Status Run(const Engine& engine, const BoundCall& call) const override {
    return engine.MultiHeadAttentionPacked(call.Floats(0), call.Floats(1), call.Floats(2),
                                           call.Offsets(3), call.Offsets(4), Options(call),
                                           call.outputs[0]);
  }

 private:
  // The call's options with its sinks and ALiBi slopes, inputs 5 and 6.
  static MultiHeadOptions Options(const BoundCall& call) {
    MultiHeadOptions options = call.options;
    options.sinks = call.Floats(5);
    options.alibi_slopes = call.Floats(6);
    return options;
  }
};

class MultiHeadModelEntry : public Op::Impl {
 public:
  MultiHeadModelEntry(const OpSpec& entry, std::unique_ptr<MultiHeadAttention> model)
      : Op::Impl(entry), model_(std::move(model)) {
    model_params["num_heads"] = std::to_string(model_->num_heads());
    fixed_dims = {{"Dq", model_->query_size()},
                  {"Dk", model_->key_size()},
                  {"Dv", model_->value_size()},
                  {"H", model_->num_hiddens()},
                  {"heads", model_->num_heads()}};
  }
  Status Check(const Engine&, const BoundCall& call, Shapes* shapes) const override {
    MultiHeadShapes s;
    ATTNSCORE_RETURN_IF_ERROR(model_->Check(call.Floats(0), call.Floats(1), call.Floats(2),
                                            call.Lens(3), call.options.causal, &s));
    *shapes = {{s.out[0], s.out[1], s.out[2]}, Shape4(s.attention_weights)};
    return Status::Ok();
  }
  Status Run(const Engine& engine, const BoundCall& call) const override {
    return model_->Forward(engine, call.Floats(0), call.Floats(1), call.Floats(2), call.Lens(3),
                           call.options.causal, call.outputs[0], call.outputs[1]);
  }

 private:
  std::unique_ptr<MultiHeadAttention> model_;
};

// The sizes a model's weights fix, by the dim names of its spec.
void FixDims(const AdditiveAttention& model, Op::Impl* impl) {
  impl->fixed_dims = {
      {"Dq", model.query_size()}, {"Dk", model.key_size()}, {"H", model.hidden_size()}};
}
void FixDims(const ConcatAttention& model, Op::Impl* impl) {
  impl->fixed_dims = {{"Dq", model.query_size()},
                      {"Dk", model.key_size()},
                      {"M", model.value_rows()},
                      {"Dv", model.value_size()},
                      {"O", model.output_size()}};
}
void FixDims(const BilinearAttention& model, Op::Impl* impl) {
  impl->fixed_dims = {{"Dq", model.query_size()}, {"Dk", model.key_size()}};
}

// The typed model's Create or Load, then its entry.
template <class Model, class Make>
Status MakeModel(const OpSpec& spec, Make make, std::unique_ptr<Op::Impl>* impl) {
  std::unique_ptr<Model> model;
  ATTNSCORE_RETURN_IF_ERROR(make(&model));
  const Model& held = *model;
  *impl = ModelEntry(spec, std::move(model));
  FixDims(held, impl->get());
  return Status::Ok();
}

int64_t SizeOr(const ModelSizes& sizes, const char* name, int64_t otherwise) {
  const auto found = sizes.find(name);
  return found == sizes.end() ? otherwise : found->second;
}

}  // namespace

Status MakeOpImpl(const OpSpec& spec, const ModelSizes& sizes, const WeightMap& weights,
                  std::unique_ptr<Op::Impl>* impl) {
  const std::string& name = spec.name;
  if (name == "masked_softmax") {
    *impl = std::make_unique<MaskedSoftmaxEntry>(spec);
  } else if (name == "dot_product_attention") {
    *impl = DotProductEntry(spec);
  } else if (name == "multihead_attention") {
    *impl = std::make_unique<MultiHeadOpEntry>(spec);
  } else if (name == "multihead_attention_packed") {
    *impl = std::make_unique<MultiHeadPackedEntry>(spec);
  } else if (name == "kv_cache_attend" || name == "kv_cache_step") {
    return MakeKvCacheImpl(spec, sizes, impl);
  } else if (name == "additive") {
    return MakeModel<AdditiveAttention>(
        spec,
        [&](auto* model) {
          return AdditiveAttention::Create(Weight(weights, "W_q.weight"),
                                           Weight(weights, "W_k.weight"),
                                           Weight(weights, "w_v.weight"), model);
        },
        impl);
  } else if (name == "concat") {
    const int64_t query_size = SizeOr(sizes, "query_size", 0);
    ATTNSCORE_RETURN_IF_ERROR(MakeModel<ConcatAttention>(
        spec,
        [&](auto* model) {
          return ConcatAttention::Create(
              query_size, Weight(weights, "attn.weight"), Weight(weights, "attn.bias"),
              Weight(weights, "attn_combine.weight"), Weight(weights, "attn_combine.bias"), model);
        },
        impl));
    (*impl)->model_params["query_size"] = std::to_string(query_size);
  } else if (name == "bilinear") {
    return MakeModel<BilinearAttention>(
        spec,
        [&](auto* model) { return BilinearAttention::Create(Weight(weights, "W.weight"), model); },
        impl);
  } else if (name == "multihead") {
    MultiHeadWeights w;
    w.w_q = Weight(weights, "W_q.weight"), w.w_k = Weight(weights, "W_k.weight");
    w.w_v = Weight(weights, "W_v.weight"), w.w_o = Weight(weights, "W_o.weight");
    w.b_q = Weight(weights, "W_q.bias"), w.b_k = Weight(weights, "W_k.bias");
    w.b_v = Weight(weights, "W_v.bias"), w.b_o = Weight(weights, "W_o.bias");
    std::unique_ptr<MultiHeadAttention> model;
    ATTNSCORE_RETURN_IF_ERROR(MultiHeadAttention::Create(SizeOr(sizes, "num_heads", 0), w, &model));
    *impl = std::make_unique<MultiHeadModelEntry>(spec, std::move(model));
  } else {
    return Status::Internal("Op: the catalogue's entry '" + name + "' has no call");
  }
  return Status::Ok();
}

Status LoadOpImpl(const OpSpec& spec, const std::string& path, const ModelSizes& sizes,
                  std::unique_ptr<Op::Impl>* impl) {
  const std::string& name = spec.name;
  if (name == "additive") {
    return MakeModel<AdditiveAttention>(
        spec, [&](auto* model) { return AdditiveAttention::Load(path, model); }, impl);
  }
  if (name == "concat") {
    const int64_t query_size = SizeOr(sizes, "query_size", 0);
    ATTNSCORE_RETURN_IF_ERROR(MakeModel<ConcatAttention>(
        spec, [&](auto* model) { return ConcatAttention::Load(path, query_size, model); }, impl));
    (*impl)->model_params["query_size"] = std::to_string(query_size);
    return Status::Ok();
  }
  if (name == "bilinear") {
    return MakeModel<BilinearAttention>(
        spec, [&](auto* model) { return BilinearAttention::Load(path, model); }, impl);
  }
  if (name == "multihead") {
    std::unique_ptr<MultiHeadAttention> model;
    ATTNSCORE_RETURN_IF_ERROR(
        MultiHeadAttention::Load(path, SizeOr(sizes, "num_heads", 0), &model));
    *impl = std::make_unique<MultiHeadModelEntry>(spec, std::move(model));
    return Status::Ok();
  }
  return Status::InvalidArgument("Op::Load: '" + name + "' is an op, not a model in a file");
}

}  // namespace internal
}  // namespace attnscore
