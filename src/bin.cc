// File: src/bin.cc
#include "bfc/internal/bin.h"

namespace bfc::internal {

bool Bin::Contains(size_t size, const void* ptr) const {
  return free_chunks_.contains(
      Entry{size, reinterpret_cast<uintptr_t>(ptr), 0});
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
  return free_chunks_.empty() ? nullptr : &*free_chunks_.rbegin();
}

}  // namespace bfc::internal
