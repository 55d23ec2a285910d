// File: src/memory_dump.cc
// Observability members of bfc::Allocator (snapshots, text dumps, allocation
// sites, leak reports) and the text formatters of bfc/memory_dump.h. Kept out
// of allocator.cc so the hot paths there stay short: allocator.cc only calls
// RecordAllocationSite/ForgetAllocationSite (when sites are on), LogOom's
// MemoryLogLocked and the destructor's LeakReportLocked.
#include "bfc/memory_dump.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/debugging/stacktrace.h"
#include "absl/debugging/symbolize.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "bfc/allocator.h"
#include "bfc/internal/bin.h"
#include "bfc/log.h"

namespace bfc {
namespace {

using internal::Chunk;
using internal::ChunkHandle;
using internal::kInvalidChunkHandle;

// Frames of the allocator itself (and of the std::function or replay glue in
// front of it) say nothing about who allocated; they are dropped from the top
// of a site so that site[0] is the caller.
bool IsAllocatorFrame(const std::string& symbol) {
  return absl::StartsWith(symbol, "bfc::Allocator::");
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
    std::string name =
        absl::Symbolize(static_cast<char*>(pc) - 1, buf, sizeof(buf))
            ? std::string(buf)
            : absl::StrFormat("%p", pc);
    return cache_.emplace(pc, std::move(name)).first->second;
  }

  absl::flat_hash_map<void*, std::string> cache_;
};

// Live allocations in report order: largest first, then oldest.
void SortOutstanding(std::vector<OutstandingAllocation>* v) {
  std::sort(v->begin(), v->end(),
            [](const OutstandingAllocation& a, const OutstandingAllocation& b) {
              if (a.size != b.size) return a.size > b.size;
              return a.allocation_id < b.allocation_id;
            });
}

std::string FormatOutstanding(const std::vector<OutstandingAllocation>& live,
                              size_t top_n, bool sites_recorded) {
  std::string out;
  const size_t n = std::min(top_n, live.size());
  absl::StrAppendFormat(&out, "Largest live allocations (%d of %d):\n", n,
                        live.size());
  for (size_t i = 0; i < n; ++i) {
    const OutstandingAllocation& a = live[i];
    absl::StrAppendFormat(
        &out, "  #%d at %#x: %s (requested %s)\n", a.allocation_id, a.address,
        HumanReadableBytes(a.size), HumanReadableBytes(a.requested_size));
    const size_t frames = std::min<size_t>(a.site.size(), 8);
    for (size_t f = 0; f < frames; ++f) {
      absl::StrAppend(&out, "      ", f == 0 ? "at " : "by ", a.site[f], "\n");
    }
  }
  if (!sites_recorded && n > 0) {
    absl::StrAppend(&out,
                    "  (set Allocator::Options::record_allocation_sites to "
                    "see where they were allocated)\n");
  }
  return out;
}

std::vector<OutstandingAllocation> OutstandingFromDump(const MemoryDump& d) {
  std::vector<OutstandingAllocation> live;
  for (const ChunkDump& c : d.chunks) {
    if (!c.in_use) continue;
    live.push_back(
        {c.address, c.size, c.requested_size, c.allocation_id, c.site});
  }
  SortOutstanding(&live);
  return live;
}

std::string Percent(double fraction) {
  return absl::StrFormat("%.1f%%", 100.0 * fraction);
}

}  // namespace

std::string HumanReadableBytes(uint64_t bytes) {
  if (bytes < 1024) return absl::StrCat(bytes, " B");
  static const char* const kUnits[] = {"KiB", "MiB", "GiB",
                                       "TiB", "PiB", "EiB"};
  double v = static_cast<double>(bytes) / 1024.0;
  int unit = 0;
  while (v >= 1024.0 && unit < 5) {
    v /= 1024.0;
    ++unit;
  }
  return absl::StrFormat("%.2f %s", v, kUnits[unit]);
}

uint64_t MemoryDump::PoolBytes() const {
  uint64_t total = 0;
  for (const RegionDump& r : regions) total += r.size;
  return total;
}

uint64_t MemoryDump::FreeBytes() const {
  uint64_t total = 0;
  for (const ChunkDump& c : chunks) {
    if (!c.in_use) total += c.size;
  }
  return total;
}

uint64_t MemoryDump::LargestFreeChunk() const {
  uint64_t largest = 0;
  for (const ChunkDump& c : chunks) {
    if (!c.in_use) largest = std::max(largest, c.size);
  }
  return largest;
}

size_t MemoryDump::NumChunksInUse() const {
  return static_cast<size_t>(
      std::count_if(chunks.begin(), chunks.end(),
                    [](const ChunkDump& c) { return c.in_use; }));
}

// --- Allocator members -------------------------------------------------------

