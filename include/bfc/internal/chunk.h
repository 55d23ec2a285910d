// File: bfc/internal/chunk.h
// -----------------------------------------------------------------------------
//
// A Chunk is a contiguous piece of one region: either handed out (in use) or
// free (and then in exactly one Bin). The chunks of a region form a doubly
// linked list in address order through `prev`/`next` handles; a handle is an
// index into the allocator's chunk table, 4 bytes where a pointer takes 8, and
// the columns the allocator keeps beside the table use the same index.
// Internal: not part of the API.
//
// Thread-compatible: the owning Allocator guards every Chunk with its mutex.
#ifndef BFC_INTERNAL_CHUNK_H_
#define BFC_INTERNAL_CHUNK_H_

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "bfc/internal/check.h"
#include "bfc/internal/shortage.h"

namespace bfc::internal {

using ChunkHandle = uint32_t;
inline constexpr ChunkHandle kInvalidChunkHandle =
    std::numeric_limits<ChunkHandle>::max();

using BinNum = int32_t;
inline constexpr BinNum kInvalidBinNum = -1;

// A transparent huge page on x86-64 and most arm64 kernels. The tables that
// grow with the chunks (the chunk table, the pointer map) ask for huge pages
// once they span more than one: at 1e5-1e6 live chunks a free's dependent
// misses (map slot, chunk, neighbours) each also missed the TLB (bench/
// README.md, pass 9).
inline constexpr size_t kHugePageBytes = size_t{2} << 20;

// Advises the kernel to back the whole huge pages inside [p, p + bytes) with
// huge pages (madvise MADV_HUGEPAGE; a hint: nothing changes where the
// kernel has them off, and no error is reported).
void AdviseHugePages(void* p, size_t bytes) noexcept;

struct Chunk {
  // Bytes this chunk spans: a multiple of kMinAllocationSize.
  size_t size = 0;
  // What the caller asked for (unrounded); 0 while free.
  size_t requested_size = 0;
  // > 0 while in use; -1 when free (TF's convention).
  int64_t allocation_id = -1;
  // Start of the chunk: a multiple of kMinAllocationSize.
  void* ptr = nullptr;
  // Physical neighbours in the same region, or kInvalidChunkHandle.
  ChunkHandle prev = kInvalidChunkHandle;
  ChunkHandle next = kInvalidChunkHandle;
  // A free chunk's stream fence (Allocator, "Streams"): 0 while clean (never
  // used, or its last use is known complete) and always while in use.
  uint64_t fence = 0;
  // No bin number is stored (TF keeps one): a free chunk's bin is a function
  // of its size (BinNumForSize).

  bool in_use() const { return allocation_id != -1; }
  // No neighbour on either side: the chunk is its whole region. One test of
  // both handles at once (kInvalidChunkHandle is all ones), so a free's
  // data-dependent neighbour pattern costs one branch, not two.
  bool whole_region() const {
    static_assert(kInvalidChunkHandle == ~ChunkHandle{0});
    return (prev & next) == kInvalidChunkHandle;
  }
  uintptr_t addr() const { return reinterpret_cast<uintptr_t>(ptr); }
  uintptr_t end_addr() const { return addr() + size; }

  // "Chunk{ptr=0x..., size=..., requested=..., id=..., in_use=...}"
  std::string DebugString() const;
};

// The allocator's chunk table: Chunks addressed by handle, with freed slots
// recycled through a free list (threaded through `next`) so handles stay small
// and the table never shrinks under churn. The blocks of kBlockChunks lie end
// to end in one range of address space reserved when the first is added (no
// memory behind it) and made usable a block at a time, so `table[h]` is one
// add from a base that never changes: no block pointer to load on the way to
// every chunk (the two dependent loads of a table of separately allocated
// blocks cost ~8 % of an allocate or free; bench/README.md, pass 8). Growing
// never copies the table or doubles its footprint (at most one partly used
// block), and a Chunk never moves.
//
// The range holds max_chunks() slots, set before the first block from the
// most chunks the owner can need (a pool of L bytes holds at most
// L / kMinAllocationSize chunks); where the address space cannot be had, a
// smaller range is taken (halving), and a table that fills it fails to grow
// as when the host has no memory. A destroyed table's range is kept for the
// next one (one per process, with at most 256 KiB of its pages resident) so
// building pools one after another does not fault in fresh pages each time.
//
// Invariants (ChunkTable::Validate checks them): capacity() slots fit in the
// blocks; the free list visits exactly capacity() - num_live() distinct,
// in-range slots, each a recycled (default) Chunk. What a live chunk holds is
// its owner's business (Allocator::Validate).
class ChunkTable {
 public:
  ChunkTable() = default;
  ChunkTable(ChunkTable&& other) noexcept;
  ChunkTable& operator=(ChunkTable&&) = delete;
  ChunkTable(const ChunkTable&) = delete;
  ChunkTable& operator=(const ChunkTable&) = delete;
  ~ChunkTable();

