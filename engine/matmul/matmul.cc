#include "matmul/matmul.h"

#include <array>
#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <omp.h>

#include "oneapi/dnnl/dnnl.hpp"

namespace attnscore::matmul {
namespace {

using dims = dnnl::memory::dims;
using dt = dnnl::memory::data_type;

dnnl::engine& CpuEngine() {
  static dnnl::engine* engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *engine;
}

// Shapes vary with valid lengths, so the cache is bounded: past the limit it
// starts over rather than grow without end in a long-running server.
constexpr size_t kMaxCachedPlans = 512;

dnnl::memory::desc Describe(int64_t batch, const Layout& l) {
  // oneDNN wants a batch stride even for a batch of one.
  const int64_t batch_stride = batch > 1 ? l.batch_stride : l.rows * l.cols;
  return dnnl::memory::desc(dims{batch, l.rows, l.cols}, dt::f32,
                            dims{batch_stride, l.row_stride, l.col_stride});
}

// Each plan gets an id that is never reused, so per-thread state keyed by it
// can never be mistaken for a later plan's.
std::atomic<uint64_t> next_plan_id{1};

class OnednnPlan final : public Plan {
 public:
  explicit OnednnPlan(const Problem& p) : id_(next_plan_id++), has_bias_(p.bias) {
    dnnl::primitive_attr attr;
    if (p.scale != 1.0f) attr.set_output_scales(0, {p.scale});
    if (p.accumulate) {
      dnnl::post_ops sum;
      sum.append_sum(1.0f);
      attr.set_post_ops(sum);
    }
    // The scratchpad is ours (per thread), so concurrent runs never share one.
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    // A shared B is a batch of one, which oneDNN broadcasts over A's batch.
    const dnnl::memory::desc b = Describe(p.shared_b ? 1 : p.batch, p.b);
    const dnnl::memory::desc a = Describe(p.batch, p.a), c = Describe(p.batch, p.c);
    pd_ = p.bias ? dnnl::matmul::primitive_desc(
                       dnnl::matmul::desc(a, b, dnnl::memory::desc(dims{1, 1, p.c.cols}, dt::f32,
                                                                    dims{p.c.cols, p.c.cols, 1}),
                                          c),
                       attr, CpuEngine())
                 : dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, b, c), attr, CpuEngine());
    primitive_ = dnnl::matmul(pd_);
    scratch_bytes_ = pd_.scratchpad_desc().get_size();
  }

  Status Run(const float* a, const float* b, float* c, const float* bias) const override {
    if (has_bias_ && bias == nullptr) return Status::Internal("matmul: a plan with a bias needs one");
    try {
      Bindings& bind = BindingsForThisThread();
      // oneDNN takes non-const handles; it only reads src and weights.
      bind.src.set_data_handle(const_cast<float*>(a));
      bind.weights.set_data_handle(const_cast<float*>(b));
      bind.dst.set_data_handle(c);
      if (bind.bias) bind.bias.set_data_handle(const_cast<float*>(bias));
      primitive_.execute(bind.stream, bind.args);
      bind.stream.wait();
    } catch (const dnnl::error& e) {
      return Status::Internal(std::string("oneDNN matmul failed: ") + e.what());
    }
    return Status::Ok();
  }

  const char* implementation() const override { return pd_.impl_info_str(); }

 private:
  // A thread's memory objects for this plan. Creating them costs more than a
  // small matmul's execution, so each thread makes them once and then only
  // swaps the data pointers.
  struct Bindings {
    dnnl::stream stream;
    dnnl::memory src, weights, dst, scratchpad;
    dnnl::memory bias;  // empty unless the problem has a bias
    std::unordered_map<int, dnnl::memory> args;  // the same handles, as execute wants them
  };

  Bindings& BindingsForThisThread() const {
    struct PerThread {
      std::unordered_map<uint64_t, Bindings> by_plan;
      std::vector<unsigned char> scratch;
    };
    thread_local PerThread state;
    if (state.scratch.size() < scratch_bytes_) {
      // The scratchpad memory objects point into the old buffer: start over.
      state.scratch.resize(scratch_bytes_);
      state.by_plan.clear();
    }
    auto it = state.by_plan.find(id_);
    if (it != state.by_plan.end()) return it->second;
    if (state.by_plan.size() >= kMaxCachedPlans) state.by_plan.clear();
    Bindings bind{dnnl::stream(CpuEngine()),
                  dnnl::memory(pd_.src_desc(), CpuEngine(), nullptr),
                  dnnl::memory(pd_.weights_desc(), CpuEngine(), nullptr),
                  dnnl::memory(pd_.dst_desc(), CpuEngine(), nullptr),
                  dnnl::memory(pd_.scratchpad_desc(), CpuEngine(), state.scratch.data()),
                  dnnl::memory(),
                  {}};
    bind.args = {{DNNL_ARG_SRC, bind.src},
                 {DNNL_ARG_WEIGHTS, bind.weights},
                 {DNNL_ARG_DST, bind.dst},
                 {DNNL_ARG_SCRATCHPAD, bind.scratchpad}};
    if (pd_.bias_desc().get_size() > 0) {
      bind.bias = dnnl::memory(pd_.bias_desc(), CpuEngine(), nullptr);
      bind.args.emplace(DNNL_ARG_BIAS, bind.bias);
    }
    return state.by_plan.emplace(id_, std::move(bind)).first->second;
  }

