#include "attnscore/engine.h"

#include <new>
#include <string>
#include <vector>

#include "api/call_scope.h"
#include "api/isa.h"
#include "kernels/masked_softmax.h"
#include "matmul/matmul.h"
#include "ops/dot_product.h"
#include "ops/masked_softmax.h"

namespace attnscore {

struct Engine::Impl {
  EngineOptions options;
};

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

Status Engine::Create(const EngineOptions& options, std::unique_ptr<Engine>* engine) {
  if (engine == nullptr) return Status::InvalidArgument("Engine::Create: engine is null");
  if (options.threads < 1) {
    return Status::InvalidArgument("Engine::Create: threads is " +
                                   std::to_string(options.threads) + "; it must be >= 1");
  }
  if (options.precision != Precision::kFp32 && options.precision != Precision::kBf16) {
    return Status::InvalidArgument("Engine::Create: precision is " +
                                   std::to_string(static_cast<int>(options.precision)) +
                                   ", not a Precision");
  }
  EngineOptions resolved = options;
  ATTNSCORE_RETURN_IF_ERROR(Guarded("Engine::Create", [&] {
    ATTNSCORE_RETURN_IF_ERROR(ResolveIsa(options.isa, &resolved.isa));
    ATTNSCORE_RETURN_IF_ERROR(ApplyIsaCap(resolved.isa));
    return Status::Ok();
  }));
  auto impl = std::unique_ptr<Impl>(new (std::nothrow) Impl{resolved});
  if (!impl) return Status::Internal("Engine::Create: out of memory");
  engine->reset(new (std::nothrow) Engine(std::move(impl)));
  if (!*engine) return Status::Internal("Engine::Create: out of memory");
  return Status::Ok();
}

const EngineOptions& Engine::options() const { return impl_->options; }

Status Engine::MaskedSoftmax(ConstTensor x, const ValidLens& valid_lens, Tensor y) const {
  CallScope scope(impl_->options.threads);
  return Guarded("MaskedSoftmax",
                 [&] { return ops::MaskedSoftmax(impl_->options, x, valid_lens, y); });
}

Status Engine::DotProductAttention(ConstTensor queries, ConstTensor keys,
                                   ConstTensor values, const ValidLens& valid_lens,
                                   Tensor out, Tensor weights) const {
  CallScope scope(impl_->options.threads);
  return Guarded("DotProductAttention", [&] {
    return ops::DotProductAttention(impl_->options, queries, keys, values, valid_lens, out,
                                    weights);
  });
}

std::string Engine::Describe() const {
  std::string s;
  s += "highway targets on this cpu: " + CpuTargetNames() + "\n";
  s += "highway targets allowed: " + AllowedTargetNames() + "\n";
  s += "highway target in use: " + std::string(kernels::MaskedSoftmaxTarget()) + "\n";
  s += "onednn version: " + matmul::OnednnVersion() + "\n";
  s += "onednn isa: " + matmul::OnednnIsa() + "\n";
  s += "isa cap: " + std::string(IsaName(impl_->options.isa)) + "\n";
  s += "threads: " + std::to_string(impl_->options.threads) + "\n";
  s += "precision: " + std::string(PrecisionName(impl_->options.precision)) + "\n";
  s += matmul::NativeBf16() ? "bf16 matmuls: native bf16 arithmetic\n"
                            : "bf16 matmuls: f32 arithmetic on bf16-rounded inputs (oneDNN's ISA "
                              "here has no avx512_bf16 or AMX)\n";
  // The cache is the process's, so this shows every engine's products.
  const std::vector<matmul::PlanSummary> plans = matmul::CachedPlans();
  s += "onednn matmuls: " +
       (plans.empty() ? std::string("none created yet") : std::to_string(plans.size())) + "\n";
  for (const matmul::PlanSummary& plan : plans) {
    s += "  " + plan.problem + ": " + plan.implementation + ", " + std::to_string(plan.runs) +
         (plan.runs == 1 ? " run\n" : " runs\n");
  }
  return s;
}

}  // namespace attnscore
