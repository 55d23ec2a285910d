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
