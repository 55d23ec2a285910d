// File: src/core/chunk.cc
#include "bfc/internal/chunk.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <new>
#include <utility>

#include "absl/base/attributes.h"
#include "absl/base/const_init.h"
#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "bfc/internal/mutex.h"
#include "bfc/internal/str_format.h"

namespace bfc::internal {

std::string Chunk::DebugString() const {
  return internal::Format(
      "Chunk{ptr=%p, size=%u, requested=%u, id=%d, in_use=%s}", ptr, size,
      requested_size, allocation_id, in_use() ? "true" : "false");
}

ChunkHandle ChunkTable::AllocateSlow() {
  // The free list is empty: the next unused slot. The next block comes while
  // kSpareEntries slots are still left, without throwing: this runs in the
  // middle of an allocation, which must not stop half done. If the host has
  // no memory, the slots left serve this operation, and the shortage makes
  // the next allocation grow the table first (shortage.h).
  if (handle_bound() - size_ <= kSpareEntries && !TryAddBlock()) {
    shortage_.Raise();
    // Only when more than kSpareEntries chunks came after a failed growth,
    // which the refused allocations prevent.
    if (size_ == handle_bound()) throw std::bad_alloc();
  }
  return static_cast<ChunkHandle>(size_++);
}

namespace {

size_t PageBytes() {
  static const size_t page = [] {
    const long p = sysconf(_SC_PAGESIZE);
    return p > 0 ? static_cast<size_t>(p) : size_t{4096};
  }();
  return page;
}

size_t RangeBytes(size_t chunks) {
  const size_t page = PageBytes();
  return (chunks * sizeof(Chunk) + page - 1) / page * page;
}

// One released range, kept for the next table. A process that builds pools
// one after another (tests, a pool per request or per model) would otherwise
// fault in fresh pages for every table's first blocks, ~1.5 us a page on a
// VM and 5-9 % of a short trace replayed from an empty pool (bench/README.md,
// pass 8). Parked, the range is PROT_NONE like a fresh one, so the next table
// commits its blocks with the same calls (and fails the same way), but up
// to kParkedBytes of its pages stay resident and come back without a fault.
constexpr size_t kParkedBytes = size_t{256} << 10;

ABSL_CONST_INIT Mutex g_parked_mu(absl::kConstInit);
void* g_parked_base ABSL_GUARDED_BY(g_parked_mu) = nullptr;
size_t g_parked_bytes ABSL_GUARDED_BY(g_parked_mu) = 0;

// A parked range of at least `bytes`, or nullptr; `*mapped` gets its length.
void* TakeParked(size_t bytes, size_t* mapped) {
  MutexLock lock(&g_parked_mu);
  if (g_parked_base == nullptr || g_parked_bytes < bytes) return nullptr;
  *mapped = g_parked_bytes;
  g_parked_bytes = 0;
  return std::exchange(g_parked_base, nullptr);
}

// Parks [base, base + mapped), of which the first `committed` bytes are
// usable, or unmaps it when a range is parked already.
void ParkOrUnmap(void* base, size_t mapped, size_t committed) {
  {
    MutexLock lock(&g_parked_mu);
    if (g_parked_base == nullptr) {
      // Pages past kParkedBytes go back to the host; the rest stay, behind
      // PROT_NONE. Should either call fail, the range goes back whole.
      char* const p = static_cast<char*>(base);
      const size_t keep = std::min(committed, kParkedBytes);
      if ((committed == keep ||
           madvise(p + keep, committed - keep, MADV_DONTNEED) == 0) &&
          (committed == 0 || mprotect(p, committed, PROT_NONE) == 0)) {
        g_parked_base = base;
        g_parked_bytes = mapped;
        return;
      }
    }
  }
  munmap(base, mapped);
}

}  // namespace

void AdviseHugePages(void* p, size_t bytes) noexcept {
  const uintptr_t begin = reinterpret_cast<uintptr_t>(p);
  const uintptr_t lo =
      (begin + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  const uintptr_t hi = (begin + bytes) / kHugePageBytes * kHugePageBytes;
  if (hi > lo)
    (void)madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_HUGEPAGE);
}

void ChunkTable::DropParkedRange() {
  size_t mapped = 0;
  if (void* p = TakeParked(0, &mapped)) munmap(p, mapped);
}

ChunkTable::ChunkTable(ChunkTable&& other) noexcept
    : base_(std::exchange(other.base_, nullptr)),
      mapped_bytes_(std::exchange(other.mapped_bytes_, 0)),
      reserved_chunks_(std::exchange(other.reserved_chunks_, 0)),
      max_chunks_(other.max_chunks_),
      num_blocks_(std::exchange(other.num_blocks_, 0)),
      size_(std::exchange(other.size_, 0)),
      free_list_(std::exchange(other.free_list_, kInvalidChunkHandle)),
      num_live_(std::exchange(other.num_live_, 0)),
      shortage_(other.shortage_),
      grow_hook_(other.grow_hook_),
      grow_context_(other.grow_context_) {}

ChunkTable::~ChunkTable() {
  // Chunks are trivially destructible: the range goes back whole.
  if (base_ == nullptr) return;
  ParkOrUnmap(base_, mapped_bytes_, CommittedBytes(num_blocks_));
}

void ChunkTable::set_max_chunks(size_t n) {
  BFC_DCHECK(base_ == nullptr);
  if (base_ != nullptr) return;
  n = std::max(n, kBlockChunks);
  max_chunks_ = n >= kMaxChunks
                    ? kMaxChunks
                    : (n + kBlockChunks - 1) / kBlockChunks * kBlockChunks;
}

bool ChunkTable::TryReserve() noexcept {
  // Address space only (PROT_NONE: nothing committed or counted against
  // the host's memory); a process short of address space (ulimit -v, many
  // allocators) gets a smaller range.
  if (void* p = TakeParked(RangeBytes(max_chunks_), &mapped_bytes_)) {
    base_ = static_cast<Chunk*>(p);
    reserved_chunks_ = max_chunks_;
    return true;
  }
  for (size_t n = max_chunks_; n >= kBlockChunks; n /= 2) {
    const size_t chunks = n / kBlockChunks * kBlockChunks;
    const size_t bytes = RangeBytes(chunks);
    // One huge page more than the range, so that it can start on a huge
    // page boundary; the rest is given back at once.
    void* p = mmap(nullptr, bytes + kHugePageBytes, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) continue;
    char* const raw = static_cast<char*>(p);
    char* const start = reinterpret_cast<char*>(
        (reinterpret_cast<uintptr_t>(raw) + kHugePageBytes - 1) /
        kHugePageBytes * kHugePageBytes);
    if (start != raw) munmap(raw, start - raw);
    munmap(start + bytes, raw + kHugePageBytes - start);
    AdviseHugePages(start, bytes);
    base_ = reinterpret_cast<Chunk*>(start);
    mapped_bytes_ = bytes;
    reserved_chunks_ = chunks;
    return true;
  }
  return false;
}

size_t ChunkTable::CommittedBytes(size_t blocks) const {
  // Whole pages; past the first huge page, whole huge pages (capped by the
  // range): the kernel backs a huge page only where the whole of it is
  // usable, and the first stays in small pages so that a small table holds
  // a few KiB, not 2 MiB.
  const size_t page = PageBytes();
  size_t bytes =
      (blocks * kBlockChunks * sizeof(Chunk) + page - 1) / page * page;
  if (bytes > kHugePageBytes) {
    bytes =
        std::min((bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes,
                 mapped_bytes_);
  }
  return bytes;
}

bool ChunkTable::TryAddBlock() noexcept {
  if (base_ == nullptr && !TryReserve()) return false;
  if (handle_bound() + kBlockChunks > reserved_chunks_) return false;
  Chunk* const block = base_ + handle_bound();
  // What the block needs usable, from the first page not usable yet (the
  // previous block's last page, or the rest of its huge page, already is).
  const size_t done = CommittedBytes(num_blocks_);
  const size_t need = CommittedBytes(num_blocks_ + 1);
  if (need > done && mprotect(reinterpret_cast<char*>(base_) + done,
                              need - done, PROT_READ | PROT_WRITE) != 0) {
    return false;  // the host has no memory to commit (ENOMEM)
  }
  if (grow_hook_ != nullptr &&
      !grow_hook_(grow_context_, handle_bound() + kBlockChunks)) {
    return false;  // the pages stay usable, for the next try
  }
  for (size_t i = 0; i < kBlockChunks; ++i) new (&block[i]) Chunk();
  ++num_blocks_;
  return true;
}

void ChunkTable::Reserve(size_t n) {
  // Beyond the room AllocateSlow keeps, so that it does not grow (and fail
  // again) at once.
  while (spare() <= n + kSpareEntries) {
    if (!TryAddBlock()) throw std::bad_alloc();
  }
}

absl::Status ChunkTable::Validate() const {
  auto fail = [](auto&&... parts) {
    return absl::InternalError(absl::StrCat("ChunkTable: ", parts...));
  };
  if (size_ > handle_bound()) {
    return fail("capacity ", size_, " exceeds the ", handle_bound(),
                " slots of its ", num_blocks_, " blocks");
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
    const Chunk& c = base_[h];
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
