// File: src/bin.cc
#include "bfc/internal/bin.h"

namespace bfc::internal {

bool Bin::Insert(size_t size, const void* ptr, ChunkHandle h) {
  const bool inserted =
      free_chunks_.insert(Entry{size, reinterpret_cast<uintptr_t>(ptr), h})
          .second;
  if (inserted) total_bytes_ += size;
  return inserted;
}

bool Bin::Erase(size_t size, const void* ptr) {
  const bool erased =
      free_chunks_.erase(Entry{size, reinterpret_cast<uintptr_t>(ptr), 0}) > 0;
  if (erased) total_bytes_ -= size;
  return erased;
}

bool Bin::Contains(size_t size, const void* ptr) const {
  return free_chunks_.contains(
      Entry{size, reinterpret_cast<uintptr_t>(ptr), 0});
}

const Bin::Entry* Bin::FindBestFit(size_t min_size) const {
  auto it = free_chunks_.lower_bound(Entry{min_size, 0, 0});
  return it == free_chunks_.end() ? nullptr : &*it;
}

const Bin::Entry* Bin::Largest() const {
  return free_chunks_.empty() ? nullptr : &*free_chunks_.rbegin();
}

}  // namespace bfc::internal
