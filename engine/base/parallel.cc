#include "base/parallel.h"

#include <pthread.h>

#include <string>
#include <system_error>
#include <vector>

namespace attnscore::internal {

Status StartThreads(int threads) {
  if (threads <= 1) return Status::Ok();
  std::vector<pthread_t> started;
  started.reserve(static_cast<size_t>(threads - 1));
  int error = 0;
  for (int t = 1; t < threads && error == 0; ++t) {
    pthread_t thread;
    error = pthread_create(
        &thread, nullptr, [](void*) -> void* { return nullptr; }, nullptr);
    if (error == 0) started.push_back(thread);
  }
  for (pthread_t thread : started) pthread_join(thread, nullptr);
  if (error != 0) {
    return Status::Unsupported("cannot start " + std::to_string(threads) + " threads (" +
                               std::to_string(started.size() + 1) +
                               " started): " + std::generic_category().message(error));
  }
#pragma omp parallel num_threads(threads)
  {}
  return Status::Ok();
}

}  // namespace attnscore::internal
