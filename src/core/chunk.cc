// File: src/core/chunk.cc
#include "bfc/internal/chunk.h"

#include <memory>
#include <new>
#include <utility>

#include "absl/strings/str_cat.h"
#include "bfc/internal/str_format.h"

namespace bfc::internal {

std::string Chunk::DebugString() const {
  return internal::Format(
      "Chunk{ptr=%p, size=%u, requested=%u, id=%d, in_use=%s}", ptr, size,
      requested_size, allocation_id, in_use() ? "true" : "false");
}

ChunkHandle ChunkTable::AllocateSlow() {
  // The free list is empty: the next unused slot. The next block comes while
  // kSpareEntries slots are still left, without throwing: this runs in the
  // middle of an allocation, which must not stop half done. If the host has
  // no memory, the slots left serve this operation, and the shortage makes
  // the next allocation grow the table first (shortage.h).
  if (handle_bound() - size_ <= kSpareEntries && !TryAddBlock()) {
    shortage_.Raise();
    // Only when more than kSpareEntries chunks came after a failed growth,
    // which the refused allocations prevent.
    if (size_ == handle_bound()) throw std::bad_alloc();
  }
  return static_cast<ChunkHandle>(size_++);
}

bool ChunkTable::TryAddBlock() noexcept {
  if (blocks_.size() == blocks_.capacity()) {
    try {
      blocks_.reserve(2 * blocks_.size() + 1);
    } catch (...) {
      return false;
    }
  }
  std::unique_ptr<Chunk[]> block(new (std::nothrow) Chunk[kBlockChunks]);
  if (block == nullptr) return false;
  if (grow_hook_ != nullptr &&
      !grow_hook_(grow_context_, handle_bound() + kBlockChunks)) {
    return false;
  }
  blocks_.push_back(std::move(block));  // capacity reserved: cannot throw
  return true;
}

void ChunkTable::Reserve(size_t n) {
  // Beyond the room AllocateSlow keeps, so that it does not grow (and fail
  // again) at once.
  while (spare() <= n + kSpareEntries) {
    if (!TryAddBlock()) throw std::bad_alloc();
  }
}

absl::Status ChunkTable::Validate() const {
  auto fail = [](auto&&... parts) {
    return absl::InternalError(absl::StrCat("ChunkTable: ", parts...));
  };
  if (size_ > blocks_.size() * kBlockChunks) {
    return fail("capacity ", size_, " exceeds the ",
                blocks_.size() * kBlockChunks, " slots of its ", blocks_.size(),
                " blocks");
  }
  if (num_live_ > size_) {
    return fail(num_live_, " live chunks in a capacity of ", size_);
  }
  const size_t recycled = size_ - num_live_;
  size_t n = 0;
  for (ChunkHandle h = free_list_; h != kInvalidChunkHandle;) {
    if (h >= size_) {
      return fail("free list slot ", n, " is handle ", h,
                  ", out of range (capacity ", size_, ")");
    }
    if (n == recycled) {
      // Longer than the recycled slots: a loop, or a live chunk linked in.
      return fail("free list is longer than the ", recycled,
                  " recycled slots (capacity ", size_, " - ", num_live_,
                  " live); slot ", n, " is handle ", h);
    }
    const Chunk& c = blocks_[h >> kBlockBits][h & (kBlockChunks - 1)];
    if (c.ptr != nullptr || c.size != 0 || c.requested_size != 0 ||
        c.allocation_id != -1 || c.prev != kInvalidChunkHandle) {
      return fail("free list slot ", n, " (handle ", h,
                  ") is not a recycled chunk: ", c.DebugString());
    }
    ++n;
    h = c.next;
  }
  if (n != recycled) {
    return fail("free list holds ", n, " slots, expected ", recycled,
                " (capacity ", size_, " - ", num_live_, " live)");
  }
  return absl::OkStatus();
}

}  // namespace bfc::internal
