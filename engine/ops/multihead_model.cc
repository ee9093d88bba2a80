// d2l's MultiHeadAttention module (docs/semantics.md section 5.2): the four
// projections by oneDNN, the heads by the multi-head op over strided views
// of the projections (no copy into another layout).
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/checks.h"
#include "base/workspace.h"
#include "matmul/matmul.h"
#include "ops/model_params.h"
#include "ops/multihead.h"

namespace attnscore::ops {
namespace {

constexpr const char* kOp = "MultiHeadAttention";
constexpr const char* kLayers[] = {"W_q", "W_k", "W_v", "W_o"};
using internal::CheckTensor;
using internal::kAnyDim;

// Q (B, N, Dq), K (B, M, Dk), V (B, M, Dv), out (B, N, H) and the weights
// (B, heads, N, M): shapes, strides, overlaps, lengths and the mask.
Status CheckArguments(const MultiHeadParams& m, const ConstTensor& q, const ConstTensor& k,
                      const ConstTensor& v, const ValidLens& lens, Causal causal,
                      const ConstTensor& out, const ConstTensor& attention) {
  ATTNSCORE_RETURN_IF_ERROR(CheckMultiHeadInputs(m, q, k, v, lens, causal));
  const int64_t batch = q.dims[0], queries = q.dims[1], keys = k.dims[1];
  ATTNSCORE_RETURN_IF_ERROR(CheckTensor(kOp, "out", out, {batch, queries, m.hidden}, "(B, N, H)"));
  if (!attention.empty()) {
    ATTNSCORE_RETURN_IF_ERROR(CheckTensor(kOp, "attention_weights", attention,
                                          {batch, m.heads, queries, keys}, "(B, heads, N, M)"));
  }
  return internal::CheckOutputsApart(kOp, {{"queries", q}, {"keys", k}, {"values", v}}, out,
                                     attention, lens, batch, queries);
}

}  // namespace

Status CheckMultiHeadInputs(const MultiHeadParams& m, const ConstTensor& q, const ConstTensor& k,
                            const ConstTensor& v, const ValidLens& lens, Causal causal) {
  ATTNSCORE_RETURN_IF_ERROR(
      CheckTensor(kOp, "queries", q, {kAnyDim, kAnyDim, m.query_size}, "(B, N, Dq)"));
  const int64_t batch = q.dims[0];
  ATTNSCORE_RETURN_IF_ERROR(
      CheckTensor(kOp, "keys", k, {batch, kAnyDim, m.key_size}, "(B, M, Dk)"));
  ATTNSCORE_RETURN_IF_ERROR(
      CheckTensor(kOp, "values", v, {batch, k.dims[1], m.value_size}, "(B, M, Dv)"));
  ATTNSCORE_RETURN_IF_ERROR(CheckCausal(kOp, causal, q, k));
  return internal::CheckValidLens(lens, batch, q.dims[1], kOp, {});
}

Status MakeMultiHeadParams(int64_t heads, const LinearViews& q, const LinearViews& k,
                           const LinearViews& v, const LinearViews& o, MultiHeadParams* params) {
  ATTNSCORE_RETURN_IF_ERROR(
      CheckTensor(kOp, "W_q.weight", q.weight, {kAnyDim, kAnyDim}, "(H, Dq)"));
  const int64_t hidden = q.weight.dims[0];
  if (heads < 1 || hidden % heads != 0) {
    return Status::InvalidArgument(
        std::string(kOp) + ": num_heads is " + std::to_string(heads) +
        "; it must be at least 1 and divide num_hiddens H = " + std::to_string(hidden) +
        " (W_q.weight " + ShapeString(q.weight) + ")");
  }
  ATTNSCORE_RETURN_IF_ERROR(CheckTensor(kOp, "W_k.weight", k.weight, {hidden, kAnyDim}, "(H, Dk)"));
  ATTNSCORE_RETURN_IF_ERROR(CheckTensor(kOp, "W_v.weight", v.weight, {hidden, kAnyDim}, "(H, Dv)"));
  ATTNSCORE_RETURN_IF_ERROR(CheckTensor(kOp, "W_o.weight", o.weight, {hidden, hidden}, "(H, H)"));
  const LinearViews* layers[] = {&q, &k, &v, &o};
  const bool bias = !q.bias.empty();
  for (int l = 0; l < 4; ++l) {
    const std::string weight = std::string(kLayers[l]) + ".weight";
    const std::string bias_name = std::string(kLayers[l]) + ".bias";
    if (layers[l]->bias.empty() == bias) {
      return Status::InvalidArgument(
          std::string(kOp) + ": W_q.bias is " + (bias ? "given" : "empty") + " but " + bias_name +
          " is " + (bias ? "empty" : "given") + "; a module has all four biases or none");
    }
    ATTNSCORE_RETURN_IF_ERROR(CheckFinite(kOp, weight.c_str(), layers[l]->weight));
    if (bias) {
      ATTNSCORE_RETURN_IF_ERROR(
          CheckTensor(kOp, bias_name.c_str(), layers[l]->bias, {hidden}, "(H)"));
      ATTNSCORE_RETURN_IF_ERROR(CheckFinite(kOp, bias_name.c_str(), layers[l]->bias));
    }
  }
  params->heads = heads;
  params->hidden = hidden;
  params->query_size = q.weight.dims[1];
  params->key_size = k.weight.dims[1];
  params->value_size = v.weight.dims[1];
  params->bias = bias;
  params->w_q = CopyMatrix(q.weight, /*transpose=*/true);
  params->w_k = CopyMatrix(k.weight, /*transpose=*/true);
  params->w_v = CopyMatrix(v.weight, /*transpose=*/true);
  params->w_o = CopyMatrix(o.weight, /*transpose=*/true);
  if (bias) {
    params->b_q = CopyMatrix(q.bias, false);
    params->b_k = CopyMatrix(k.bias, false);
    params->b_v = CopyMatrix(v.bias, false);
    params->b_o = CopyMatrix(o.bias, false);
  }
  return Status::Ok();
}

Status LoadMultiHeadParams(const std::string& path, int64_t heads, MultiHeadParams* params) {
  std::vector<io::SafetensorsTensor> tensors;
  ATTNSCORE_RETURN_IF_ERROR(io::ReadSafetensors(path, &tensors));
  ATTNSCORE_RETURN_IF_ERROR(
      CheckOnlyTensors(path, tensors,
                       {"W_q.weight", "W_k.weight", "W_v.weight", "W_o.weight", "W_q.bias",
                        "W_k.bias", "W_v.bias", "W_o.bias"},
                       "a multi-head attention"));
  // A module built with bias=True has all four .bias tensors; one of them
  // present asks for all four (FindTensor names a missing one).
  LinearViews layers[4];
  bool any_bias = false;
  for (const io::SafetensorsTensor& t : tensors) {
    for (const char* layer : kLayers) any_bias |= t.name == std::string(layer) + ".bias";
  }
  for (int l = 0; l < 4; ++l) {
    const io::SafetensorsTensor* weight = nullptr;
    ATTNSCORE_RETURN_IF_ERROR(
        io::FindTensor(path, tensors, std::string(kLayers[l]) + ".weight", {-1, -1}, &weight));
    layers[l].weight = ViewOf(*weight);
    if (any_bias) {
      const io::SafetensorsTensor* bias = nullptr;
      ATTNSCORE_RETURN_IF_ERROR(io::FindTensor(path, tensors, std::string(kLayers[l]) + ".bias",
                                               {weight->shape[0]}, &bias));
      layers[l].bias = ViewOf(*bias);
    }
  }
  Status s = MakeMultiHeadParams(heads, layers[0], layers[1], layers[2], layers[3], params);
  if (!s.ok()) return Status(s.code(), path + ": " + s.message());
  return s;
}

Status MultiHeadForward(const internal::CallContext& call, const MultiHeadParams& m, ConstTensor q,
                        ConstTensor k, ConstTensor v, const ValidLens& valid_lens, Causal causal,
                        Tensor out, Tensor attention) {
  ATTNSCORE_RETURN_IF_ERROR(CheckArguments(m, q, k, v, valid_lens, causal, out, attention));
  const int64_t batch = q.dims[0], queries = q.dims[1], keys = k.dims[1];
  const int64_t hidden = m.hidden, heads = m.heads, d = m.head_size();

  // Every plan before anything is written.
  std::shared_ptr<const matmul::Plan> project_q, project_k, project_v, project_out;
  ATTNSCORE_RETURN_IF_ERROR(LinearPlan(q, hidden, m.bias, nullptr, &project_q));
  ATTNSCORE_RETURN_IF_ERROR(LinearPlan(k, hidden, m.bias, nullptr, &project_k));
  ATTNSCORE_RETURN_IF_ERROR(LinearPlan(v, hidden, m.bias, nullptr, &project_v));
  const ConstTensor out_view = out;
  ATTNSCORE_RETURN_IF_ERROR(LinearPlan(ConstTensor(nullptr, {batch, queries, hidden}), hidden,
                                       m.bias, &out_view, &project_out));

  // Workspace: the projections Q (B, N, H), K and V (B, M, H), and the
  // heads' output (B, N, H), dense.
  const int64_t query_floats = batch * queries * hidden, key_floats = batch * keys * hidden;
  float* const q_proj = call.workspace.Floats(internal::ScratchSlot::kProjections,
                                              static_cast<size_t>(2 * (query_floats + key_floats)));
  float* const k_proj = q_proj + query_floats;
  float* const v_proj = k_proj + key_floats;
  float* const heads_out = v_proj + key_floats;
  const auto bias = [&](const std::vector<float>& b) { return m.bias ? b.data() : nullptr; };
  ATTNSCORE_RETURN_IF_ERROR(
      project_q->Run(call.workspace, q.data, m.w_q.data(), q_proj, bias(m.b_q)));
  ATTNSCORE_RETURN_IF_ERROR(
      project_k->Run(call.workspace, k.data, m.w_k.data(), k_proj, bias(m.b_k)));
  ATTNSCORE_RETURN_IF_ERROR(
      project_v->Run(call.workspace, v.data, m.w_v.data(), v_proj, bias(m.b_v)));

  // A projection's H features are its heads in order: (B, N, H) is
  // (B, N, heads, d) as it stands.
  MultiHeadOptions multihead;
  multihead.causal = causal;
  multihead.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  ATTNSCORE_RETURN_IF_ERROR(MultiHeadAttention(
      call, kOp, ConstTensor(q_proj, {batch, queries, heads, d}),
      ConstTensor(k_proj, {batch, keys, heads, d}), ConstTensor(v_proj, {batch, keys, heads, d}),
      valid_lens, multihead, Tensor(heads_out, {batch, queries, heads, d}), attention));
  return project_out->Run(call.workspace, heads_out, m.w_o.data(), out.data, bias(m.b_o));
}

}  // namespace attnscore::ops
