// File: bfc/internal/shortage.h
// -----------------------------------------------------------------------------
//
// How the allocator's own tables live through the host running out of
// memory.
//
// The tables (the ChunkTable with the columns kept beside it, the ChunkMap,
// the bins' B-tree nodes) grow in the middle of an operation: a chunk already
// out of its bin, its neighbours' links already changed. An exception there
// would leave the allocator inconsistent. So they never throw on a growth
// they can defer: they keep room ahead (kSpareEntries chunk slots and map
// entries, more than one operation uses), grow with nothrow allocations, and,
// when a growth fails, raise a bit in the allocator's slow-path word. The
// next allocation then takes the slow path, which makes the room again with
// exceptions caught before it changes anything, and fails cleanly (nullptr,
// ResourceExhausted) while the host stays out of memory. A free never needs
// a slot or a map entry; the B-tree nodes it may need come, when the host
// has none, from a process-wide emergency arena (NodePool).
//
// Internal: not part of the API. Thread-compatible (raised under the
// allocator's lock).
#ifndef BFC_INTERNAL_SHORTAGE_H_
#define BFC_INTERNAL_SHORTAGE_H_

#include <cstddef>
#include <cstdint>

namespace bfc::internal {

class ShortageSignal {
 public:
  ShortageSignal() = default;
  ShortageSignal(uint32_t* word, uint32_t bit) : word_(word), bit_(bit) {}
  void Raise() const {
    if (word_ != nullptr) *word_ |= bit_;
  }

 private:
  uint32_t* word_ = nullptr;
  uint32_t bit_ = 0;
};

// Room every table keeps ahead of use: more than one allocation takes (an
// aligned prefix, a remainder and a new region's chunk: 3).
inline constexpr size_t kSpareEntries = 4;

}  // namespace bfc::internal

#endif  // BFC_INTERNAL_SHORTAGE_H_
