#include "matmul/matmul.h"

#include <omp.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/parallel.h"
#include "base/workspace.h"
#include "matmul/layout.h"
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

// Every primitive's operands, whole problems and tasks alike, are described
// canonically (layout.h): each size-1 dim with the stride its order implies.
dnnl::memory::desc Describe(int64_t batch, const Layout& l, dt type = dt::f32) {
  const Layout c = Canonical(l, batch);
  return dnnl::memory::desc(dims{batch, c.rows, c.cols}, type,
                            dims{c.batch_stride, c.row_stride, c.col_stride});
}

// Bytes of one element of A and B.
int64_t InputBytes(const Problem& p) { return p.bf16 ? 2 : 4; }

// Each primitive gets an id that is never reused, so per-thread state keyed
// by it can never be mistaken for a later primitive's.
std::atomic<uint64_t> next_primitive_id{1};

// While alive, this thread's OpenMP regions get one thread: a primitive made
// or run under it never splits its work. Debian's oneDNN threads with
// OpenMP, whose thread count is per thread; the engine's own threads
// (base/thread_team.h) are not OpenMP's, so every entry into oneDNN sets it.
class OneOmpThread {
 public:
  OneOmpThread() : saved_(omp_get_max_threads()) { omp_set_num_threads(1); }
  ~OneOmpThread() { omp_set_num_threads(saved_); }
  OneOmpThread(const OneOmpThread&) = delete;
  OneOmpThread& operator=(const OneOmpThread&) = delete;

 private:
  int saved_;
};

// One single-threaded oneDNN matmul. How oneDNN splits a product among
// threads changes which kernel computes each element (its AVX2 gemm gives
// results that differ in the last bit between 1 and 2 threads), so it is
// never allowed to: TiledPlan does the splitting, the same way for any
// thread count.
class Primitive {
 public:
  explicit Primitive(const Problem& p) : id_(next_primitive_id++) {
    OneOmpThread one;  // oneDNN sizes its work split when the primitive is made
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
    const dt input = p.bf16 ? dt::bf16 : dt::f32;
    const dnnl::memory::desc b = Describe(p.shared_b ? 1 : p.batch, p.b, input);
    const dnnl::memory::desc a = Describe(p.batch, p.a, input), c = Describe(p.batch, p.c);
    pd_ = p.bias ? dnnl::matmul::primitive_desc(
                       dnnl::matmul::desc(a, b, dnnl::memory::desc(dims{1, 1, p.c.cols}, dt::f32,
                                                                    dims{p.c.cols, p.c.cols, 1}),
                                          c),
                       attr, CpuEngine())
                 : dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, b, c), attr, CpuEngine());
    primitive_ = dnnl::matmul(pd_);
    scratch_bytes_ = pd_.scratchpad_desc().get_size();
  }

  // Call under OneOmpThread: some implementations pick their thread count
  // when they run.
  Status Run(internal::Workspace& workspace, const void* a, const void* b, float* c,
             const float* bias) const {
    try {
      Bindings& bind = BindingsForThisThread(workspace);
      // oneDNN takes non-const handles; it only reads src and weights.
      bind.src.set_data_handle(const_cast<void*>(a));
      bind.weights.set_data_handle(const_cast<void*>(b));
      bind.dst.set_data_handle(c);
      if (bind.bias) bind.bias.set_data_handle(const_cast<float*>(bias));
      primitive_.execute(bind.stream, bind.args);
      bind.stream.wait();
    } catch (const dnnl::error& e) {
      return Status::Internal(std::string("oneDNN matmul failed: ") + e.what());
    }
    return Status::Ok();
  }

  const char* implementation() const { return pd_.impl_info_str(); }

 private:
  // A thread's memory objects for this primitive. Creating them costs more than a
  // small matmul's execution, so each thread makes them once and then only
  // swaps the data pointers.
  struct Bindings {
    dnnl::stream stream;
    dnnl::memory src, weights, dst, scratchpad;
    dnnl::memory bias;  // empty unless the problem has a bias
    std::unordered_map<int, dnnl::memory> args;  // the same handles, as execute wants them
  };

  // A thread's bindings of every primitive it ran in this workspace, and
  // the scratchpad they share.
  struct PerThread final : internal::Workspace::ThreadCache {
    std::unordered_map<uint64_t, Bindings> by_plan;
    std::vector<unsigned char> scratch;
    size_t HeldBytes() const override { return scratch.capacity(); }
  };

  Bindings& BindingsForThisThread(internal::Workspace& workspace) const {
    std::unique_ptr<internal::Workspace::ThreadCache>& cache = workspace.Cache();
    if (cache == nullptr) cache = std::make_unique<PerThread>();
    PerThread& state = static_cast<PerThread&>(*cache);
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
  dnnl::matmul::primitive_desc pd_;
  dnnl::matmul primitive_;
  size_t scratch_bytes_ = 0;
};