void Allocator::RecordAllocationSite(int64_t allocation_id) {
  RawStack& stack = sites_[allocation_id];
  // The allocator's own frames are dropped when the site is symbolized
  // (their number depends on inlining). Debian's Abseil unwinds by frame
  // pointers, hence -fno-omit-frame-pointer on this library (src/CMakeLists).
  stack.depth = absl::GetStackTrace(
      stack.frames, static_cast<int>(sizeof(stack.frames) / sizeof(void*)),
      /*skip_count=*/0);
}

void Allocator::ForgetAllocationSite(int64_t allocation_id) {
  sites_.erase(allocation_id);
}

void Allocator::ResetPeakStats() {
  internal::MutexLock lock(&mutex_);
  stats_.peak_bytes_in_use = stats_.bytes_in_use;
  *stats_.peak_pool_bytes = *stats_.pool_bytes;
}

MemoryDump Allocator::RecordMemoryMapLocked(bool sites) const {
  MemoryDump d;
  d.allocator_name = name_;
  d.options.allow_growth = opts_.allow_growth;
  d.options.allow_retry_on_failure = opts_.allow_retry_on_failure;
  d.options.garbage_collection = opts_.garbage_collection;
  d.options.fragmentation_fraction = opts_.fragmentation_fraction;
  d.options.retry_timeout_seconds = absl::ToDoubleSeconds(opts_.retry_timeout);
  d.options.record_allocation_sites = opts_.record_allocation_sites;
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

  Symbolizer symbolizer;
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
  return d;
}

