// File: src/core/chunk.cc
#include "bfc/internal/chunk.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace bfc::internal {

std::string Chunk::DebugString() const {
  return absl::StrFormat(
      "Chunk{ptr=%p, size=%u, requested=%u, id=%d, in_use=%s}", ptr, size,
      requested_size, allocation_id, in_use() ? "true" : "false");
}

ChunkHandle ChunkTable::AllocateSlow() {
  if (size_ == blocks_.size() * kBlockChunks) {
    blocks_.push_back(std::make_unique<Chunk[]>(kBlockChunks));
  }
  return static_cast<ChunkHandle>(size_++);
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
