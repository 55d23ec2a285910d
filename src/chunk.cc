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
    free_list_ = chunks_[h].next;
    chunks_[h] = Chunk();
    return h;
  }
  chunks_.emplace_back();
  return static_cast<ChunkHandle>(chunks_.size() - 1);
}

void ChunkTable::Deallocate(ChunkHandle h) {
  Chunk& c = chunks_[h];
  c = Chunk();
  c.next = free_list_;
  // A recycled slot is marked by a null ptr and size 0; Validate relies on it.
  free_list_ = h;
  --num_live_;
}

}  // namespace bfc::internal
