// File: bfc/internal/bin.h
// -----------------------------------------------------------------------------
//
// Size classes and free lists. Bin b holds the free chunks whose size lies in
// [kMinAllocationSize << b, kMinAllocationSize << (b + 1)); the last bin
// (kNumBins - 1) takes everything larger. Inside a bin, chunks are ordered by
// (size, address), so the first chunk with size >= n is the best fit, lowest
// address on ties: exactly the chunk TensorFlow's BFC picks.
//
// The ordered set holds (size, address, handle) keys, so ordering never has to
// look at the chunk table. Its nodes come from a NodePool that recycles them,
// so steady-state churn (a bin emptying and filling again, the root leaf
// growing and shrinking) never calls malloc. Internal: not part of the API.
// Thread-compatible.
//
// Invariants (Bin::Validate checks them): entries strictly increase in
// (size, address) order; every entry's size and address are non-zero
// multiples of kMinAllocationSize and its size falls in the bin's class;
// total_bytes() is the sum of the entries' sizes; exactly one representation
// holds the entries (the inline array with at most kSmallCapacity, or the
// B-tree with more than kSmallCapacity / 4). Against a chunk table: every
// entry names a live, free chunk with the entry's address and size.
#ifndef BFC_INTERNAL_BIN_H_
#define BFC_INTERNAL_BIN_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <vector>

#include "absl/base/attributes.h"
#include "absl/container/btree_set.h"
#include "absl/status/status.h"
#include "bfc/internal/check.h"
#include "bfc/internal/chunk.h"
#include "bfc/internal/constants.h"
#include "bfc/internal/shortage.h"

namespace bfc::internal {

// Rounds `bytes` up to a multiple of kMinAllocationSize (at least one).
// Requires bytes <= kMaxRoundableBytes (larger sizes wrap to
// kMinAllocationSize; callers check requests first).
inline constexpr size_t kMaxRoundableBytes =
    ~size_t{0} - (kMinAllocationSize - 1);
inline size_t RoundedBytes(size_t bytes) {
  const size_t rounded =
      (bytes + (kMinAllocationSize - 1)) & ~(kMinAllocationSize - 1);
  return rounded == 0 ? kMinAllocationSize : rounded;
}

// The smallest chunk size bin `b` holds.
inline size_t BinNumToSize(BinNum b) { return kMinAllocationSize << b; }

// The bin for a chunk (or request) of `bytes`.
inline BinNum BinNumForSize(size_t bytes) {
  // floor(log2(max(bytes, 256) / 256)) without the max: or-ing in the
  // granule leaves the top bit of a larger size alone and makes a smaller one
  // a granule.
  const int log2 = 63 - __builtin_clzll(uint64_t{bytes} | kMinAllocationSize) -
                   kMinAllocationBits;
  return log2 < kNumBins - 1 ? log2 : kNumBins - 1;
}

// Free lists of B-tree node storage, one per node size (a B-tree uses a few:
// leaves of growing capacity and internal nodes). Memory is returned to the
// heap only when the pool is destroyed.
class NodePool {
 public:
  NodePool() = default;
  NodePool(const NodePool&) = delete;
  NodePool& operator=(const NodePool&) = delete;
  ~NodePool();

  void* Allocate(size_t bytes) {
    for (FreeList& l : lists_) {
      if (l.bytes == bytes && l.head != nullptr) {
        void* p = l.head;
        l.head = *static_cast<void**>(p);
        return p;
      }
    }
    return AllocateSlow(bytes);
  }
  void Deallocate(void* p, size_t bytes) {
    for (FreeList& l : lists_) {
      if (l.bytes == bytes) {
        *static_cast<void**>(p) = l.head;
        l.head = p;
        return;
      }
    }
    DeallocateSlow(p, bytes);
  }
  // Heap bytes obtained (live nodes plus recycled ones).
  size_t bytes_held() const { return bytes_held_; }
  // Where a node that had to come from the emergency arena is reported
  // (shortage.h).
  void set_shortage_signal(ShortageSignal s) { shortage_ = s; }

