// File: src/core/chunk_map.cc
#include "bfc/internal/chunk_map.h"

#include <memory>
#include <new>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "bfc/internal/str_format.h"

namespace bfc::internal {

void ChunkMap::GrowForInsert() {
  if (TryGrow()) return;
  shortage_.Raise();
  over_bound_ = true;
  // Only when more than kSpareEntries entries came after a failed growth,
  // which the refused allocations prevent. An empty slot must stay, or a
  // probe would never end.
  if (size_ + 1 > max_size_ + kSpareEntries || size_ + 1 >= capacity_) {
    throw std::bad_alloc();
  }
}

void ChunkMap::Reserve(size_t n) {
  while (size_ + n > max_size_) {
    if (!TryGrow()) throw std::bad_alloc();
  }
}

bool ChunkMap::TryGrow() noexcept {
  const int bits = bits_ == 0 ? kMinBits : bits_ + 1;
  const size_t capacity = size_t{1} << bits;
  std::unique_ptr<Slot[]> slots(new (std::nothrow) Slot[capacity]);
  if (slots == nullptr) return false;
  // Before the slots are first written, so that they fault in as huge
  // pages (a table of more than 256k slots).
  AdviseHugePages(slots.get(), capacity * sizeof(Slot));
  over_bound_ = false;
  for (size_t i = 0; i < capacity; ++i) slots[i] = Slot{0, kInvalidChunkHandle};
  std::swap(slots, slots_);
  const size_t old_capacity = capacity_;
  bits_ = bits;
  capacity_ = capacity;
  mask_ = capacity - 1;
  max_size_ = LoadBound(capacity);
  for (size_t i = 0; i < old_capacity; ++i) {
    const Slot s = slots[i];
    if (s.handle == kInvalidChunkHandle) continue;
    size_t j = Home(s.tag);
    while (slots_[j].handle != kInvalidChunkHandle) j = (j + 1) & mask_;
    slots_[j] = s;
  }
  return true;
}

absl::Status ChunkMap::Validate() const {
  auto fail = [](auto&&... parts) {
    return absl::InternalError(absl::StrCat("ChunkMap: ", parts...));
  };
  const bool geometry_ok = bits_ == 0
                               ? capacity_ == 0 && size_ == 0 && max_size_ == 0
                               : bits_ >= kMinBits && bits_ < 32 &&
                                     capacity_ == size_t{1} << bits_ &&
                                     mask_ == capacity_ - 1 &&
                                     max_size_ == LoadBound(capacity_);
  if (!geometry_ok) {
    return fail("inconsistent geometry: ", bits_, " bits, capacity ", capacity_,
                ", mask ", internal::Format("0x%x", mask_), ", load bound ",
                max_size_);
  }
  if (size_ > max_size_ + (over_bound_ ? kSpareEntries : 0)) {
    return fail(size_, " entries exceed the load bound of ", max_size_, " (of ",
                capacity_, " slots)");
  }
  // First every slot's handle, so that the probes below read only chunks
  // that exist.
  size_t occupied = 0;
  for (size_t i = 0; i < capacity_; ++i) {
    const Slot s = slots_[i];
    if (s.handle == kInvalidChunkHandle) continue;
    ++occupied;
    if (!chunks_->InRange(s.handle)) {
      return fail("slot ", i, " holds handle ", s.handle, ", out of range (",
                  chunks_->capacity(), " chunk slots)");
    }
    if ((*chunks_)[s.handle].ptr == nullptr) {
      return fail("slot ", i, " (handle ", s.handle,
                  ") names a chunk with no start (a recycled slot?)");
    }
  }
  if (occupied != size_) {
    return fail(occupied, " occupied slots but size ", size_);
  }
  for (size_t i = 0; i < capacity_; ++i) {
    const Slot s = slots_[i];
    if (s.handle == kInvalidChunkHandle) continue;
    const void* p = (*chunks_)[s.handle].ptr;
    // Messages only: formatting on every slot would dominate the check.
    auto slot = [&] {
      return internal::Format("slot %d (handle %d, ptr %p)", i, s.handle, p);
    };
    if (Tag(p) != s.tag) {
      return fail(slot(), " has tag ", internal::Format("0x%08x", s.tag),
                  ", but its start hashes to tag ",
                  internal::Format("0x%08x", Tag(p)));
    }
    // The probe for p runs from its home slot through occupied slots and
    // stops at the first slot mapping p: slot i, unless an empty slot cuts
    // the run before i (i is unreachable) or p is mapped twice.
    const size_t found = FindSlot(p);
    if (found == kNoSlot) {
      const size_t home = Home(s.tag);
      size_t j = home;
      while (slots_[j].handle != kInvalidChunkHandle) j = (j + 1) & mask_;
      return fail(slot(), " is unreachable: slot ", j,
                  ", between its home slot ", home, " and it, is empty");
    }
    if (found != i) {
      return fail(slot(), " duplicates slot ", found, " (handle ",
                  slots_[found].handle, ")");
    }
  }
  return absl::OkStatus();
}

}  // namespace bfc::internal