  const uint64_t id_;
  const bool has_bias_;
  dnnl::matmul::primitive_desc pd_;
  dnnl::matmul primitive_;
  size_t scratch_bytes_ = 0;
};

using Key = std::array<int64_t, 21>;

Key KeyOf(const Problem& p) {
  int32_t scale_bits;
  std::memcpy(&scale_bits, &p.scale, sizeof(scale_bits));
  // oneDNN fixes a primitive's thread count when it is created.
  Key key = {p.batch, scale_bits, omp_get_max_threads(), p.shared_b, p.bias, p.accumulate};
  int k = 6;
  for (const Layout* l : {&p.a, &p.b, &p.c}) {
    for (int64_t v : {l->rows, l->cols, l->batch_stride, l->row_stride, l->col_stride}) {
      key[k++] = v;
    }
  }
  return key;
}


struct Cache {
  std::mutex mutex;
  std::map<Key, std::shared_ptr<const Plan>> plans;
};

Cache& PlanCache() {
  static Cache* cache = new Cache;
  return *cache;
}

}  // namespace

Status GetPlan(const Problem& problem, std::shared_ptr<const Plan>* plan) {
  // oneDNN 2.x would scale the bias too; nothing here needs both.
  if (problem.bias && problem.scale != 1.0f) {
    return Status::Internal("matmul: a bias with an output scale is not supported");
  }
  const Key key = KeyOf(problem);
  Cache& cache = PlanCache();
  {
    std::lock_guard<std::mutex> lock(cache.mutex);
    auto it = cache.plans.find(key);
    if (it != cache.plans.end()) {
      *plan = it->second;
      return Status::Ok();
    }
  }
  // Created outside the lock: creation takes a while and other shapes should
  // not wait for it. Two threads may both create one; the first stored wins.
  std::shared_ptr<const Plan> created;
  try {
    created = std::make_shared<OnednnPlan>(problem);
  } catch (const dnnl::error& e) {
    return Status::Internal(std::string("oneDNN could not create a matmul: ") + e.what());
  }
  std::lock_guard<std::mutex> lock(cache.mutex);
  if (cache.plans.size() >= kMaxCachedPlans) cache.plans.clear();
  *plan = cache.plans.emplace(key, std::move(created)).first->second;
  return Status::Ok();
}

Status SetMaxIsa(Isa isa) {
  dnnl::cpu_isa cap = dnnl::cpu_isa::all;
  switch (isa) {
    // oneDNN has no scalar code path; SSE4.1 is its floor.
    case Isa::kScalar:
    case Isa::kSse4: cap = dnnl::cpu_isa::sse41; break;
    case Isa::kAvx2: cap = dnnl::cpu_isa::avx2; break;
    // AVX-512 with its VNNI and bf16 extensions, but not AMX.
    case Isa::kAvx512: cap = dnnl::cpu_isa::avx512_core_bf16; break;
    case Isa::kBest: cap = dnnl::cpu_isa::all; break;
  }
  try {
    dnnl::set_max_cpu_isa(cap);
  } catch (const dnnl::error& e) {
    return Status::Unsupported(
        std::string("oneDNN's ISA can only be capped before its first primitive: ") + e.what());
  }
  return Status::Ok();
}

std::string OnednnVersion() {
  const dnnl_version_t* v = dnnl::version();
  return std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
         std::to_string(v->patch);
}

std::string OnednnIsa() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::sse41: return "sse41";
    case dnnl::cpu_isa::avx: return "avx";
    case dnnl::cpu_isa::avx2: return "avx2";
    case dnnl::cpu_isa::avx2_vnni: return "avx2_vnni";
    case dnnl::cpu_isa::avx512_core: return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
    default: return "other";
  }
}

}  // namespace attnscore::matmul