 private:
  struct FreeList {
    size_t bytes;
    void* head;
  };
  // A node from the heap without throwing, else from the emergency arena
  // (shared by every pool of the process, never returned to the heap: a
  // pool gives its arena nodes back to the arena's own free lists when it
  // is destroyed, for the next pool); an exception only when both are
  // exhausted.
  void* AllocateSlow(size_t bytes);
  void DeallocateSlow(void* p, size_t bytes);

  std::vector<FreeList> lists_;
  size_t bytes_held_ = 0;
  ShortageSignal shortage_;
};

// A std allocator drawing from a NodePool.
template <typename T>
struct PoolAllocator {
  using value_type = T;
  NodePool* pool;
  explicit PoolAllocator(NodePool* p) : pool(p) {}
  template <typename U>
  PoolAllocator(const PoolAllocator<U>& o) : pool(o.pool) {}  // NOLINT
  T* allocate(size_t n) {
    return static_cast<T*>(pool->Allocate(n * sizeof(T)));
  }
  void deallocate(T* p, size_t n) { pool->Deallocate(p, n * sizeof(T)); }
  template <typename U>
  bool operator==(const PoolAllocator<U>& o) const {
    return pool == o.pool;
  }
  template <typename U>
  bool operator!=(const PoolAllocator<U>& o) const {
    return pool != o.pool;
  }
};

class Bin {
 public:
  struct Entry {
    size_t size;
    uintptr_t addr;
    ChunkHandle handle;
  };

  Bin()
      : pool_(std::make_unique<NodePool>()),
        free_chunks_(Less(), PoolAllocator<Entry>(pool_.get())) {}

  // Where a B-tree node taken from the emergency arena is reported
  // (shortage.h).
  void set_shortage_signal(ShortageSignal s) { pool_->set_shortage_signal(s); }

  // Adds a free chunk. Returns false (and changes nothing) if a chunk with the
  // same address is already present at that size.
  // Always inlined: the free path calls it once per free, and the compiler
  // stops inlining it as the path grows (a call costs ~5% of a free).
  [[nodiscard]] ABSL_ATTRIBUTE_ALWAYS_INLINE bool Insert(size_t size,
                                                         const void* ptr,
                                                         ChunkHandle h) {
    const uintptr_t addr = reinterpret_cast<uintptr_t>(ptr);
    if (!small_ || num_small_ == kSmallCapacity) {
      return InsertLarge(Entry{size, addr, h});
    }
    // One insertion-sort step from the end: most bins hold 0-2 chunks.
    Entry* pos = small_end();
    while (pos != small_begin() &&
           Less::Before(size, addr, pos[-1].size, pos[-1].addr)) {
      *pos = pos[-1];
      --pos;
    }
    // Not before it and not after it: the same key.
    if (pos != small_begin() && pos[-1].size == size && pos[-1].addr == addr) {
      std::copy(pos + 1, small_end() + 1, pos);  // a duplicate: undo
      return false;
    }
    // Field by field: an Entry built on the stack and copied here is read
    // back 16 bytes at once from two 8-byte stores, which the CPU cannot
    // forward (a stall of ~15 % of an allocate or free on the traces).
    pos->size = size;
    pos->addr = addr;
    pos->handle = h;
    ++num_small_;
    total_bytes_ += size;
    return true;
  }
  // Removes the chunk keyed (size, ptr). Returns false if it was not present.
  [[nodiscard]] ABSL_ATTRIBUTE_ALWAYS_INLINE bool Erase(size_t size,
                                                        const void* ptr) {
    const Entry key{size, reinterpret_cast<uintptr_t>(ptr), 0};
    if (!small_) return EraseLarge(key);
    Entry* pos = SmallLowerBound(key);
    if (pos == small_end() || Less()(key, *pos)) return false;
    SmallErase(pos);
    return true;
  }
  [[nodiscard]] bool Contains(size_t size, const void* ptr) const;

