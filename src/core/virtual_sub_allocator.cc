// File: src/virtual_sub_allocator.cc
// -----------------------------------------------------------------------------
//
// VirtualSubAllocator: address-space bookkeeping over one PROT_NONE mapping.
//
// Two ordered maps describe the reservation: `free_ranges_` (offset -> length,
// always coalesced) and `used_ranges_` (offset -> length handed out). Every
// block also owns the `gap_bytes` that follow it (clipped at the end of the
// reservation): the gap goes back to `free_ranges_` with its block, so while a
// block is live nothing can be placed right after it and no two blocks are
// adjacent. The reserved length is therefore a pure function of the handed-out
// length and the offset, and need not be stored.
//
// Counters: num_alloc_calls() and num_free_calls() count every call (failed
// ones included; a Free of nullptr is not a call that did anything and is not
// counted); invalid_frees() counts the Free calls that were ignored.
#include "bfc/virtual_sub_allocator.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "bfc/internal/constants.h"
#include "bfc/internal/str_format.h"
#include "bfc/log.h"
#include "core/internal/bits.h"

namespace bfc {
namespace {

using internal::IsPowerOfTwo;
using internal::RoundUp;

// The allocator's chunk granularity: both block sizes and block addresses are
// multiples of it, so the allocator's region map never sees a ragged edge.
constexpr size_t kGranule = kMinAllocationSize;

size_t PageSize() {
  const long page = sysconf(_SC_PAGESIZE);
  return page > 0 ? static_cast<size_t>(page) : size_t{4096};
}

}  // namespace

VirtualSubAllocator::VirtualSubAllocator(size_t capacity_bytes)
    : VirtualSubAllocator(capacity_bytes, Options()) {}

VirtualSubAllocator::VirtualSubAllocator(size_t capacity_bytes,
                                         const Options& options)
    : VirtualSubAllocator(capacity_bytes, options, {}, {}) {}

VirtualSubAllocator::VirtualSubAllocator(size_t capacity_bytes,
                                         const Options& options,
                                         std::vector<Visitor> alloc_visitors,
                                         std::vector<Visitor> free_visitors)
    : SubAllocator(std::move(alloc_visitors), std::move(free_visitors)),
      options_(options),
      page_(options.partial_free_bytes >= kGranule &&
                    IsPowerOfTwo(options.partial_free_bytes) &&
                    options.gap_bytes == 0
                ? options.partial_free_bytes
                : 0) {
  size_t capacity = 0;
  if (capacity_bytes == 0) {
    reservation_error_ = "a capacity of 0 bytes reserves nothing";
    return;
  }
  if (!RoundUp(capacity_bytes, PageSize(), &capacity)) {
    reservation_error_ = internal::Format(
        "a capacity of %d bytes overflows when rounded up to the page size",
        capacity_bytes);
    return;
  }
  // PROT_NONE + MAP_NORESERVE: the kernel hands out address space only, with
  // no commit charge, so terabyte reservations succeed on small machines and
  // any accidental dereference faults instead of silently using memory.
  reservation_error_ = internal::Format(
      "cannot reserve %d bytes of address space", capacity_bytes);
  void* base = mmap(nullptr, capacity, PROT_NONE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED) {
    absl::StrAppend(&reservation_error_, " (mmap: ", std::strerror(errno), ")");
    Log(LogSeverity::kError,
        internal::Format("VirtualSubAllocator: cannot reserve %d bytes of "
                         "address space; every Alloc will fail",
                         capacity_bytes));
    return;
  }
  reservation_error_.clear();
  base_ = static_cast<char*>(base);
  capacity_ = capacity;
  free_ranges_.emplace(0, capacity_);
}

absl::Status VirtualSubAllocator::Availability() const {
  if (base_ != nullptr) return absl::OkStatus();
  return absl::UnavailableError(
      absl::StrCat("VirtualSubAllocator: ", reservation_error_));
}

VirtualSubAllocator::~VirtualSubAllocator() {
  if (base_ != nullptr) munmap(base_, capacity_);
}

void* VirtualSubAllocator::Alloc(size_t alignment, size_t num_bytes,
                                 size_t* bytes_received) {
  ++num_alloc_calls_;
  if (bytes_received != nullptr) *bytes_received = 0;
  if (base_ == nullptr || num_bytes == 0 || !IsPowerOfTwo(alignment)) {
    return nullptr;
  }
  if (alignment < kGranule) alignment = kGranule;
  // Pages: whole and page aligned, so any page of a block can go back alone.
  if (alignment < page_) alignment = page_;
  size_t length = 0;
  if (!RoundUp(num_bytes, page_ != 0 ? page_ : kGranule, &length) ||
      length > capacity_) {
    return nullptr;
  }
  const uintptr_t base_addr = reinterpret_cast<uintptr_t>(base_);
  // With never_reuse, everything below the bump pointer is dead address space
  // even once freed, so the search starts there.
  const size_t floor = options_.never_reuse ? next_offset_ : 0;
  for (auto it = free_ranges_.begin(); it != free_ranges_.end(); ++it) {
    const size_t range_off = it->first;
    const size_t range_end = it->first + it->second;
    const size_t start = range_off > floor ? range_off : floor;
    if (start >= range_end) continue;
    // Alignment is of the address, not the offset: the base is only page
    // aligned, and callers may ask for more.
    size_t aligned_addr = 0;
    if (!RoundUp(base_addr + start, alignment, &aligned_addr)) continue;
    const size_t off = aligned_addr - base_addr;
    if (off >= range_end || range_end - off < length) continue;
    // The gap must fit too, except at the very end of the reservation where
    // nothing can follow the block anyway.
    size_t reserved = length;
    if (options_.gap_bytes > 0) {
      const size_t room = range_end - off;
      const bool at_end = range_end == capacity_;
      if (room - length >= options_.gap_bytes) {
        reserved = length + options_.gap_bytes;
      } else if (at_end) {
        reserved = room;
      } else {
        continue;
      }
    }
    // Carve [off, off + reserved) out of the free range, keeping both sides.
    // What can throw (a map node for the right side or the block) comes
    // first and is undone on failure: an exception half way used to lose
    // the whole range, and with it the address space for good.
    auto right = free_ranges_.end();
    if (off + reserved < range_end) {
      right = free_ranges_.emplace(off + reserved, range_end - (off + reserved))
                  .first;
    }
    try {
      used_ranges_.emplace(off, length);
    } catch (...) {
      if (right != free_ranges_.end()) free_ranges_.erase(right);
      throw;
    }
    if (off > range_off) {
      it->second = off - range_off;  // the left side keeps its key
    } else {
      free_ranges_.erase(it);
    }
    bytes_in_use_ += length;
    if (options_.never_reuse) next_offset_ = off + reserved;
    if (bytes_received != nullptr) *bytes_received = length;
    void* ptr = base_ + off;
    VisitAlloc(ptr, 0, length);
    return ptr;
  }
  return nullptr;
}

void VirtualSubAllocator::Free(void* ptr, size_t num_bytes) {
  if (ptr == nullptr) return;
  ++num_free_calls_;
  char* p = static_cast<char*>(ptr);
  size_t length = 0;
  if (base_ == nullptr || p < base_ || p >= base_ + capacity_ ||
      num_bytes == 0 || !RoundUp(num_bytes, kGranule, &length)) {
    ++invalid_frees_;
    return;
  }
  const size_t begin = static_cast<size_t>(p - base_);
  // A size that runs past the reservation (or wraps the address range) can
  // name no run of blocks: without this check `end` could wrap below `begin`,
  // the walk below would find no block, and the Free would pass for valid.
  if (length > capacity_ - begin) {
    ++invalid_frees_;
    Log(LogSeverity::kError,
        internal::Format("VirtualSubAllocator: ignoring Free(%p, %d): the "
                         "range runs past the end of the reservation",
                         ptr, num_bytes));
    return;
  }
  const size_t end = begin + length;
  if (page_ != 0) {
    FreePages(ptr, begin, end);
    return;
  }
  // Accept exactly a run of handed-out blocks that tile [begin, end): this is
  // what the allocator gives back after merging contiguous regions. Check the
  // whole run before changing anything so a bad Free leaves no trace.
  size_t cur = begin;
  while (cur < end) {
    auto it = used_ranges_.find(cur);
    if (it == used_ranges_.end() || it->second > end - cur) {
      ++invalid_frees_;
      Log(LogSeverity::kError,
          internal::Format("VirtualSubAllocator: ignoring Free(%p, %d): not a "
                           "contiguous run of blocks it handed out",
                           ptr, num_bytes));
      return;
    }
    // With gap_bytes a block's gap belongs to no block, so a run that spans
    // it fails the lookup above on the next iteration.
    cur += it->second;
  }
  VisitFree(ptr, 0, num_bytes);
  // The same walk again, giving each block back (found again rather than
  // kept from the check: a list of them needed host memory in a free).
  for (cur = begin; cur < end;) {
    const auto it = used_ranges_.find(cur);
    cur += it->second;
    const size_t off = it->first;
    const size_t len = it->second;
    size_t reserved = len + options_.gap_bytes;
    if (reserved > capacity_ - off) reserved = capacity_ - off;
    // Give [off, off + reserved) back and merge with both free neighbours so
    // first fit sees the largest possible ranges. The one step that can
    // throw (a new map node when no free range precedes it) comes before
    // anything changes: a failure then keeps the block in use, never loses
    // the range.
    auto next = free_ranges_.lower_bound(off);
    const bool join_next =
        next != free_ranges_.end() && next->first == off + reserved;
    const size_t tail = join_next ? next->second : 0;
    auto prev =
        next == free_ranges_.begin() ? free_ranges_.end() : std::prev(next);
    if (prev != free_ranges_.end() && prev->first + prev->second == off) {
      prev->second += reserved + tail;
    } else {
      free_ranges_.emplace_hint(next, off, reserved + tail);
    }
    if (join_next) free_ranges_.erase(next);
    used_ranges_.erase(it);
    bytes_in_use_ -= len;
  }
}

void VirtualSubAllocator::FreePages(void* ptr, size_t begin, size_t end) {
  const uintptr_t base_addr = reinterpret_cast<uintptr_t>(base_);
  // [begin, end) must be whole pages, all handed out: blocks (or parts of
  // blocks) that follow each other without a hole. Checked before anything
  // changes, so a bad Free leaves no trace.
  bool ok = (base_addr + begin) % page_ == 0 && (end - begin) % page_ == 0;
  std::vector<std::pair<size_t, size_t>> blocks;  // whole blocks touched
  if (ok) {
    auto it = used_ranges_.upper_bound(begin);
    if (it == used_ranges_.begin()) {
      ok = false;
    } else {
      --it;
      size_t cur = begin;
      while (ok && cur < end) {
        if (it == used_ranges_.end() || it->first > cur ||
            it->first + it->second <= cur) {
          ok = false;
          break;
        }
        blocks.emplace_back(it->first, it->second);
        cur = it->first + it->second;
        ++it;
      }
    }
  }
  if (!ok) {
    ++invalid_frees_;
    Log(LogSeverity::kError,
        internal::Format("VirtualSubAllocator: ignoring Free(%p, %d): not "
                         "whole pages of %d bytes it handed out",
                         ptr, end - begin, page_));
    return;
  }
  VisitFree(ptr, 0, end - begin);
  // What stays handed out: the parts of the first and last blocks outside
  // [begin, end).
  for (const auto& [off, len] : blocks) used_ranges_.erase(off);
  const size_t first = blocks.front().first;
  const size_t last_end = blocks.back().first + blocks.back().second;
  if (first < begin) used_ranges_.emplace(first, begin - first);
  if (last_end > end) used_ranges_.emplace(end, last_end - end);
  bytes_in_use_ -= end - begin;
  size_t new_off = begin;
  size_t new_len = end - begin;
  auto next = free_ranges_.lower_bound(begin);
  if (next != free_ranges_.end() && next->first == end) {
    new_len += next->second;
    next = free_ranges_.erase(next);
  }
  if (next != free_ranges_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == begin) {
      new_off = prev->first;
      new_len += prev->second;
      free_ranges_.erase(prev);
    }
  }
  free_ranges_.emplace(new_off, new_len);
}

}  // namespace bfc
