// An out-of-tree program that uses the installed library: d2l's toy from
// several threads at once, then one bad call. Exits 0 only if every result
// is the toy's and the bad call is refused with a message.
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "attnscore/attnscore.h"

namespace {

// d2l's DotProductAttention toy: keys all equal, so each query weighs its
// valid keys uniformly; with lengths [2, 6] the outputs are the means of
// V's first 2 and first 6 rows: [2, 3, 4, 5] and [10, 11, 12, 13].
bool Toy(const attnscore::Engine& engine) {
  std::vector<float> q(2 * 1 * 2, 0.5f), k(2 * 10 * 2, 1.0f), v(2 * 10 * 4), out(2 * 4);
  for (int b = 0; b < 2; ++b) {
    for (int i = 0; i < 40; ++i) v[b * 40 + i] = static_cast<float>(i);
  }
  const int64_t lens[] = {2, 6};
  const attnscore::Status s = engine.DotProductAttention(
      attnscore::ConstTensor(q.data(), {2, 1, 2}), attnscore::ConstTensor(k.data(), {2, 10, 2}),
      attnscore::ConstTensor(v.data(), {2, 10, 4}), attnscore::ValidLens::PerBatch(lens, 2),
      attnscore::Tensor(out.data(), {2, 1, 4}));
  const float want[] = {2, 3, 4, 5, 10, 11, 12, 13};
  bool ok = s.ok();
  for (int i = 0; ok && i < 8; ++i) ok = std::fabs(out[i] - want[i]) < 1e-5f;
  return ok;
}

}  // namespace

int main() {
  std::unique_ptr<attnscore::Engine> engine;
  if (!attnscore::Engine::Create(attnscore::EngineOptions(), &engine).ok()) return 1;
  std::printf("attnscore %s (headers %s)\n", attnscore::Version(), ATTNSCORE_VERSION_STRING);
  if (std::string(attnscore::Version()) != ATTNSCORE_VERSION_STRING) return 1;

  std::vector<int> passed(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int call = 0; call < 100; ++call) passed[t] += Toy(*engine);
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int n : passed) {
    if (n != 100) return std::printf("toy: %d of 100 calls gave the toy's output\n", n), 1;
  }
  std::printf("toy: 4 threads x 100 calls, all [[2, 3, 4, 5]], [[10, 11, 12, 13]]\n");

  // A bad call: V with 9 rows for 10 keys. Refused, with the argument named.
  std::vector<float> q(4), k(40), v(36), out(8, -1.0f);
  const attnscore::Status s = engine->DotProductAttention(
      attnscore::ConstTensor(q.data(), {2, 1, 2}), attnscore::ConstTensor(k.data(), {2, 10, 2}),
      attnscore::ConstTensor(v.data(), {2, 9, 2}), attnscore::ValidLens::None(),
      attnscore::Tensor(out.data(), {2, 1, 2}));
  std::printf("bad call: %s: %s\n", attnscore::StatusCodeName(s.code()), s.message().c_str());
  if (s.code() != attnscore::StatusCode::kInvalidArgument ||
      s.message().find("values") == std::string::npos || out[0] != -1.0f) {
    return 1;
  }
  return 0;
}