  // Best fit: the first entry in (size, address) order with size >= min_size,
  // or nullptr.
  const Entry* FindBestFit(size_t min_size) const {
    if (small_) {
      const Entry* pos = SmallLowerBound(Entry{min_size, 0, 0});
      return pos == small_end() ? nullptr : pos;
    }
    auto it = free_chunks_.lower_bound(Entry{min_size, 0, 0});
    return it == free_chunks_.end() ? nullptr : &*it;
  }

  // The first entry in (size, address) order with size >= min_size for which
  // `accept(entry)` is true, or nullptr. Used for over-aligned requests.
  template <typename Pred>
  const Entry* FindFirst(size_t min_size, Pred accept) const {
    if (small_) {
      for (const Entry* p = SmallLowerBound(Entry{min_size, 0, 0});
           p != small_end(); ++p) {
        if (accept(*p)) return p;
      }
      return nullptr;
    }
    for (auto it = free_chunks_.lower_bound(Entry{min_size, 0, 0});
         it != free_chunks_.end(); ++it) {
      if (accept(*it)) return &*it;
    }
    return nullptr;
  }

  // Removes and returns (in *out) the best fit, as FindBestFit picks it, with
  // one search (no second search by key). False when no entry fits.
  [[nodiscard]] bool TakeBestFit(size_t min_size, Entry* out) {
    if (!small_) return TakeBestFitLarge(min_size, out);
    Entry* pos = SmallLowerBound(Entry{min_size, 0, 0});
    if (pos == small_end()) return false;
    *out = *pos;
    SmallErase(pos);
    return true;
  }
  // TakeBestFit, but only when the best fit is smaller than `below`; false
  // (nothing taken) otherwise. Entries are ordered by size, so a best fit at
  // or above `below` means every entry here that fits is too large.
  [[nodiscard]] bool TakeBestFitBelow(size_t min_size, size_t below,
                                      Entry* out) {
    const Entry* best = FindFirst(min_size, [](const Entry&) { return true; });
    if (best == nullptr || best->size >= below) return false;
    return TakeBestFit(min_size, out);
  }
  // Removes and returns the entry FindFirst(min_size, accept) picks.
  template <typename Pred>
  [[nodiscard]] bool TakeFirst(size_t min_size, Pred accept, Entry* out) {
    if (small_) {
      for (Entry* p = SmallLowerBound(Entry{min_size, 0, 0}); p != small_end();
           ++p) {
        if (accept(*p)) {
          *out = *p;
          SmallErase(p);
          return true;
        }
      }
      return false;
    }
    for (auto it = free_chunks_.lower_bound(Entry{min_size, 0, 0});
         it != free_chunks_.end(); ++it) {
      if (accept(*it)) {
        *out = *it;
        free_chunks_.erase(it);
        total_bytes_ -= out->size;
        MaybeToSmall();
        return true;
      }
    }
    return false;
  }

  // The largest free chunk, or nullptr when empty.
  const Entry* Largest() const;

  // By the byte count, which both representations keep: every entry has a
  // non-zero size (Validate), and one load tests it without asking which
  // representation holds the entries.
  bool empty() const { return total_bytes_ == 0; }
  size_t size() const { return small_ ? num_small_ : free_chunks_.size(); }
  size_t total_bytes() const { return total_bytes_; }
  // Heap bytes held by the set's nodes (live and recycled). The small array
  // is part of the Bin itself.
  size_t node_bytes() const { return pool_->bytes_held(); }

  template <typename F>
  void ForEach(F f) const {
    if (small_) {
      for (const Entry* p = small_begin(); p != small_end(); ++p) f(*p);
      return;
    }
    for (const Entry& e : free_chunks_) f(e);
  }

