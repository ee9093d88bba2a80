#include "attnscore/engine.h"

#include <algorithm>
#include <new>
#include <string>
#include <vector>

#include "api/engine_access.h"
#include "api/isa.h"
#include "api/output_shapes.h"
#include "base/call_scope.h"
#include "base/parallel.h"
#include "kernels/masked_softmax.h"
#include "matmul/matmul.h"
#include "ops/dot_product.h"
#include "ops/masked_softmax.h"
#include "ops/multihead.h"

namespace attnscore {

struct Engine::Impl {
  Impl(const EngineOptions& options, std::unique_ptr<internal::ThreadTeam> team)
      : context(options, std::move(team)) {}
  // Shared by the const calls of many threads: its pool of workspaces is
  // thread-safe.
  mutable internal::EngineContext context;
};

internal::EngineContext& internal::EngineAccess::Context(const Engine& engine) {
  return engine.impl_->context;
}

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

Status Engine::Create(const EngineOptions& options, std::unique_ptr<Engine>* engine) {
  if (engine == nullptr) return Status::InvalidArgument("Engine::Create: engine is null");
  if (options.threads < 1 || options.threads > kMaxThreads) {
    return Status::InvalidArgument("Engine::Create: threads is " + std::to_string(options.threads) +
                                   "; it must be in [1, " + std::to_string(kMaxThreads) + "]");
  }
  if (static_cast<unsigned>(options.isa) > static_cast<unsigned>(Isa::kBest)) {
    return Status::InvalidArgument("Engine::Create: isa is " +
                                   std::to_string(static_cast<int>(options.isa)) + ", not an Isa");
  }
  if (options.precision == Precision::kInt8) {
    return Status::InvalidArgument(
        "Engine::Create: precision is int8, which only a KvCache holds; an engine runs in fp32 "
        "or bf16");
  }
  if (options.precision != Precision::kFp32 && options.precision != Precision::kBf16) {
    return Status::InvalidArgument("Engine::Create: precision is " +
                                   std::to_string(static_cast<int>(options.precision)) +
                                   ", not a Precision");
  }
  EngineOptions resolved = options;
  std::unique_ptr<internal::ThreadTeam> team;
  ATTNSCORE_RETURN_IF_ERROR(internal::Guarded("Engine::Create", [&] {
    ATTNSCORE_RETURN_IF_ERROR(internal::ThreadTeam::Create(options.threads, &team));
    ATTNSCORE_RETURN_IF_ERROR(internal::ResolveIsa(options.isa, &resolved.isa));
    ATTNSCORE_RETURN_IF_ERROR(internal::ApplyIsaCap(resolved.isa));
    return Status::Ok();
  }));
  auto impl = std::unique_ptr<Impl>(new (std::nothrow) Impl(resolved, std::move(team)));
  if (!impl) return Status::Internal("Engine::Create: out of memory");
  engine->reset(new (std::nothrow) Engine(std::move(impl)));
  if (!*engine) return Status::Internal("Engine::Create: out of memory");
  return Status::Ok();
}

Status Engine::CheckMaskedSoftmax(ConstTensor x, const ValidLens& valid_lens,
                                  OutputShapes* shapes) const {
  return internal::ReportOutputShapes(
      valid_lens, "MaskedSoftmax", shapes, [&](internal::AttentionShape* shape) {
        ATTNSCORE_RETURN_IF_ERROR(ops::CheckMaskedSoftmaxInput(x));
        *shape = {x.dims[0], x.dims[1], x.dims[2], x.dims[2], "(B, N, M)"};
        return Status::Ok();
      });
}

Status Engine::CheckDotProductAttention(ConstTensor queries, ConstTensor keys, ConstTensor values,
                                        const ValidLens& valid_lens, OutputShapes* shapes) const {
  return internal::ReportOutputShapes(
      valid_lens, "DotProductAttention", shapes, [&](internal::AttentionShape* shape) {
        return ops::CheckDotProductInputs(queries, keys, values, shape);
      });
}

Status Engine::CheckMultiHeadAttention(ConstTensor queries, ConstTensor keys, ConstTensor values,
                                       const ValidLens& valid_lens, const MultiHeadOptions& options,
                                       MultiHeadShapes* shapes) const {
  if (shapes == nullptr) return Status::InvalidArgument("MultiHeadAttention: shapes is null");
  return internal::Guarded("MultiHeadAttention", [&] {
    return ops::CheckMultiHeadAttentionInputs(queries, keys, values, valid_lens, options, shapes);
  });
}

Status Engine::CheckMultiHeadAttentionPacked(ConstTensor queries, ConstTensor keys,
                                             ConstTensor values,
                                             const SequenceOffsets& cu_seqlens_q,
                                             const SequenceOffsets& cu_seqlens_k,
                                             const MultiHeadOptions& options,
                                             std::array<int64_t, 3>* out_shape) const {
  if (out_shape == nullptr) {
    return Status::InvalidArgument("MultiHeadAttentionPacked: out_shape is null");
  }
  return internal::Guarded("MultiHeadAttentionPacked", [&] {
    return ops::CheckMultiHeadAttentionPacked(queries, keys, values, cu_seqlens_q, cu_seqlens_k,
                                              options, out_shape);
  });
}

const EngineOptions& Engine::options() const { return impl_->context.options; }

Status Engine::MaskedSoftmax(ConstTensor x, const ValidLens& valid_lens, Tensor y) const {
  return internal::RunCall(impl_->context, "MaskedSoftmax", [&](const internal::CallContext& call) {
    return ops::MaskedSoftmax(call, x, valid_lens, y);
  });
}

Status Engine::DotProductAttention(ConstTensor queries, ConstTensor keys, ConstTensor values,
                                   const ValidLens& valid_lens, Tensor out,
                                   Tensor attention_weights) const {
  return internal::RunCall(impl_->context, "DotProductAttention",
                           [&](const internal::CallContext& call) {
                             return ops::DotProductAttention(call, queries, keys, values,
                                                             valid_lens, out, attention_weights);
                           });
}

Status Engine::MultiHeadAttention(ConstTensor queries, ConstTensor keys, ConstTensor values,
                                  const ValidLens& valid_lens, const MultiHeadOptions& options,
                                  Tensor out, Tensor attention_weights) const {
  return internal::RunCall(
      impl_->context, "MultiHeadAttention", [&](const internal::CallContext& call) {
        return ops::MultiHeadAttention(call, "MultiHeadAttention", queries, keys, values,
                                       valid_lens, options, out, attention_weights);
      });
}

Status Engine::MultiHeadAttentionPacked(ConstTensor queries, ConstTensor keys, ConstTensor values,
                                        const SequenceOffsets& cu_seqlens_q,
                                        const SequenceOffsets& cu_seqlens_k,
                                        const MultiHeadOptions& options, Tensor out) const {
  return internal::RunCall(
      impl_->context, "MultiHeadAttentionPacked", [&](const internal::CallContext& call) {
        return ops::MultiHeadAttentionPacked(call, queries, keys, values, cu_seqlens_q,
                                             cu_seqlens_k, options, out);
      });
}

namespace {

std::vector<std::string> Words(const std::string& names) {
  std::vector<std::string> words;
  for (size_t start = 0; start < names.size();) {
    const size_t end = std::min(names.find(' ', start), names.size());
    if (end > start) words.push_back(names.substr(start, end - start));
    start = end + 1;
  }
  return words;
}

std::string Joined(const std::vector<std::string>& words) {
  std::string s;
  for (const std::string& w : words) s += (s.empty() ? "" : " ") + w;
  return s;
}

}  // namespace

RuntimeInfo Engine::Info() const {
  RuntimeInfo info;
  info.cpu_targets = Words(internal::CpuTargetNames());
  info.allowed_targets = Words(internal::AllowedTargetNames());
  info.target_in_use = kernels::MaskedSoftmaxTarget();
  info.onednn_version = matmul::OnednnVersion();
  info.onednn_isa = matmul::OnednnIsa();
  info.native_bf16 = matmul::NativeBf16();
  info.options = impl_->context.options;
  info.workspace_bytes = static_cast<int64_t>(impl_->context.workspaces.HeldBytes());
  for (const matmul::PlanSummary& plan : matmul::CachedPlans()) {
    info.matmuls.push_back({plan.problem, plan.implementation, plan.runs});
  }
  return info;
}

std::string Engine::Describe() const {
  const RuntimeInfo info = Info();
  std::string s;
  s += "highway targets on this cpu: " + Joined(info.cpu_targets) + "\n";
  s += "highway targets allowed: " + Joined(info.allowed_targets) + "\n";
  s += "highway target in use: " + info.target_in_use + "\n";
  s += "onednn version: " + info.onednn_version + "\n";
  s += "onednn isa: " + info.onednn_isa + "\n";
  s += "isa cap: " + std::string(IsaName(info.options.isa)) + "\n";
  s += "threads: " + std::to_string(info.options.threads) + "\n";
  s += "precision: " + std::string(PrecisionName(info.options.precision)) + "\n";
  s += "workspace bytes held: " + std::to_string(info.workspace_bytes) + "\n";
  s += info.native_bf16 ? "bf16 matmuls: native bf16 arithmetic\n"
                        : "bf16 matmuls: f32 arithmetic on bf16-rounded inputs (oneDNN's ISA "
                          "here has no avx512_bf16 or AMX)\n";
  // The cache is the process's, so this shows every engine's products.
  s += "onednn matmuls: " +
       (info.matmuls.empty() ? std::string("none created yet")
                             : std::to_string(info.matmuls.size())) +
       "\n";
  for (const MatmulInfo& plan : info.matmuls) {
    s += "  " + plan.problem + ": " + plan.implementation + ", " + std::to_string(plan.runs) +
         (plan.runs == 1 ? " run\n" : " runs\n");
  }
  return s;
}

}  // namespace attnscore
