// File: src/core/allocator_snapshot.cc
// The read-only views of bfc::Allocator: RecordMemoryMap (a MemoryDump),
// the memory log and summary, outstanding allocations and their sites, the
// leak report. Kept out of allocator.cc so that file holds the allocation and
// free paths alone; allocator.cc calls in here only when sites are recorded,
// on out-of-memory (MemoryLogLocked) and in the destructor (LeakReportLocked).
#include <algorithm>
#include <cstdint>
#include <memory>
#include <new>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/base/optimization.h"
#include "absl/debugging/stacktrace.h"
#include "absl/debugging/symbolize.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bfc/account.h"
#include "bfc/allocator.h"
#include "bfc/internal/bin.h"
#include "bfc/internal/mutex.h"
#include "bfc/internal/str_format.h"
#include "bfc/log.h"
#include "bfc/memory_dump.h"
#include "core/internal/account_state.h"

namespace bfc {
namespace {

using internal::Chunk;
using internal::ChunkHandle;
using internal::kInvalidChunkHandle;

// Frames of the allocator itself (and of the std::function or replay glue in
// front of it) say nothing about who allocated; they are dropped from the top
// of a site so that site[0] is the caller.
bool IsAllocatorFrame(const std::string& symbol) {
  // Accounts and buffers allocate through the allocator: their frames are
  // the library's too.
  return absl::StartsWith(symbol, "bfc::Allocator::") ||
         absl::StartsWith(symbol, "bfc::Account::") ||
         absl::StartsWith(symbol, "bfc::Buffer::");
}

// Symbolizes program counters, caching per address: a dump of 100k chunks
// has a few hundred distinct frames.
class Symbolizer {
 public:
  std::vector<std::string> Site(void* const* frames, int depth) {
    std::vector<std::string> site;
    bool in_allocator = true;
    for (int i = 0; i < depth; ++i) {
      const std::string& s = Name(frames[i]);
      if (in_allocator && IsAllocatorFrame(s)) continue;
      in_allocator = false;
      site.push_back(s);
    }
    return site;
  }

 private:
  const std::string& Name(void* pc) {
    auto it = cache_.find(pc);
    if (it != cache_.end()) return it->second;
    char buf[1024];
    // A return address points after the call; pc - 1 is inside it, which
    // matters when the call is a function's last instruction.
    bool found;
    {
      // One thread at a time: absl::Symbolize keeps process-wide state
      // (its cached object files) that it hands between threads in a way
      // ThreadSanitizer cannot see through Debian's uninstrumented library,
      // so two dumps at once were reported as a race. Held by nothing else,
      // so it cannot be part of a cycle.
      static internal::Mutex* const symbolize_mutex = new internal::Mutex;
      internal::MutexLock lock(symbolize_mutex);
      found = absl::Symbolize(static_cast<char*>(pc) - 1, buf, sizeof(buf));
    }
    std::string name = found ? std::string(buf) : internal::Format("%p", pc);
    return cache_.emplace(pc, std::move(name)).first->second;
  }