// Tasks of about this many flops (but see kMinTaskRows): whole batch
// entries while an entry is smaller, else blocks of one entry's rows, a
// multiple of kRowBlock (16 keeps oneDNN on full row tiles; 64 cut the
// 160-query chunks of (1, 1024, 4096) at L = 3000 into 128 + 32, and 2
// threads sped it up only 1.2-1.3x; 80 + 80 gives 1.7-2.1x).
// Smaller tasks (4 MFLOP, 16 rows) cost 1 thread 5-15% on the long
// dot product and the big additive and concat shapes, measured against no
// tiling at all; these cost 0-5%, within the noise of a shared 2-core VM.
constexpr double kTaskFlops = 32e6;
constexpr int64_t kRowBlock = 16;

// Rows each block of an entry's rows has at least (but the last, which may
// be shorter), or the entry is cut in two halves where it has fewer than
// twice as many: each oneDNN call packs all of B again, work in
// proportion to B alone, so a task of few rows over a large B spends much of
// its time packing. (16 x 1024) . (1024 x 1024) ran at 24 GFLOP/s, 64 rows
// at 56, 128 at 57, 1,024 at 64 (gemm:jit, 1 thread, a Zen 3). By
// kTaskFlops alone, a (8192 x 1024) . (1024 x 1024) projection (d2l's
// multi-head K, 16 heads of 64) would be cut into tasks of 16 rows. Its
// module's decode step (Zen 3) took 624-706 ms on one thread with blocks of
// 128 rows, 451-510 ms with 512; on two threads 432-453 ms, 258-270 ms. The
// split does not depend on the thread count, so an entry of fewer than
// 2 · 512 rows has two tasks at most, for any number of threads.
constexpr int64_t kMinTaskRows = 512;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// How many tasks `flops` of work is cut into: about one per kTaskFlops, but
// an even number when there are several (an odd count rounds down, keeping
// tasks large), so that two threads get equal shares: with three equal tasks one thread idles a third of the time.
int64_t TaskCount(double flops) {
  const auto tasks = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(flops / kTaskFlops)));
  return tasks > 1 && tasks % 2 == 1 ? tasks - 1 : tasks;
}

// A problem cut into tasks whose shapes depend on the problem alone, run by
// the call's threads: every thread count computes each
// element with the same primitive, so results are bitwise the same.
class TiledPlan final : public Plan {
 public:
  explicit TiledPlan(const Problem& p) : problem_(p) {
    const int64_t m = p.a.rows;
    const double entry_flops =
        2.0 * static_cast<double>(m) * static_cast<double>(p.a.cols) * static_cast<double>(p.b.cols);
    // As few tasks as kTaskFlops allows, of near-equal size, but no more
    // than kMinTaskRows leaves room for, and an even number, as TaskCount's.
    if (entry_flops > kTaskFlops) {
      const int64_t blocks =
          std::min(TaskCount(entry_flops), std::max<int64_t>(2, m / kMinTaskRows / 2 * 2));
      rows_per_task_ = std::min(m, CeilDiv(CeilDiv(m, blocks), kRowBlock) * kRowBlock);
    } else {
      rows_per_task_ = m;
      entries_per_task_ = CeilDiv(p.batch, TaskCount(entry_flops * static_cast<double>(p.batch)));
    }
    row_tasks_ = CeilDiv(m, rows_per_task_);
    tasks_ = CeilDiv(p.batch, entries_per_task_) * row_tasks_;
    // Either entries or rows are split, never both, so there are two shapes
    // at most: a full task and a shorter last one.
    Problem block = p;
    block.batch = entries_per_task_;
    block.a.rows = block.c.rows = rows_per_task_;
    full_ = std::make_shared<const Primitive>(block);
    block.batch = p.batch - (CeilDiv(p.batch, entries_per_task_) - 1) * entries_per_task_;
    block.a.rows = block.c.rows = m - (row_tasks_ - 1) * rows_per_task_;
    last_ = block.batch == entries_per_task_ && block.a.rows == rows_per_task_
                ? full_
                : std::make_shared<const Primitive>(block);
    implementation_ = full_->implementation();
    if (last_->implementation() != implementation_) {
      implementation_ += std::string(" + ") + last_->implementation();
    }
  }

