// File: src/chunk.cc
#include "bfc/internal/chunk.h"

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

}  // namespace bfc::internal