  // Checks the invariants above for bin number `bin_num`; with `chunks`, also
  // that every entry names a live free chunk of that address and size. OK, or
  // the first violation, naming the bin and the entry:
  //   "Bin 3: entry 1 (handle 7, ptr 0x1000, size 2048) is not after entry 0
  //    (handle 6, ptr 0x1200, size 2048) in (size, address) order"
  // O(entries).
  [[nodiscard]] absl::Status Validate(BinNum bin_num,
                                      const ChunkTable* chunks) const;

 private:
  friend class BinTestPeer;  // tests/bin_test.cc corrupts a bin on purpose

  struct Less {
    // Absl searches a B-tree node (about ten entries) with this compare
    // linearly instead of by halving: each compare's outcome depends on the
    // data, so a linear scan mispredicts about once per node where halving
    // mispredicts about half its steps. Random 100k live: 6.4 -> 5.4
    // mispredicted branches per operation, 0.89-0.92 of the time
    // (bench/README.md, pass 11).
    using absl_btree_prefer_linear_node_search = std::true_type;
    bool operator()(const Entry& a, const Entry& b) const {
      return Before(a.size, a.addr, b.size, b.addr);
    }
    // The order on keys alone, for callers that hold no Entry (Insert).
    static bool Before(size_t a_size, uintptr_t a_addr, size_t b_size,
                       uintptr_t b_addr) {
      return a_size < b_size || (a_size == b_size && a_addr < b_addr);
    }
  };
  // A bin holding at most kSmallCapacity entries keeps them in a sorted
  // inline array (a linear scan and a short move per operation, no node
  // management); it switches to the B-tree when the array overflows and back
  // when the tree shrinks to kSmallCapacity / 4 entries (hysteresis, so a bin
  // hovering at the limit does not convert on every operation). Both hold
  // the same entries in the same (size, address) order.
  static constexpr uint32_t kSmallCapacity = 32;

  Entry* small_begin() { return small_entries_; }
  Entry* small_end() { return small_entries_ + num_small_; }
  const Entry* small_begin() const { return small_entries_; }
  const Entry* small_end() const { return small_entries_ + num_small_; }
  // A linear scan: at most kSmallCapacity entries, usually one or two, where
  // a binary search's mispredicted branches cost more than the compares.
  Entry* SmallLowerBound(const Entry& key) {
    Entry* p = small_begin();
    while (p != small_end() && Less()(*p, key)) ++p;
    return p;
  }
  const Entry* SmallLowerBound(const Entry& key) const {
    const Entry* p = small_begin();
    while (p != small_end() && Less()(*p, key)) ++p;
    return p;
  }
  void SmallErase(Entry* pos) {
    total_bytes_ -= pos->size;
    std::copy(pos + 1, small_end(), pos);
    --num_small_;
  }
  // The B-tree halves of Insert, Erase and TakeBestFit, out of line so the
  // inline array paths stay small enough to inline into the allocator.
  bool InsertLarge(const Entry& e);
  bool EraseLarge(const Entry& key);
  bool TakeBestFitLarge(size_t min_size, Entry* out);

  void ToLarge() {
    // All or nothing: a node that cannot be had leaves the array as it was.
    try {
      free_chunks_.insert(small_begin(), small_end());
    } catch (...) {
      free_chunks_.clear();
      throw;
    }
    num_small_ = 0;
    small_ = false;
  }
  void MaybeToSmall() {
    if (free_chunks_.size() > kSmallCapacity / 4) return;
    num_small_ = 0;
    for (const Entry& e : free_chunks_) small_entries_[num_small_++] = e;
    free_chunks_.clear();
    small_ = true;
  }

  // Declared first: destroyed after the set that returns its nodes to it.
  std::unique_ptr<NodePool> pool_;
  absl::btree_set<Entry, Less, PoolAllocator<Entry>> free_chunks_;
  size_t total_bytes_ = 0;
  bool small_ = true;
  uint32_t num_small_ = 0;
  Entry small_entries_[kSmallCapacity];
};

}  // namespace bfc::internal

#endif  // BFC_INTERNAL_BIN_H_
