// File: src/bin.cc
#include "bfc/internal/bin.h"

namespace bfc::internal {

bool Bin::Contains(size_t size, const void* ptr) const {
  const Entry key{size, reinterpret_cast<uintptr_t>(ptr), 0};
  if (small_) {
    const Entry* pos = SmallLowerBound(key);
    return pos != small_end() && !Less()(key, *pos);
  }
  return free_chunks_.contains(key);
}

bool Bin::InsertLarge(const Entry& e) {
  if (small_) {
    // The array is full: look for a duplicate before converting.
    Entry* pos = SmallLowerBound(e);
    if (pos != small_end() && !Less()(e, *pos)) return false;
    ToLarge();
  }
  const bool inserted = free_chunks_.insert(e).second;
  if (inserted) total_bytes_ += e.size;
  return inserted;
}

bool Bin::EraseLarge(const Entry& key) {
  const bool erased = free_chunks_.erase(key) > 0;
  if (erased) {
    total_bytes_ -= key.size;
    MaybeToSmall();
  }
  return erased;
}

bool Bin::TakeBestFitLarge(size_t min_size, Entry* out) {
  auto it = free_chunks_.lower_bound(Entry{min_size, 0, 0});
  if (it == free_chunks_.end()) return false;
  *out = *it;
  free_chunks_.erase(it);
  total_bytes_ -= out->size;
  MaybeToSmall();
  return true;
}

NodePool::~NodePool() {
  for (FreeList& l : lists_) {
    while (l.head != nullptr) {
      void* p = l.head;
      l.head = *static_cast<void**>(p);
      ::operator delete(p);
    }
  }
}

void* NodePool::AllocateSlow(size_t bytes) {
  bytes_held_ += bytes;
  return ::operator new(bytes);
}

void NodePool::DeallocateSlow(void* p, size_t bytes) {
  lists_.push_back(FreeList{bytes, nullptr});
  Deallocate(p, bytes);
}

const Bin::Entry* Bin::Largest() const {
  if (small_) return num_small_ == 0 ? nullptr : small_end() - 1;
  return free_chunks_.empty() ? nullptr : &*free_chunks_.rbegin();
}

}  // namespace bfc::internal
