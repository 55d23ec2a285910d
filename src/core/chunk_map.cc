// File: src/chunk_map.cc
#include "bfc/internal/chunk_map.h"

#include <utility>

namespace bfc::internal {

void ChunkMap::Grow() {
  const int bits = bits_ == 0 ? kMinBits : bits_ + 1;
  const size_t capacity = size_t{1} << bits;
  std::unique_ptr<Slot[]> slots(new Slot[capacity]);
  for (size_t i = 0; i < capacity; ++i) slots[i] = Slot{0, kInvalidChunkHandle};
  std::swap(slots, slots_);
  const size_t old_capacity = capacity_;
  bits_ = bits;
  capacity_ = capacity;
  mask_ = capacity - 1;
  max_size_ = capacity / kMaxLoadDen * kMaxLoadNum;
  for (size_t i = 0; i < old_capacity; ++i) {
    const Slot s = slots[i];
    if (s.handle == kInvalidChunkHandle) continue;
    size_t j = Home(s.tag);
    while (slots_[j].handle != kInvalidChunkHandle) j = (j + 1) & mask_;
    slots_[j] = s;
  }
}

}  // namespace bfc::internal
