// File: bfc/internal/chunk_map.h
// -----------------------------------------------------------------------------
//
// ChunkMap resolves the start address of every chunk to its handle: the one
// lookup a DeallocateRaw must do before it can touch the chunk.
//
// It is an open-addressing hash table with linear probing whose slots are 8
// bytes: a 32-bit tag (the high half of the address's hash) and the handle.
// The address itself is not stored: a tag match is confirmed by reading the
// chunk's own `ptr` from the ChunkTable, which the caller is about to read
// anyway. So a lookup touches one run of slots (usually one cache line) and
// the chunk, and the map costs 8 bytes per slot, about 10 per chunk in a
// large table (16-64 in a small one, kept a quarter or half full), instead of
// the 16-24 of a general-purpose map holding (address, handle) pairs.
//
// The slot a key starts probing from is the top bits of its tag, so the table
// can grow and delete (backward shift, no tombstones) without reading chunks.
//
// Requires: the chunk of every handle in the map stays live, with `ptr` equal
// to the key it was inserted under, until it is erased. Internal: not part of
// the API. Thread-compatible.
//
// Invariants (ChunkMap::Validate checks them): every occupied slot names an
// in-range chunk whose start hashes to the slot's tag; no empty slot lies
// between a key's home slot and its slot (linear probing finds it); no key is
// mapped twice; size() counts the occupied slots and stays within the load
// bound (a quarter of the slots up to 4k slots, half up to 16k, 13/16
// above), or kSpareEntries past it after a growth failed for want of host
// memory.
#ifndef BFC_INTERNAL_CHUNK_MAP_H_
#define BFC_INTERNAL_CHUNK_MAP_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/base/attributes.h"
#include "absl/status/status.h"
#include "bfc/internal/check.h"
#include "bfc/internal/chunk.h"
#include "bfc/internal/shortage.h"

namespace bfc::internal {

class ChunkMap {
 public:
  // `chunks` must outlive the map.
  explicit ChunkMap(const ChunkTable* chunks) : chunks_(chunks) {}
  ChunkMap(const ChunkMap&) = delete;
  ChunkMap& operator=(const ChunkMap&) = delete;

  // The handle of the chunk starting exactly at `p`, or kInvalidChunkHandle.
  ChunkHandle Find(const void* p) const {
    const size_t i = FindSlot(p);
    return i == kNoSlot ? kInvalidChunkHandle : slots_[i].handle;
  }

  // Maps `p` to `h`. Requires: `p` is not in the map, (*chunks)[h].ptr == p.
  void Insert(const void* p, ChunkHandle h) {
    BFC_DCHECK(p != nullptr && (*chunks_)[h].ptr == p);
    BFC_DCHECK(FindSlot(p) == kNoSlot);
    if (ABSL_PREDICT_FALSE(size_ + 1 > max_size_)) GrowForInsert();
    const uint32_t tag = Tag(p);
    size_t i = Home(tag);
    while (slots_[i].handle != kInvalidChunkHandle) i = (i + 1) & mask_;
    slots_[i] = Slot{tag, h};
    ++size_;
  }