  Status Run(internal::Workspace& workspace, const void* a, const void* b, float* c,
             const float* bias) const override {
    if (problem_.bias && bias == nullptr) return Status::Internal("matmul: a plan with a bias needs one");
    runs_.fetch_add(1, std::memory_order_relaxed);
    if (tasks_ == 1) {
      OneOmpThread one;
      return full_->Run(workspace, a, b, c, bias);
    }
    // Nothing may throw out of a team thread: a failed task is recorded,
    // and the tasks not yet started are skipped.
    std::atomic<bool> failed{false};
    std::mutex mutex;
    Status first_error = Status::Ok();
    const Status s = internal::ForEachRowInParallel(
        workspace, workspace.threads(), tasks_, internal::ScratchSlot::kRowBuffer,
        /*scratch_floats=*/0,
        [&](int64_t task, float*) {
          if (failed.load(std::memory_order_relaxed)) return;
          try {
            OneOmpThread one;
            Status task_status = RunTask(workspace, task, a, b, c, bias);
            if (task_status.ok()) return;
            std::lock_guard<std::mutex> lock(mutex);
            if (!failed.exchange(true)) first_error = std::move(task_status);
          } catch (...) {
            failed = true;  // first_error stays Ok: reported below
          }
        },
        [] {});
    if (!first_error.ok()) return first_error;
    if (failed) return Status::Internal("matmul: out of memory in a task");
    return s;
  }

  const char* implementation() const override { return implementation_.c_str(); }
  int64_t runs() const override { return runs_.load(std::memory_order_relaxed); }

 private:
  Status RunTask(internal::Workspace& workspace, int64_t task, const void* a, const void* b,
                 float* c, const float* bias) const {
    const Problem& p = problem_;
    const int64_t entry = task / row_tasks_ * entries_per_task_;
    const int64_t row = task % row_tasks_ * rows_per_task_;
    const bool last = entry + entries_per_task_ > p.batch || row + rows_per_task_ > p.a.rows;
    const auto* a_bytes = static_cast<const char*>(a);
    const auto* b_bytes = static_cast<const char*>(b);
    const int64_t size = InputBytes(p);
    return (last ? last_ : full_)
        ->Run(workspace, a_bytes + (entry * p.a.batch_stride + row * p.a.row_stride) * size,
              p.shared_b ? b : b_bytes + entry * p.b.batch_stride * size,
              c + entry * p.c.batch_stride + row * p.c.row_stride, bias);
  }

  const Problem problem_;
  int64_t entries_per_task_ = 1, rows_per_task_ = 1, row_tasks_ = 1, tasks_ = 1;
  std::shared_ptr<const Primitive> full_, last_;
  std::string implementation_;  // both shapes' when they differ
  mutable std::atomic<int64_t> runs_{0};
};

// A problem whose A or B oneDNN cannot describe (rows that overlap, a zero
// stride; inputs may have any strides): each Run packs them densely into
// this thread's scratch and runs a TiledPlan of the dense layouts.
class PackedPlan final : public Plan {
 public:
  PackedPlan(const Problem& p, bool pack_a, bool pack_b)
      : problem_(p), pack_a_(pack_a), pack_b_(pack_b), inner_(DenseProblem(p, pack_a, pack_b)) {
    implementation_ = std::string(inner_.implementation()) + " (inputs packed)";
  }