  // A node map: its growth throwing std::bad_alloc changes nothing (Debian's
  // Abseil leaves a flat map broken then, see allocator.h).
  std::unordered_map<void*, std::string> cache_;
};

}  // namespace

std::vector<std::string> Allocator::SymbolizeSite(void* const* frames,
                                                  int depth) {
  Symbolizer symbolizer;
  return symbolizer.Site(frames, depth);
}

void Allocator::RecordAllocationSite(int64_t allocation_id) {
  RawStack* entry;
  try {
    entry = &sites_[allocation_id];
  } catch (...) {
    // A diagnostic, not worth failing the allocation for: dumps and reports
    // show this allocation without its site.
    ++sites_unrecorded_;
    return;
  }
  RawStack& stack = *entry;
  // The allocator's own frames are dropped when the site is symbolized
  // (their number depends on inlining). Debian's Abseil unwinds by frame
  // pointers, hence -fno-omit-frame-pointer on this library (src/CMakeLists).
  stack.depth = absl::GetStackTrace(
      stack.frames, static_cast<int>(sizeof(stack.frames) / sizeof(void*)),
      /*skip_count=*/0);
}

void Allocator::ForgetAllocationSite(int64_t allocation_id) {
  if (sites_.erase(allocation_id) == 0 && sites_unrecorded_ > 0) {
    --sites_unrecorded_;
  }
}

const char* MemoryEventActionName(MemoryEvent::Action action) {
  switch (action) {
    case MemoryEvent::Action::kAllocate:
      return "allocate";
    case MemoryEvent::Action::kFree:
      return "free";
    case MemoryEvent::Action::kRegionAlloc:
      return "region_alloc";
    case MemoryEvent::Action::kRegionExtend:
      return "region_extend";
    case MemoryEvent::Action::kRegionFree:
      return "region_free";
    case MemoryEvent::Action::kOutOfMemory:
      return "oom";
  }
  return "unknown";
}

void Allocator::RecordMemoryHistory(size_t max_entries) {
  Lock lock(this);
  if (max_entries == 0) {
    history_.reset();
    return;
  }
  history_ = std::make_unique<History>();
  history_->max_entries = max_entries;
}

void Allocator::RecordEvent(MemoryEvent::Action action, uint64_t address,
                            uint64_t size, uint64_t requested_size,
                            int64_t allocation_id, uint64_t free_bytes) {
  History& h = *history_;
  MemoryEvent e;
  e.action = action;
  e.address = address;
  e.size = size;
  e.requested_size = requested_size;
  e.allocation_id = allocation_id;
  e.free_bytes = free_bytes;
  e.time_us = absl::ToUnixMicros(absl::Now());
  ++h.recorded;
  if (h.ring.size() < h.max_entries) {
    // Grows as events come (a bound of millions costs nothing until used);
    // an allocation failure here drops the event rather than the call.
    try {
      h.ring.push_back(e);
    } catch (const std::bad_alloc&) {
    }
    return;
  }
  h.ring[h.next] = e;
  h.next = h.next + 1 == h.ring.size() ? 0 : h.next + 1;
}

MemoryHistory Allocator::GetMemoryHistory() const {
  Lock lock(this);
  MemoryHistory out;
  if (history_ == nullptr) return out;
  const History& h = *history_;
  out.max_entries = h.max_entries;
  out.dropped = h.recorded - h.ring.size();
  out.events.reserve(h.ring.size());
  // Oldest first: once the ring is full, the oldest is at `next`.
  out.events.insert(out.events.end(), h.ring.begin() + h.next, h.ring.end());
  out.events.insert(out.events.end(), h.ring.begin(), h.ring.begin() + h.next);
  return out;
}

uint64_t Allocator::NumMemoryEventsRecorded() const {
  Lock lock(this);
  return history_ == nullptr ? 0 : history_->recorded;
}

void Allocator::ResetPeakStats() {
  Lock lock(this);
  stats_.peak_bytes_in_use = stats_.bytes_in_use;
  *stats_.peak_pool_bytes = *stats_.pool_bytes;
  MaybeValidate("ResetPeakStats");
}

MemoryDump Allocator::RecordMemoryMapLocked(bool sites) const {
  MemoryDump d;
  d.allocator_name = name_;
  d.options = opts_;
  d.limit = memory_limit_;

  // The same numbers GetStats() reports.
  d.stats = stats_;
  d.stats.largest_free_block_bytes =
      static_cast<int64_t>(LargestFreeChunkLocked());
  const int64_t free_bytes = *d.stats.pool_bytes - d.stats.bytes_in_use;
  d.stats.fragmentation =
      free_bytes > 0
          ? static_cast<double>(free_bytes - d.stats.largest_free_block_bytes) /
                static_cast<double>(free_bytes)
          : 0.0;

  d.bins.resize(kNumBins);
  for (int b = 0; b < kNumBins; ++b) {
    d.bins[b].bin = b;
    d.bins[b].bin_size = internal::BinNumToSize(b);
    d.bins[b].free_chunks = static_cast<int64_t>(bins_[b].size());
    d.bins[b].free_bytes = static_cast<int64_t>(bins_[b].total_bytes());
  }

  // Accounts, parents first (a parent is registered before its children,
  // but ids are reused): index by id.
  std::vector<int> account_index(accounts_.size(), -1);
  if (accounts_on_) {
    std::vector<const internal::AccountState*> order;
    for (const auto& a : accounts_) {
      if (a != nullptr && a->parent == nullptr) order.push_back(a.get());
    }
    for (size_t i = 0; i < order.size(); ++i) {
      for (const internal::AccountState* c : order[i]->children) {
        order.push_back(c);
      }
    }
    for (const internal::AccountState* a : order) {
      AccountDump ad;
      ad.path = a->path;
      ad.parent = a->parent == nullptr ? -1 : account_index[a->parent->id];
      ad.limit_bytes = a->limit == kNoAccountLimit ? -1 : a->limit;
      ad.reservation_bytes = a->reservation.load();
      ad.bytes_in_use = a->used.load();
      ad.own_bytes = a->own.load();
      ad.peak_bytes_in_use = a->peak.load();
      ad.allocations = a->allocations.load();
      ad.frees = a->frees.load();
      ad.failures = a->failures.load();
      ad.live_allocations = a->live.load();
      ad.closed = a->closed;
      account_index[a->id] = static_cast<int>(d.accounts.size());
      d.accounts.push_back(std::move(ad));
    }
  }

  Symbolizer symbolizer;
  std::vector<std::pair<StreamSlot, uint64_t>> parts;
  std::vector<int64_t> per_stream_pending(streams_.size(), 0);
  d.chunks.reserve(chunks_.num_live());
  for (const internal::AllocationRegion& r : region_manager_.regions()) {
    const int region = static_cast<int>(d.regions.size());
    d.regions.push_back({r.addr(), r.memory_size()});
    for (ChunkHandle h = region_manager_.get_handle(r.ptr());
         h != kInvalidChunkHandle; h = chunks_[h].next) {
      const Chunk& c = chunks_[h];
      ChunkDump cd;
      cd.address = c.addr();
      cd.size = c.size;
      cd.requested_size = c.requested_size;
      cd.in_use = c.in_use();
      cd.bin = c.in_use() ? internal::kInvalidBinNum
                          : internal::BinNumForSize(c.size);
      cd.allocation_id = c.allocation_id;
      cd.region = region;
      if (const internal::AccountState* a = ChunkAccountLocked(h)) {
        cd.account = account_index[a->id];
      }
      if (ABSL_PREDICT_FALSE(c.fence != 0) && !FenceComplete(c.fence)) {
        FenceParts(c.fence, &parts);
        for (const auto& [p, q] : parts) {
          if (q <= streams_[p].completed) continue;
          cd.pending_streams.push_back(static_cast<uint64_t>(
              reinterpret_cast<uintptr_t>(streams_[p].id)));
          per_stream_pending[p] += static_cast<int64_t>(c.size);
        }
      }
      if (sites && cd.in_use) {
        auto it = sites_.find(c.allocation_id);
        if (it != sites_.end()) {
          cd.site = symbolizer.Site(it->second.frames, it->second.depth);
        }
      }
      BinDump& bin = d.bins[internal::BinNumForSize(c.size)];
      ++bin.total_chunks;
      bin.total_bytes += static_cast<int64_t>(c.size);
      if (cd.in_use) {
        ++bin.chunks_in_use;
        bin.bytes_in_use += static_cast<int64_t>(c.size);
        bin.requested_bytes_in_use += static_cast<int64_t>(c.requested_size);
      }
      d.chunks.push_back(std::move(cd));
    }
  }
  if (multi_stream_) {
    for (StreamSlot p = 0; p < streams_.size(); ++p) {
      StreamDump sd;
      sd.stream =
          static_cast<uint64_t>(reinterpret_cast<uintptr_t>(streams_[p].id));
      sd.forgotten = streams_[p].forgotten;
      sd.bytes_pending = per_stream_pending[p];
      sd.events_pending = static_cast<int64_t>(streams_[p].events.size());
      d.streams.push_back(sd);
    }
    d.stream_stats = StreamStatsLocked();
  }
  return d;
}

MemoryDump Allocator::RecordMemoryMap() const {
  MemoryDump d;
  std::vector<std::pair<size_t, RawStack>> raw;
  {
    Lock lock(this);
    d = RecordMemoryMapLocked(/*sites=*/false);
    if (!sites_.empty()) {
      for (size_t i = 0; i < d.chunks.size(); ++i) {
        if (!d.chunks[i].in_use) continue;
        auto it = sites_.find(d.chunks[i].allocation_id);
        if (it != sites_.end()) raw.emplace_back(i, it->second);
      }
    }
  }
  // Symbolizing reads ELF files: done without the lock.
  Symbolizer symbolizer;
  for (const auto& [i, stack] : raw) {
    d.chunks[i].site = symbolizer.Site(stack.frames, stack.depth);
  }
  return d;
}

std::string Allocator::MemoryLogLocked(size_t num_bytes) const {
  return FormatMemoryLog(RecordMemoryMapLocked(/*sites=*/true), num_bytes);
}

std::string Allocator::MemoryLog(size_t num_bytes) const {
  Lock lock(this);
  return MemoryLogLocked(num_bytes);
}

void Allocator::DumpMemoryLog(size_t num_bytes) const {
  Log(LogSeverity::kWarning, MemoryLog(num_bytes));
}

std::string Allocator::MemorySummary() const {
  MemoryDump d;
  {
    Lock lock(this);
    d = RecordMemoryMapLocked(/*sites=*/false);
  }
  return FormatMemorySummary(d);
}

std::vector<OutstandingAllocation> Allocator::OutstandingAllocations() const {
  std::vector<OutstandingAllocation> live;
  std::vector<RawStack> raw;
  {
    Lock lock(this);
    for (const internal::AllocationRegion& r : region_manager_.regions()) {
      for (ChunkHandle h = region_manager_.get_handle(r.ptr());
           h != kInvalidChunkHandle; h = chunks_[h].next) {
        const Chunk& c = chunks_[h];
        if (!c.in_use()) continue;
        live.push_back(
            {c.addr(), c.size, c.requested_size, c.allocation_id, {}});
        auto it = sites_.find(c.allocation_id);
        raw.push_back(it != sites_.end() ? it->second : RawStack());
      }
    }
  }
  Symbolizer symbolizer;
  for (size_t i = 0; i < live.size(); ++i) {
    live[i].site = symbolizer.Site(raw[i].frames, raw[i].depth);
  }
  SortByReportOrder(&live);
  return live;
}

std::string Allocator::LeakReportLocked(size_t top_n) const {
  MemoryDump d = RecordMemoryMapLocked(/*sites=*/true);
  return absl::StrCat("\n", FormatLargestLiveAllocations(d, top_n));
}

}  // namespace bfc