  // Removes `p`. Returns false (and changes nothing) if it is not mapped.
  // Always inlined (see Bin::Insert).
  [[nodiscard]] ABSL_ATTRIBUTE_ALWAYS_INLINE bool Erase(const void* p) {
    size_t i = FindSlot(p);
    if (i == kNoSlot) return false;
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

  size_t size() const { return size_; }
  // Makes room for `n` more entries within the load bound. Throws
  // std::bad_alloc when the host has no memory for it (nothing changes).
  void Reserve(size_t n);
  // Where a failed growth is reported (shortage.h).
  void set_shortage_signal(ShortageSignal s) { shortage_ = s; }
  // The table that resolves the map's handles.
  const ChunkTable* chunks() const { return chunks_; }
  // Host bytes held by the slots.
  size_t MetadataBytes() const { return capacity_ * sizeof(Slot); }

  // Calls f(handle) for every mapped chunk, in slot order.
  template <typename F>
  void ForEach(F f) const {
    for (size_t i = 0; i < capacity_; ++i) {
      if (slots_[i].handle != kInvalidChunkHandle) f(slots_[i].handle);
    }
  }

  // Checks the invariants above against the chunk table: OK, or the first
  // violation, naming the slot, the handle and the chunk start, e.g.
  //   "ChunkMap: slot 5 (handle 3, ptr 0x10000) has tag 0x1, but its start
  //    hashes to tag 0x8d2a5400"
  // O(slots x probe length).
  [[nodiscard]] absl::Status Validate() const;

 private:
  friend class ChunkMapTestPeer;  // tests/chunk_map_test.cc corrupts a map

  struct Slot {
    uint32_t tag;
    ChunkHandle handle;  // kInvalidChunkHandle: empty
  };
  // Linear probing stays short up to ~80 % full (about 3 probes per hit and
  // 13 per miss, all in adjacent slots); the table doubles beyond that. A
  // table of at most kHalfFullSlots (128 KiB, cache-resident) is kept at most
  // half full instead: 1.5 probes per hit and 2.5 per miss; one of at most
  // kQuarterFullSlots (32 KiB, the size of an L1 data cache) at most a
  // quarter full: 1.17 and 1.39. Each probe's exit is a branch the CPU
  // cannot predict, and every free looks its chunk up, a split inserts and a
  // merge erases, so on the replays of real traces (a few hundred to a few
  // thousand chunks) the shorter runs save up to a quarter of the
  // mispredicted branches (bench/README.md, pass 10); above those sizes the
  // memory matters more (about 10 bytes per chunk, not 16-64).
  static constexpr size_t kMaxLoadNum = 13;
  static constexpr size_t kMaxLoadDen = 16;
  static constexpr size_t kHalfFullSlots = size_t{1} << 14;
  static constexpr size_t kQuarterFullSlots = size_t{1} << 12;
  static constexpr int kMinBits = 4;
  // The most entries a table of `capacity` slots holds before it doubles.
  static constexpr size_t LoadBound(size_t capacity) {
    return capacity <= kQuarterFullSlots ? capacity / 4
           : capacity <= kHalfFullSlots  ? capacity / 2
                                         : capacity / kMaxLoadDen * kMaxLoadNum;
  }

  // Chunk starts are multiples of 256: the low byte carries nothing.
  static uint32_t Tag(const void* p) {
    const uint64_t a = reinterpret_cast<uintptr_t>(p) >> 8;
    return static_cast<uint32_t>((a * 0x9E3779B97F4A7C15ull) >> 32);
  }
  size_t Home(uint32_t tag) const { return tag >> (32 - bits_); }
  // Doubles the table; false (nothing changed) when the host has no memory.
  bool TryGrow() noexcept;
  // Insert's growth: never throws while kSpareEntries slots above the load
  // bound are left (shortage.h).
  void GrowForInsert();

  // The slot mapping `p`, or kNoSlot: the probe Find and Erase share.
  static constexpr size_t kNoSlot = ~size_t{0};
  size_t FindSlot(const void* p) const {
    if (size_ == 0) return kNoSlot;
    const uint32_t tag = Tag(p);
    for (size_t i = Home(tag);; i = (i + 1) & mask_) {
      const Slot s = slots_[i];
      if (s.handle == kInvalidChunkHandle) return kNoSlot;
      if (s.tag == tag && (*chunks_)[s.handle].ptr == p) return i;
    }
  }

  const ChunkTable* chunks_;
  std::unique_ptr<Slot[]> slots_;
  size_t capacity_ = 0;
  size_t mask_ = 0;
  size_t size_ = 0;
  size_t max_size_ = 0;
  int bits_ = 0;
  // A growth failed: up to kSpareEntries entries past the load bound are
  // allowed until the next growth succeeds.
  bool over_bound_ = false;
  ShortageSignal shortage_;
};

}  // namespace bfc::internal

#endif  // BFC_INTERNAL_CHUNK_MAP_H_
