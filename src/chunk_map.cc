// File: src/chunk_map.cc
#include "bfc/internal/chunk_map.h"

#include <utility>

namespace bfc::internal {

bool ChunkMap::Erase(const void* p) {
  if (size_ == 0) return false;
  const uint32_t tag = Tag(p);
  size_t i = Home(tag);
  for (;; i = (i + 1) & mask_) {
    const Slot s = slots_[i];
    if (s.handle == kInvalidChunkHandle) return false;
    if (s.tag == tag && (*chunks_)[s.handle].ptr == p) break;
  }
  // Backward-shift deletion: pull later members of the probe run into the
  // hole unless that would put them before their home slot.
  for (size_t j = (i + 1) & mask_;; j = (j + 1) & mask_) {
    const Slot s = slots_[j];
    if (s.handle == kInvalidChunkHandle) break;
    const size_t k = Home(s.tag);
    const bool stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
    if (stays) continue;
    slots_[i] = s;
    i = j;
  }
  slots_[i] = Slot{0, kInvalidChunkHandle};
  --size_;
  return true;
}

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