  // A fresh default Chunk's handle (recycled if possible).
  // Counted live only once it exists: AllocateSlow may throw.
  ChunkHandle Allocate() {
    if (free_list_ != kInvalidChunkHandle) {
      const ChunkHandle h = free_list_;
      Chunk& c = (*this)[h];
      free_list_ = c.next;
      c = Chunk();
      ++num_live_;
      return h;
    }
    const ChunkHandle h = AllocateSlow();
    ++num_live_;
    return h;
  }
  // Returns `h` to the free list. `h` must be live.
  void Deallocate(ChunkHandle h) {
    BFC_DCHECK_GT(num_live_, size_t{0});
    Chunk& c = (*this)[h];
    c = Chunk();
    // A recycled slot is marked by a null ptr and size 0; Validate relies on
    // it.
    c.next = free_list_;
    free_list_ = h;
    --num_live_;
  }

  // Requires InRange(h).
  Chunk& operator[](ChunkHandle h) {
    BFC_DCHECK_LT(h, size_);
    return base_[h];
  }
  const Chunk& operator[](ChunkHandle h) const {
    BFC_DCHECK_LT(h, size_);
    return base_[h];
  }

  // The most slots the table may ever hold (rounded up to whole blocks, at
  // most kMaxChunks); only before the first block is added. Default:
  // kMaxChunks.
  void set_max_chunks(size_t n);
  size_t max_chunks() const { return max_chunks_; }

  // Unmaps the range a destroyed table left for the next one, if any (a
  // process that wants its address space back; tests that need a fresh
  // range).
  static void DropParkedRange();

  // Makes room for `n` more chunks without allocating. Throws
  // std::bad_alloc when the host has no memory for it (nothing changes).
  void Reserve(size_t n);
  // Where a failed growth is reported (shortage.h).
  void set_shortage_signal(ShortageSignal s) { shortage_ = s; }
  // Called before a block is added, with the handles it will hold: the owner
  // grows the columns it keeps beside the table (indexed by handle) there,
  // so that no later use of a handle has to. Returns false, and the block is
  // not added, when they could not grow. Must not throw.
  using GrowHook = bool (*)(void* context, size_t new_handle_bound);
  void set_grow_hook(GrowHook hook, void* context) {
    grow_hook_ = hook;
    grow_context_ = context;
  }
  // Handles this table can hold without growing (the columns' size).
  size_t handle_bound() const { return num_blocks_ * kBlockChunks; }
  // Chunks that can be created without allocating.
  size_t spare() const { return handle_bound() - num_live_; }

  // Slots ever created (live + recycled).
  size_t capacity() const { return size_; }
  size_t num_live() const { return num_live_; }
  // True when `h` names a slot that exists (live or recycled).
  [[nodiscard]] bool InRange(ChunkHandle h) const { return h < size_; }
  // Host bytes held by the table (its usable blocks; the reserved address
  // space behind them holds none). Past the first huge page the kernel may
  // back up to the next huge page boundary once a block there is touched.
  size_t MetadataBytes() const {
    return num_blocks_ * kBlockChunks * sizeof(Chunk);
  }

  // Checks the invariants above: OK, or the first violation, e.g.
  //   "ChunkTable: free list slot 2 (handle 5) holds Chunk{ptr=0x1000, ...}"
  // O(recycled slots).
  [[nodiscard]] absl::Status Validate() const;

  static constexpr int kBlockBits = 10;
  static constexpr size_t kBlockChunks = size_t{1} << kBlockBits;
  // Every handle but kInvalidChunkHandle, in whole blocks.
  static constexpr size_t kMaxChunks =
      (size_t{kInvalidChunkHandle} / kBlockChunks) * kBlockChunks;

 private:
  friend class ChunkTableTestPeer;  // tests/chunk_test.cc corrupts a table

  ChunkHandle AllocateSlow();
  // Adds a block (and grows the owner's columns); false, with nothing
  // changed, when the host has no memory for it.
  bool TryAddBlock() noexcept;
  // Reserves the range (reserved_chunks_ slots) on first use; false when not
  // even one block's worth of address space can be had.
  bool TryReserve() noexcept;
  // The bytes from base_ on that are usable (PROT_READ | PROT_WRITE) once
  // `blocks` blocks are (0 for none).
  size_t CommittedBytes(size_t blocks) const;

  Chunk* base_ = nullptr;       // the range; nullptr until the first block
  size_t mapped_bytes_ = 0;     // its length (a recycled one may be longer)
  size_t reserved_chunks_ = 0;  // slots the range may hold
  size_t max_chunks_ = kMaxChunks;
  size_t num_blocks_ = 0;  // usable blocks from base_ on
  size_t size_ = 0;        // slots handed out so far
  ChunkHandle free_list_ = kInvalidChunkHandle;
  size_t num_live_ = 0;
  ShortageSignal shortage_;
  GrowHook grow_hook_ = nullptr;
  void* grow_context_ = nullptr;
};

}  // namespace bfc::internal

#endif  // BFC_INTERNAL_CHUNK_H_