  Status Run(internal::Workspace& workspace, const void* a, const void* b, float* c,
             const float* bias) const override {
    const Problem& p = problem_;
    const int64_t size = InputBytes(p), b_batch = p.shared_b ? 1 : p.batch;
    const int64_t a_bytes = pack_a_ ? p.batch * p.a.rows * p.a.cols * size : 0;
    const int64_t b_bytes = pack_b_ ? b_batch * p.b.rows * p.b.cols * size : 0;
    unsigned char* packed;
    try {
      packed = reinterpret_cast<unsigned char*>(
          workspace.Floats(internal::ScratchSlot::kMatmulInputs,
                           static_cast<size_t>(CeilDiv(a_bytes + b_bytes, 4))));
    } catch (const std::bad_alloc&) {
      return Status::Internal("matmul: out of memory for packed inputs");
    }
    if (pack_a_) Pack(a, p.a, p.batch, size, packed);
    if (pack_b_) Pack(b, p.b, b_batch, size, packed + a_bytes);
    return inner_.Run(workspace, pack_a_ ? packed : a, pack_b_ ? packed + a_bytes : b, c, bias);
  }

  const char* implementation() const override { return implementation_.c_str(); }
  int64_t runs() const override { return inner_.runs(); }

 private:
  static Problem DenseProblem(Problem p, bool pack_a, bool pack_b) {
    if (pack_a) p.a = Dense(p.a);
    if (pack_b) p.b = Dense(p.b);
    return p;
  }

  const Problem problem_;
  const bool pack_a_, pack_b_;
  const TiledPlan inner_;
  std::string implementation_;
};

using Key = std::array<int64_t, 21>;

Key KeyOf(const Problem& p) {
  int32_t scale_bits;
  std::memcpy(&scale_bits, &p.scale, sizeof(scale_bits));
  Key key = {p.batch, scale_bits, p.shared_b, p.bias, p.accumulate, p.bf16};
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
  struct Entry {
    std::shared_ptr<const Plan> plan;
    std::string problem;  // ProblemName, for CachedPlans
  };
  std::map<Key, Entry> plans;
};

std::string ProblemName(const Problem& p) {
  std::string name = std::to_string(p.batch) + " x (" + std::to_string(p.a.rows) + " x " +
                     std::to_string(p.a.cols) + ") . (" + std::to_string(p.b.rows) + " x " +
                     std::to_string(p.b.cols) + ")";
  if (p.shared_b) name += ", one B";
  if (p.scale != 1.0f) name += ", scaled";
  if (p.bias) name += ", + bias";
  if (p.accumulate) name += ", += C";
  if (p.bf16) name += ", bf16";
  return name;
}

// Shared by every engine: a plan is immutable, compiled for oneDNN's
// process-wide ISA, and gives the same bits whichever engine made it.
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
  // The ops never ask for an empty product; tiling one would divide by zero.
  if (problem.batch < 1 || problem.a.rows < 1 || problem.a.cols < 1 || problem.b.cols < 1) {
    return Status::Internal("matmul: an empty problem");
  }
  const Key key = KeyOf(problem);
  Cache& cache = PlanCache();
  {
    std::lock_guard<std::mutex> lock(cache.mutex);
    auto it = cache.plans.find(key);
    if (it != cache.plans.end()) {
      *plan = it->second.plan;
      return Status::Ok();
    }
  }
  // Created outside the lock: creation takes a while and other shapes should
  // not wait for it. Two threads may both create one; the first stored wins.
  std::shared_ptr<const Plan> created;
  try {
    const bool pack_a = !Describable(Canonical(problem.a, problem.batch), problem.batch);
    const int64_t b_batch = problem.shared_b ? 1 : problem.batch;
    const bool pack_b = !Describable(Canonical(problem.b, b_batch), b_batch);
    if (pack_a || pack_b) {
      created = std::make_shared<PackedPlan>(problem, pack_a, pack_b);
    } else {
      created = std::make_shared<TiledPlan>(problem);
    }
  } catch (const dnnl::error& e) {
    return Status::Internal(std::string("oneDNN could not create a matmul: ") + e.what());
  }
  std::lock_guard<std::mutex> lock(cache.mutex);
  if (cache.plans.size() >= kMaxCachedPlans) cache.plans.clear();
  *plan = cache.plans.emplace(key, Cache::Entry{std::move(created), ProblemName(problem)})
              .first->second.plan;
  return Status::Ok();
}

std::vector<PlanSummary> CachedPlans() {
  Cache& cache = PlanCache();
  std::lock_guard<std::mutex> lock(cache.mutex);
  std::vector<PlanSummary> plans;
  for (const auto& [key, entry] : cache.plans) {
    plans.push_back({entry.problem, entry.plan->implementation(), entry.plan->runs()});
  }
  return plans;
}

}  // namespace attnscore::matmul
