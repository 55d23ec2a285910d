// File: bench/map_best_fit_pool.h
// -----------------------------------------------------------------------------
//
// MapBestFitPool: the plain reference an allocator engineer writes first, and
// the yardstick issue 19's goals are ratios to: exact best fit over a
// std::set of free blocks ordered by (size, address), every block in a
// std::map by address so a free finds its block and merges with free
// neighbours on both sides. Sizes round up to 256 bytes; a block is split
// whenever anything is left (TF splits only when the rest is at least the
// request or 128 MiB), in one arena without growth. Same search order as
// TF's bins, none of their machinery.
//
// The arena is addresses only (never touched), like the benchmarks' other
// pools over a VirtualSubAllocator. Not thread-safe.
#ifndef BFC_BENCH_MAP_BEST_FIT_POOL_H_
#define BFC_BENCH_MAP_BEST_FIT_POOL_H_

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <map>
#include <set>
#include <utility>

namespace bfc::bench {

class MapBestFitPool {
 public:
  // `capacity` bytes of addresses starting at a fixed, 256-aligned base
  // (nothing is mapped there; the pointers are only handed back).
  explicit MapBestFitPool(size_t capacity) {
    capacity &= ~size_t{255};
    blocks_.emplace(kBase, Block{capacity, true});
    free_.emplace(capacity, kBase);
  }

  void* Alloc(size_t n) {
    const size_t rounded = (n + 255) & ~size_t{255};
    if (rounded < n || rounded == 0) return nullptr;
    auto fit = free_.lower_bound({rounded, 0});
    if (fit == free_.end()) return nullptr;
    const auto [size, addr] = *fit;
    free_.erase(fit);
    auto block = blocks_.find(addr);
    block->second.free = false;
    if (size > rounded) {
      block->second.size = rounded;
      blocks_.emplace_hint(std::next(block), addr + rounded,
                           Block{size - rounded, true});
      free_.emplace(size - rounded, addr + rounded);
    }
    return reinterpret_cast<void*>(addr);
  }

  void Free(void* p, size_t) {
    auto block = blocks_.find(reinterpret_cast<uintptr_t>(p));
    if (block == blocks_.end() || block->second.free) return;
    block->second.free = true;
    // The next block joins this one, then this one joins the previous.
    auto next = std::next(block);
    if (next != blocks_.end() && next->second.free) {
      free_.erase({next->second.size, next->first});
      block->second.size += next->second.size;
      blocks_.erase(next);
    }
    if (block != blocks_.begin()) {
      auto prev = std::prev(block);
      if (prev->second.free) {
        free_.erase({prev->second.size, prev->first});
        prev->second.size += block->second.size;
        blocks_.erase(block);
        block = prev;
      }
    }
    free_.emplace(block->second.size, block->first);
  }

  size_t free_blocks() const { return free_.size(); }

 private:
  static constexpr uintptr_t kBase = uintptr_t{1} << 44;
  struct Block {
    size_t size;
    bool free;
  };
  std::map<uintptr_t, Block> blocks_;
  std::set<std::pair<size_t, uintptr_t>> free_;
};

}  // namespace bfc::bench

#endif  // BFC_BENCH_MAP_BEST_FIT_POOL_H_
