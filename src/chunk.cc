// File: src/chunk.cc
#include "bfc/internal/chunk.h"

#include "absl/strings/str_format.h"

namespace bfc::internal {

std::string Chunk::DebugString() const {
  return absl::StrFormat(
      "Chunk{ptr=%p, size=%u, requested=%u, id=%d, in_use=%s, bin=%d}", ptr,
      size, requested_size, allocation_id, in_use() ? "true" : "false",
      bin_num);
}

ChunkHandle ChunkTable::Allocate() {
  ++num_live_;
  if (free_list_ != kInvalidChunkHandle) {
    const ChunkHandle h = free_list_;
    Chunk& c = (*this)[h];
    free_list_ = c.next;
    c = Chunk();
    return h;
  }
  if (size_ == blocks_.size() * kBlockChunks) {
    blocks_.push_back(std::make_unique<Chunk[]>(kBlockChunks));
  }
  return static_cast<ChunkHandle>(size_++);
}

void ChunkTable::Deallocate(ChunkHandle h) {
  Chunk& c = (*this)[h];
  c = Chunk();
  c.next = free_list_;
  // A recycled slot is marked by a null ptr and size 0; Validate relies on it.
  free_list_ = h;
  --num_live_;
}

}  // namespace bfc::internal
