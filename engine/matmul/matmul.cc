#include "matmul/matmul.h"

#include <array>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "oneapi/dnnl/dnnl.hpp"

namespace attnscore::matmul {
namespace {

using dims = dnnl::memory::dims;
using dt = dnnl::memory::data_type;

dnnl::engine& CpuEngine() {
  static dnnl::engine* engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *engine;
}

dnnl::memory::desc Describe(int64_t batch, const Layout& l) {
  // oneDNN wants a batch stride even for a batch of one.
  const int64_t batch_stride = batch > 1 ? l.batch_stride : l.rows * l.cols;
  return dnnl::memory::desc(dims{batch, l.rows, l.cols}, dt::f32,
                            dims{batch_stride, l.row_stride, l.col_stride});
}

class OnednnPlan final : public Plan {
 public:
  explicit OnednnPlan(const Problem& p) {
    const auto src = Describe(p.batch, p.a);
    const auto weights = Describe(p.batch, p.b);
    const auto dst = Describe(p.batch, p.c);
    dnnl::primitive_attr attr;
    if (p.scale != 1.0f) attr.set_output_scales(0, {p.scale});
    // The scratchpad is ours (per thread), so concurrent runs never share one.
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    pd_ = dnnl::matmul::primitive_desc(dnnl::matmul::desc(src, weights, dst),
                                       attr, CpuEngine());
    primitive_ = dnnl::matmul(pd_);
  }

  Status Run(const float* a, const float* b, float* c) const override {
    thread_local dnnl::stream stream(CpuEngine());
    thread_local std::vector<unsigned char> scratch;
    try {
      const auto scratch_desc = pd_.scratchpad_desc();
      if (scratch.size() < scratch_desc.get_size()) scratch.resize(scratch_desc.get_size());
      // oneDNN takes non-const handles; it only reads src and weights.
      dnnl::memory src(pd_.src_desc(), CpuEngine(), const_cast<float*>(a));
      dnnl::memory weights(pd_.weights_desc(), CpuEngine(), const_cast<float*>(b));
      dnnl::memory dst(pd_.dst_desc(), CpuEngine(), c);
      dnnl::memory scratchpad(scratch_desc, CpuEngine(), scratch.data());
      primitive_.execute(stream, {{DNNL_ARG_SRC, src},
                                  {DNNL_ARG_WEIGHTS, weights},
                                  {DNNL_ARG_DST, dst},
                                  {DNNL_ARG_SCRATCHPAD, scratchpad}});
      stream.wait();
    } catch (const dnnl::error& e) {
      return Status::Internal(std::string("oneDNN matmul failed: ") + e.what());
    }
    return Status::Ok();
  }

  const char* implementation() const override { return pd_.impl_info_str(); }

 private:
  dnnl::matmul::primitive_desc pd_;
  dnnl::matmul primitive_;
};

using Key = std::array<int64_t, 17>;

Key KeyOf(const Problem& p) {
  int32_t scale_bits;
  std::memcpy(&scale_bits, &p.scale, sizeof(scale_bits));
  Key key = {p.batch, scale_bits};
  int k = 2;
  for (const Layout* l : {&p.a, &p.b, &p.c}) {
    for (int64_t v : {l->rows, l->cols, l->batch_stride, l->row_stride, l->col_stride}) {
      key[k++] = v;
    }
  }
  return key;
}

// Shapes vary with valid lengths, so the cache is bounded: past the limit it
// starts over rather than grow without end in a long-running server.
constexpr size_t kMaxCachedPlans = 512;

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