MemoryDump Allocator::RecordMemoryMap() const {
  MemoryDump d;
  std::vector<std::pair<size_t, RawStack>> raw;
  {
    internal::MutexLock lock(&mutex_);
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
  internal::MutexLock lock(&mutex_);
  return MemoryLogLocked(num_bytes);
}

void Allocator::DumpMemoryLog(size_t num_bytes) const {
  Log(LogSeverity::kWarning, MemoryLog(num_bytes));
}

std::string Allocator::MemorySummary() const {
  MemoryDump d;
  {
    internal::MutexLock lock(&mutex_);
    d = RecordMemoryMapLocked(/*sites=*/false);
  }
  return FormatMemorySummary(d);
}

std::vector<OutstandingAllocation> Allocator::OutstandingAllocations() const {
  std::vector<OutstandingAllocation> live;
  std::vector<RawStack> raw;
  {
    internal::MutexLock lock(&mutex_);
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
  SortOutstanding(&live);
  return live;
}

std::string Allocator::LeakReportLocked(size_t top_n) const {
  MemoryDump d = RecordMemoryMapLocked(/*sites=*/true);
  return absl::StrCat("\n", FormatOutstanding(OutstandingFromDump(d), top_n,
                                              opts_.record_allocation_sites));
}

// --- Text formats ------------------------------------------------------------

std::string FormatMemoryLog(const MemoryDump& d, size_t num_bytes,
                            size_t max_chunk_lines, size_t top_n) {
  std::string out =
      absl::StrCat("BFCAllocator dump for ", d.allocator_name, "\n");
  for (const BinDump& b : d.bins) {
    absl::StrAppendFormat(
        &out,
        "Bin (%d): \tTotal Chunks: %d, Chunks in use: %d. %s allocated for "
        "chunks. %s in use in bin. %s client-requested in use in bin.\n",
        b.bin_size, b.total_chunks, b.chunks_in_use,
        HumanReadableBytes(b.total_bytes), HumanReadableBytes(b.bytes_in_use),
        HumanReadableBytes(b.requested_bytes_in_use));
  }
  if (num_bytes > 0) {
    const size_t rounded = internal::RoundedBytes(num_bytes);
    const internal::BinNum bin = internal::BinNumForSize(rounded);
    absl::StrAppendFormat(&out, "Bin for %s was %s, Chunk State: \n",
                          HumanReadableBytes(rounded),
                          HumanReadableBytes(internal::BinNumToSize(bin)));
    for (const ChunkDump& c : d.chunks) {
      if (!c.in_use && c.bin == bin) {
        absl::StrAppendFormat(
            &out, "  Size: %s | Requested Size: %s | in_use: 0 | bin_num: %d\n",
            HumanReadableBytes(c.size), HumanReadableBytes(c.requested_size),
            c.bin);
      }
    }
  }
  size_t lines = 0;
  size_t skipped = 0;
  for (size_t r = 0; r < d.regions.size(); ++r) {
    absl::StrAppendFormat(&out, "Next region of size %d\n", d.regions[r].size);
    for (const ChunkDump& c : d.chunks) {
      if (c.region != static_cast<int>(r)) continue;
      if (lines >= max_chunk_lines) {
        ++skipped;
        continue;
      }
      ++lines;
      if (c.in_use) {
        absl::StrAppendFormat(
            &out, "InUse at %x of size %d requested %d id %d\n", c.address,
            c.size, c.requested_size, c.allocation_id);
      } else {
        absl::StrAppendFormat(&out, "Free  at %x of size %d\n", c.address,
                              c.size);
      }
    }
  }
  if (skipped > 0) {
    absl::StrAppendFormat(&out, "... %d more chunks not listed\n", skipped);
  }

  std::map<uint64_t, int64_t> in_use_by_size;
  uint64_t in_use_total = 0;
  uint64_t requested_total = 0;
  for (const ChunkDump& c : d.chunks) {
    if (!c.in_use) continue;
    ++in_use_by_size[c.size];
    in_use_total += c.size;
    requested_total += c.requested_size;
  }
  absl::StrAppend(&out, "     Summary of in-use Chunks by size: \n");
  for (const auto& [size, count] : in_use_by_size) {
    absl::StrAppendFormat(&out, "%d Chunks of size %d totalling %s\n", count,
                          size, HumanReadableBytes(size * count));
  }
  absl::StrAppendFormat(&out, "Sum Total of in-use chunks: %s\n",
                        HumanReadableBytes(in_use_total));
  absl::StrAppendFormat(
      &out,
      "Sum Total of client-requested bytes in use: %s (rounding and padding: "
      "%s)\n",
      HumanReadableBytes(requested_total),
      HumanReadableBytes(in_use_total - requested_total));
  const uint64_t pool = d.PoolBytes();
  absl::StrAppendFormat(
      &out,
      "total_region_allocated_bytes_: %d memory_limit_: %d available bytes: "
      "%d curr_region_allocation_bytes_ n/a\n",
      pool, d.limit, d.limit > pool ? d.limit - pool : 0);
  absl::StrAppendFormat(
      &out, "Free in pool: %s, largest free chunk: %s, fragmentation: %s\n",
      HumanReadableBytes(d.FreeBytes()),
      HumanReadableBytes(d.LargestFreeChunk()), Percent(d.stats.fragmentation));
  absl::StrAppend(&out, FormatOutstanding(OutstandingFromDump(d), top_n,
                                          d.options.record_allocation_sites));
  absl::StrAppend(&out, "Stats: \n", d.stats.DebugString());
  return out;
}

std::string FormatMemorySummary(const MemoryDump& d) {
  constexpr int kWidth = 75;
  const std::string rule = "|" + std::string(kWidth - 2, '-') + "|\n";
  const std::string double_rule = "|" + std::string(kWidth - 2, '=') + "|\n";
  std::string out = double_rule;
  const std::string title =
      absl::StrCat("bfc memory summary: allocator '", d.allocator_name, "'");
  const int pad =
      std::max(0, (kWidth - 2 - static_cast<int>(title.size())) / 2);
  absl::StrAppendFormat(&out, "|%*s%-*s|\n", pad, "", kWidth - 2 - pad, title);
  out += rule;
  auto row = [&](const std::string& metric, const std::string& current,
                 const std::string& peak) {
    absl::StrAppendFormat(&out, "| %-33s | %16s | %16s |\n", metric, current,
                          peak);
  };
  row("Metric", "Current", "Peak");
  out += rule;
  const AllocatorStats& s = d.stats;
  const uint64_t in_use = static_cast<uint64_t>(s.bytes_in_use);
  const uint64_t requested = static_cast<uint64_t>(s.bytes_requested_in_use);
  row("Allocated (in-use chunks)", HumanReadableBytes(in_use),
      HumanReadableBytes(static_cast<uint64_t>(s.peak_bytes_in_use)));
  row("Requested by callers", HumanReadableBytes(requested), "");
  row("Rounding and padding (% alloc.)", HumanReadableBytes(in_use - requested),
      in_use > 0 ? Percent(static_cast<double>(in_use - requested) /
                           static_cast<double>(in_use))
                 : "");
  row("Pool (regions held)", HumanReadableBytes(d.PoolBytes()),
      HumanReadableBytes(static_cast<uint64_t>(s.peak_pool_bytes.value_or(0))));
  row("Free in pool", HumanReadableBytes(d.FreeBytes()), "");
  row("Largest free chunk", HumanReadableBytes(d.LargestFreeChunk()), "");
  row("External fragmentation", Percent(s.fragmentation), "");
  row("Limit", HumanReadableBytes(d.limit), "");
  out += rule;
  const size_t live = d.NumChunksInUse();
  row("Live allocations", absl::StrCat(live), "");
  row("Free chunks", absl::StrCat(d.chunks.size() - live), "");
  row("Regions", absl::StrCat(d.regions.size()), "");
  out += rule;
  row("Allocations (since ClearStats)", absl::StrCat(s.num_allocs), "");
  row("Largest allocation",
      HumanReadableBytes(static_cast<uint64_t>(s.largest_alloc_size)), "");
  row("Out-of-memory failures", absl::StrCat(s.num_ooms), "");
  row("Retries after waiting", absl::StrCat(s.num_retries), "");
  row("Extends / regions released",
      absl::StrCat(s.num_extends, " / ", s.num_regions_released), "");
  row("Invalid frees / requests",
      absl::StrCat(s.num_invalid_frees, " / ", s.num_invalid_requests), "");
  out += double_rule;
  return out;
}

}  // namespace bfc
