// File: src/core/memory_dump.cc
// The MemoryDump helpers and the two text forms of a dump that the core itself
// prints (TF's memory log on out-of-memory, the leak report at destruction):
// FormatMemoryLog, FormatMemorySummary, FormatLargestLiveAllocations. The
// renderings the core never needs (JSON, SVG, the viewer) are in src/report.
#include "bfc/memory_dump.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "bfc/internal/bin.h"
#include "bfc/internal/str_format.h"
#include "bfc/units.h"

namespace bfc {
namespace {

using internal::Chunk;
using internal::ChunkHandle;
using internal::kInvalidChunkHandle;

// Live allocations in report order: largest first, then oldest.
}  // namespace

void SortByReportOrder(std::vector<OutstandingAllocation>* v) {
  std::sort(v->begin(), v->end(),
            [](const OutstandingAllocation& a, const OutstandingAllocation& b) {
              if (a.size != b.size) return a.size > b.size;
              return a.allocation_id < b.allocation_id;
            });
}

namespace {

std::string FormatOutstanding(const std::vector<OutstandingAllocation>& live,
                              size_t top_n, bool sites_recorded) {
  std::string out;
  const size_t n = std::min(top_n, live.size());
  internal::AppendFormat(&out, "Largest live allocations (%d of %d):\n", n,
                         live.size());
  for (size_t i = 0; i < n; ++i) {
    const OutstandingAllocation& a = live[i];
    internal::AppendFormat(
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
  SortByReportOrder(&live);
  return live;
}

std::string Percent(double fraction) {
  return internal::Format("%.1f%%", 100.0 * fraction);
}

}  // namespace

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

std::string FormatLargestLiveAllocations(const MemoryDump& d, size_t top_n) {
  return FormatOutstanding(OutstandingFromDump(d), top_n,
                           d.options.record_allocation_sites);
}

// --- Text formats ------------------------------------------------------------

std::string FormatMemoryLog(const MemoryDump& d, size_t num_bytes,
                            size_t max_chunk_lines, size_t top_n) {
  std::string out =
      absl::StrCat("BFCAllocator dump for ", d.allocator_name, "\n");
  for (const BinDump& b : d.bins) {
    internal::AppendFormat(
        &out,
        "Bin (%d): \tTotal Chunks: %d, Chunks in use: %d. %s allocated for "
        "chunks. %s in use in bin. %s client-requested in use in bin.\n",
        b.bin_size, b.total_chunks, b.chunks_in_use,
        HumanReadableBytes(b.total_bytes), HumanReadableBytes(b.bytes_in_use),
        HumanReadableBytes(b.requested_bytes_in_use));
  }
  if (num_bytes > 0) {
    // A request past the largest roundable size (which would wrap to 256 B)
    // is reported as that size (a review: "Bin for 256 B" for SIZE_MAX).
    const size_t rounded = internal::RoundedBytes(
        std::min(num_bytes, internal::kMaxRoundableBytes));
    const internal::BinNum bin = internal::BinNumForSize(rounded);
    internal::AppendFormat(&out, "Bin for %s was %s, Chunk State: \n",
                           HumanReadableBytes(rounded),
                           HumanReadableBytes(internal::BinNumToSize(bin)));
    for (const ChunkDump& c : d.chunks) {
      if (!c.in_use && c.bin == bin) {
        internal::AppendFormat(
            &out, "  Size: %s | Requested Size: %s | in_use: 0 | bin_num: %d\n",
            HumanReadableBytes(c.size), HumanReadableBytes(c.requested_size),
            c.bin);
      }
    }
  }
  size_t lines = 0;
  size_t skipped = 0;
  for (size_t r = 0; r < d.regions.size(); ++r) {
    internal::AppendFormat(&out, "Next region of size %d\n", d.regions[r].size);
    for (const ChunkDump& c : d.chunks) {
      if (c.region != static_cast<int>(r)) continue;
      if (lines >= max_chunk_lines) {
        ++skipped;
        continue;
      }
      ++lines;
      if (c.in_use) {
        internal::AppendFormat(
            &out, "InUse at %x of size %d requested %d id %d\n", c.address,
            c.size, c.requested_size, c.allocation_id);
      } else {
        internal::AppendFormat(&out, "Free  at %x of size %d\n", c.address,
                               c.size);
      }
    }
  }
  if (skipped > 0) {
    internal::AppendFormat(&out, "... %d more chunks not listed\n", skipped);
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
    internal::AppendFormat(&out, "%d Chunks of size %d totalling %s\n", count,
                           size, HumanReadableBytes(size * count));
  }
  internal::AppendFormat(&out, "Sum Total of in-use chunks: %s\n",
                         HumanReadableBytes(in_use_total));
  internal::AppendFormat(
      &out,
      "Sum Total of client-requested bytes in use: %s (rounding and padding: "
      "%s)\n",
      HumanReadableBytes(requested_total),
      HumanReadableBytes(in_use_total - requested_total));
  const uint64_t pool = d.PoolBytes();
  internal::AppendFormat(
      &out,
      "total_region_allocated_bytes_: %d memory_limit_: %d available bytes: "
      "%d curr_region_allocation_bytes_ n/a\n",
      pool, d.limit, d.limit > pool ? d.limit - pool : 0);
  internal::AppendFormat(
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
  internal::AppendFormat(&out, "|%*s%-*s|\n", pad, "", kWidth - 2 - pad, title);
  out += rule;
  auto row = [&](const std::string& metric, const std::string& current,
                 const std::string& peak) {
    internal::AppendFormat(&out, "| %-33s | %16s | %16s |\n", metric, current,
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
  if (!d.accounts.empty()) {
    // The account tree: each account's charges (current, peak), indented by
    // depth, its limit beside its name.
    out += rule;
    row("Accounts (limit)", "In use", "Peak");
    const int n = static_cast<int>(
        std::min<size_t>(d.accounts.size(), std::numeric_limits<int>::max()));
    for (int i = 0; i < n; ++i) {
      const AccountDump& a = d.accounts[i];
      // Parents come first (RecordMemoryMap, MemoryDumpFromJson); a dump
      // built by hand may say otherwise: a parent that is not earlier ends
      // the walk, so a cycle or an index out of range cannot hang or crash.
      int depth = 0;
      for (int c = i, p = a.parent; p >= 0 && p < c;
           c = p, p = d.accounts[p].parent) {
        ++depth;
      }
      const size_t slash = a.path.rfind('/');
      std::string name =
          std::string(2 * depth, ' ') +
          (slash == std::string::npos ? a.path : a.path.substr(slash + 1));
      absl::StrAppend(
          &name, " (",
          a.limit_bytes < 0
              ? std::string("none")
              : HumanReadableBytes(static_cast<uint64_t>(a.limit_bytes)),
          a.closed ? ", closed" : "", ")");
      if (name.size() > 33) {
        // Cut at a character boundary: names are UTF-8 (cutting inside a
        // character made the summary invalid UTF-8: a review).
        size_t cut = 30;
        while (cut > 0 &&
               (static_cast<unsigned char>(name[cut]) & 0xC0) == 0x80) {
          --cut;
        }
        name = name.substr(0, cut) + "...";
      }
      row(name, HumanReadableBytes(static_cast<uint64_t>(a.bytes_in_use)),
          HumanReadableBytes(static_cast<uint64_t>(a.peak_bytes_in_use)));
    }
  }
  out += double_rule;
  return out;
}

}  // namespace bfc
