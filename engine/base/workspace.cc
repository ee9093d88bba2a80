#include "base/workspace.h"

#include <new>
#include <utility>

namespace attnscore::internal {

Workspace::Workspace(int threads, ThreadTeam* team)
    : threads_(threads),
      team_(team),
      floats_(static_cast<size_t>(threads) * static_cast<size_t>(ScratchSlot::kCount)),
      asked_large_(floats_.size(), 0),
      caches_(static_cast<size_t>(threads)),
      words_(static_cast<size_t>(IndexSlot::kCount)),
      reals_(static_cast<size_t>(IndexSlot::kCount)) {}

// The team's workers are numbered from 1 up to its threads, which are the
// engine's, as this workspace's; any other thread is the caller.
size_t Workspace::ThreadIndex() const { return static_cast<size_t>(ThreadTeam::ThisThread()); }

std::unique_ptr<Workspace::ThreadCache>& Workspace::Cache() { return caches_[ThreadIndex()]; }

float* Workspace::Floats(ScratchSlot slot, size_t count) {
  const size_t index =
      ThreadIndex() * static_cast<size_t>(ScratchSlot::kCount) + static_cast<size_t>(slot);
  AlignedFloats& buffer = floats_[index];
  if (count > buffer.capacity() || buffer.data() == nullptr) {
    buffer = AlignedFloats();  // the old array released before the new one is made
    buffer = AlignedFloats(count);
  }
  if (count * sizeof(float) > kKeptScratchBytes) asked_large_[index] |= 1;
  if (buffer.capacity() * sizeof(float) > kKeptScratchBytes) {
    large_.store(true, std::memory_order_relaxed);
  }
  return buffer.data();
}

namespace {

// `buffer` grown to at least `count` elements; `*oversized` set where it
// grew past what a workspace keeps between calls.
template <typename T>
T* Grown(std::vector<T>& buffer, size_t count, bool* oversized) {
  if (buffer.size() < count) {
    buffer.resize(count);
    if (count * sizeof(T) > kKeptScratchBytes) *oversized = true;
  }
  return buffer.data();
}

}  // namespace

int64_t* Workspace::Words(IndexSlot slot, size_t count) {
  return Grown(words_[static_cast<size_t>(slot)], count, &oversized_);
}

double* Workspace::Reals(IndexSlot slot, size_t count) {
  return Grown(reals_[static_cast<size_t>(slot)], count, &oversized_);
}

void Workspace::Trim() {
  // The call's threads have joined: their stores to large_ happened before.
  if (large_.load(std::memory_order_relaxed)) {
    size_t kept_large = 0;
    bool asked = false;
    for (size_t i = 0; i < floats_.size(); ++i) {
      const size_t bytes = floats_[i].capacity() * sizeof(float);
      const bool asked_twice = asked_large_[i] == 3;
      asked_large_[i] = static_cast<unsigned char>((asked_large_[i] & 1) << 1);
      asked = asked || asked_large_[i] != 0;
      if (bytes <= kKeptScratchBytes) continue;
      if (asked_twice && kept_large + bytes <= kKeptRepeatedBytes) {
        kept_large += bytes;
      } else {
        floats_[i] = AlignedFloats();
      }
    }
    large_.store(asked || kept_large > 0, std::memory_order_relaxed);
  }
  if (!oversized_) return;
  oversized_ = false;
  for (std::vector<int64_t>& words : words_) {
    if (words.capacity() * sizeof(int64_t) > kKeptScratchBytes) std::vector<int64_t>().swap(words);
  }
  for (std::vector<double>& reals : reals_) {
    if (reals.capacity() * sizeof(double) > kKeptScratchBytes) std::vector<double>().swap(reals);
  }
}

size_t Workspace::HeldBytes() const {
  size_t bytes = 0;
  for (const AlignedFloats& buffer : floats_) bytes += buffer.capacity() * sizeof(float);
  for (const std::vector<int64_t>& words : words_) bytes += words.capacity() * sizeof(int64_t);
  for (const std::vector<double>& reals : reals_) bytes += reals.capacity() * sizeof(double);
  for (const auto& cache : caches_) bytes += cache ? cache->HeldBytes() : 0;
  return bytes;
}

WorkspacePool::~WorkspacePool() { delete spare_.load(); }

std::unique_ptr<Workspace> WorkspacePool::Take() {
  std::unique_ptr<Workspace> workspace(spare_.exchange(nullptr, std::memory_order_acquire));
  if (workspace == nullptr) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!free_.empty()) {
      workspace = std::move(free_.back());
      free_.pop_back();
    }
  }
  if (workspace == nullptr) workspace = std::make_unique<Workspace>(threads_, team_);
  return workspace;
}

void WorkspacePool::Give(std::unique_ptr<Workspace> workspace) {
  workspace->Trim();
  Workspace* expected = nullptr;
  if (spare_.compare_exchange_strong(expected, workspace.get(), std::memory_order_release)) {
    workspace.release();
    return;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  try {
    free_.push_back(std::move(workspace));
  } catch (const std::bad_alloc&) {
    // No room to keep it: the next call makes another.
  }
}

size_t WorkspacePool::HeldBytes() {
  size_t bytes = 0;
  // The spare is taken to be read, as a call takes it, and given back.
  if (std::unique_ptr<Workspace> spare{spare_.exchange(nullptr, std::memory_order_acquire)}) {
    bytes += spare->HeldBytes();
    Give(std::move(spare));
  }
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& workspace : free_) bytes += workspace->HeldBytes();
  return bytes;
}

}  // namespace attnscore::internal
