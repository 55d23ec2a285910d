// File: src/core/bin.cc
#include "bfc/internal/bin.h"

#include <atomic>
#include <mutex>
#include <new>
#include <string>

#include "absl/strings/str_cat.h"
#include "bfc/internal/str_format.h"

namespace bfc::internal {
namespace {

std::string DescribeEntry(size_t index, const Bin::Entry& e) {
  return internal::Format("entry %d (handle %d, ptr 0x%x, size %d)", index,
                          e.handle, e.addr, e.size);
}

}  // namespace

absl::Status Bin::Validate(BinNum bin_num, const ChunkTable* chunks) const {
  auto fail = [&](auto&&... parts) {
    return absl::InternalError(absl::StrCat("Bin ", bin_num, ": ", parts...));
  };
  // Exactly one representation holds the entries, within its bounds.
  if (small_) {
    if (!free_chunks_.empty()) {
      return fail("the inline array is in use but the B-tree holds ",
                  free_chunks_.size(), " entries");
    }
    if (num_small_ > kSmallCapacity) {
      return fail("the inline array holds ", num_small_,
                  " entries, more than its capacity ", kSmallCapacity);
    }
  } else {
    if (num_small_ != 0) {
      return fail("the B-tree is in use but the inline array's count is ",
                  num_small_);
    }
    if (free_chunks_.size() <= kSmallCapacity / 4) {
      return fail("the B-tree holds ", free_chunks_.size(),
                  " entries, which belong in the inline array (at most ",
                  kSmallCapacity / 4, ")");
    }
  }
  absl::Status status;
  size_t index = 0;
  size_t bytes = 0;
  const Entry* prev = nullptr;
  ForEach([&](const Entry& e) {
    if (!status.ok()) return;
    const size_t i = index++;
    if (prev != nullptr && !Less()(*prev, e)) {
      status = fail(DescribeEntry(i, e), " is not after ",
                    DescribeEntry(i - 1, *prev), " in (size, address) order");
      return;
    }
    prev = &e;
    if (e.size == 0 || e.size % kMinAllocationSize != 0 ||
        e.addr % kMinAllocationSize != 0) {
      status = fail(DescribeEntry(i, e),
                    " has a size or address that is not a non-zero multiple "
                    "of ",
                    kMinAllocationSize);
      return;
    }
    if (BinNumForSize(e.size) != bin_num) {
      status =
          fail(DescribeEntry(i, e), " belongs in bin ", BinNumForSize(e.size));
      return;
    }
    bytes += e.size;
    if (chunks == nullptr) return;
    if (!chunks->InRange(e.handle)) {
      status = fail(DescribeEntry(i, e), " names a handle out of range (",
                    chunks->capacity(), " chunk slots)");
      return;
    }
    const Chunk& c = (*chunks)[e.handle];
    if (c.in_use()) {
      status = fail(DescribeEntry(i, e), " is in use: ", c.DebugString());
      return;
    }
    if (c.addr() != e.addr || c.size != e.size) {
      status = fail(DescribeEntry(i, e), " does not match its chunk ",
                    c.DebugString());
    }
  });
  if (!status.ok()) return status;
  if (index != size()) {
    return fail("holds ", index, " entries but counts ", size());
  }
  if (bytes != total_bytes_) {
    return fail("entries sum to ", bytes, " bytes but total_bytes is ",
                total_bytes_);
  }
  return absl::OkStatus();
}

bool Bin::Contains(size_t size, const void* ptr) const {
  const Entry key{size, reinterpret_cast<uintptr_t>(ptr), 0};
  if (small_) {
    const Entry* pos = SmallLowerBound(key);
    return pos != small_end() && !Less()(key, *pos);
  }
  return free_chunks_.contains(key);
}

bool Bin::InsertLarge(const Entry& e) {
  if (small_) {
    // The array is full: look for a duplicate before converting.
    Entry* pos = SmallLowerBound(e);
    if (pos != small_end() && !Less()(e, *pos)) return false;
    ToLarge();
  }
  const bool inserted = free_chunks_.insert(e).second;
  if (inserted) total_bytes_ += e.size;
  return inserted;
}

bool Bin::EraseLarge(const Entry& key) {
  const bool erased = free_chunks_.erase(key) > 0;
  if (erased) {
    total_bytes_ -= key.size;
    MaybeToSmall();
  }
  return erased;
}

bool Bin::TakeBestFitLarge(size_t min_size, Entry* out) {
  auto it = free_chunks_.lower_bound(Entry{min_size, 0, 0});
  if (it == free_chunks_.end()) return false;
  *out = *it;
  free_chunks_.erase(it);
  total_bytes_ -= out->size;
  MaybeToSmall();
  return true;
}

namespace {

// Nodes for when the heap has none (shortage.h): a B-tree insert in the
// middle of a free or an allocation must not fail. 256 KiB of zero pages
// (bss) that cost nothing until used: over a thousand nodes, far more than
// the operations between a failed growth and the refused allocation need.
// Nodes taken from it are recycled by their pool and never returned.
constexpr size_t kArenaBytes = size_t{256} << 10;
alignas(64) char g_arena[kArenaBytes];
std::atomic<size_t> g_arena_used{0};

bool InArena(const void* p) {
  const char* c = static_cast<const char*>(p);
  return c >= g_arena && c < g_arena + kArenaBytes;
}

// Arena nodes given back by destroyed pools, one list per node size (a
// B-tree uses a handful). Without them, pools created and destroyed while
// the host was short used the arena up for good, and a B-tree insert in
// the middle of a later free threw. A node of a size with no list left is
// dropped, as every arena node was before.
struct ArenaList {
  size_t bytes = 0;
  void* head = nullptr;
};
constexpr int kArenaLists = 16;
ArenaList g_arena_lists[kArenaLists];
std::mutex g_arena_lists_mu;

void ReturnToArena(void* p, size_t bytes) {
  std::lock_guard<std::mutex> lock(g_arena_lists_mu);
  for (ArenaList& l : g_arena_lists) {
    if (l.bytes == 0) l.bytes = bytes;
    if (l.bytes != bytes) continue;
    *static_cast<void**>(p) = l.head;
    l.head = p;
    return;
  }
}

void* TakeFromArena(size_t bytes) {
  std::lock_guard<std::mutex> lock(g_arena_lists_mu);
  for (ArenaList& l : g_arena_lists) {
    if (l.bytes != bytes || l.head == nullptr) continue;
    void* p = l.head;
    l.head = *static_cast<void**>(p);
    return p;
  }
  return nullptr;
}

}  // namespace

NodePool::~NodePool() {
  for (FreeList& l : lists_) {
    while (l.head != nullptr) {
      void* p = l.head;
      l.head = *static_cast<void**>(p);
      if (InArena(p)) {
        ReturnToArena(p, l.bytes);
      } else {
        ::operator delete(p);
      }
    }
  }
}

void* NodePool::AllocateSlow(size_t bytes) {
  if (void* p = ::operator new(bytes, std::nothrow)) {
    bytes_held_ += bytes;
    return p;
  }
  shortage_.Raise();
  if (void* p = TakeFromArena(bytes)) return p;
  const size_t rounded = (bytes + 63) & ~size_t{63};
  const size_t at = g_arena_used.fetch_add(rounded, std::memory_order_relaxed);
  if (at + rounded > kArenaBytes) throw std::bad_alloc();
  return g_arena + at;
}

void NodePool::DeallocateSlow(void* p, size_t bytes) {
  // A node of a size not seen before: a list for it, if the heap has room
  // for one more entry; else the node goes back to the heap (or, from the
  // arena, is dropped).
  try {
    lists_.push_back(FreeList{bytes, nullptr});
  } catch (...) {
    if (InArena(p)) {
      ReturnToArena(p, bytes);
    } else {
      ::operator delete(p);
      bytes_held_ -= bytes;
    }
    return;
  }
  Deallocate(p, bytes);
}

const Bin::Entry* Bin::Largest() const {
  if (small_) return num_small_ == 0 ? nullptr : small_end() - 1;
  return free_chunks_.empty() ? nullptr : &*free_chunks_.rbegin();
}

}  // namespace bfc::internal
