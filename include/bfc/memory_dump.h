// File: bfc/memory_dump.h
// -----------------------------------------------------------------------------
//
// A snapshot of an Allocator's memory, as plain data: what
// `Allocator::RecordMemoryMap()` returns (TensorFlow's name) and what the
// text dumps, the SVG memory map (bfc/memory_map_svg.h) and the HTML viewer
// (bfc/replay_report.h) are drawn from.
//
// The model, as the allocator sees it: the pool is a list of regions (each
// obtained from the sub-allocator in one call) and every region is tiled, in
// address order, by chunks. A chunk is in use (handed out: `requested_size`
// bytes asked, `size` bytes taken, the difference is rounding/padding) or free
// (then it sits in bin `bin`). A MemoryDump holds every region and every chunk
// in address order, a per-bin summary in TF's `DumpMemoryLog` shape, the
// allocator's options, limit and stats.
//
// Allocation sites: with `Allocator::Options::record_allocation_sites`, every
// allocation captures its call stack (Abseil's GetStackTrace); frames are
// symbolized (absl::Symbolize) only when a dump or report asks for them, and
// the allocator's own frames are dropped, so `site[0]` is the caller.
//
// Serialization: MemoryDumpToJson / MemoryDumpFromJson (nlohmann-json inside;
// the JSON layout is documented at MemoryDumpToJson). A dump round-trips:
// MemoryDumpFromJson(MemoryDumpToJson(d)) gives back every field of d.
//
// Example:
//
//   bfc::MemoryDump dump = allocator.RecordMemoryMap();
//   std::ofstream("map.json") << bfc::MemoryDumpToJson(dump, /*indent=*/1);
//   std::ofstream("map.svg") << bfc::RenderMemoryMapSvg(dump);
//
// Thread safety: plain values (thread-compatible); the functions here are
// thread-safe.
#ifndef BFC_MEMORY_DUMP_H_
#define BFC_MEMORY_DUMP_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "bfc/allocator_stats.h"

namespace bfc {

struct RegionDump {
  uint64_t base = 0;  // address of the first byte
  uint64_t size = 0;  // bytes
};

struct ChunkDump {
  uint64_t address = 0;
  uint64_t size = 0;            // bytes the chunk spans (multiple of 256)
  uint64_t requested_size = 0;  // what the caller asked for; 0 when free
  bool in_use = false;
  int bin = -1;                // the bin of a free chunk; -1 while in use
  int64_t allocation_id = -1;  // > 0 while in use, -1 when free
  int region = 0;              // index into MemoryDump::regions
  // Symbolized frames, innermost (the caller of AllocateRaw) first; empty
  // unless record_allocation_sites was on when the chunk was handed out.
  std::vector<std::string> site;
};

// TF's per-bin line: "Bin (256): Total Chunks: 3, Chunks in use: 2. ..."
// A chunk counts in the bin its size names (in use or not), as in TF.
struct BinDump {
  int bin = 0;
  uint64_t bin_size = 0;  // the smallest chunk size the bin holds
  int64_t total_chunks = 0;
  int64_t total_bytes = 0;
  int64_t chunks_in_use = 0;
  int64_t bytes_in_use = 0;
  int64_t requested_bytes_in_use = 0;
  int64_t free_chunks = 0;  // chunks actually held in the bin's free set
  int64_t free_bytes = 0;
};

// The Allocator::Options a dump was taken under (durations in seconds).
struct AllocatorOptionsDump {
  bool allow_growth = true;
  bool allow_retry_on_failure = true;
  bool garbage_collection = false;
  double fragmentation_fraction = 0;
  double retry_timeout_seconds = 10;
  bool record_allocation_sites = false;
};

struct MemoryDump {
  std::string allocator_name;
  AllocatorOptionsDump options;
  uint64_t limit = 0;  // total_memory
  AllocatorStats stats;
  std::vector<RegionDump> regions;  // address order
  std::vector<ChunkDump> chunks;    // address order (region by region)
  std::vector<BinDump> bins;        // kNumBins entries, bin 0 first

  // Derived totals, for reports.
  uint64_t PoolBytes() const;
  uint64_t FreeBytes() const;
  uint64_t LargestFreeChunk() const;
  size_t NumChunksInUse() const;
};

// One live allocation, for leak and OOM reports.
struct OutstandingAllocation {
  uint64_t address = 0;
  uint64_t size = 0;  // chunk bytes
  uint64_t requested_size = 0;
  int64_t allocation_id = 0;
  std::vector<std::string> site;  // empty when sites were not recorded
};

// JSON:
//   {"format": "bfc-memory-dump", "version": 1, "allocator": NAME,
//    "limit": N, "options": {...}, "stats": {...every AllocatorStats field,
//    optional ones null when unset...},
//    "regions": [{"base": N, "size": N}...],
//    "chunks": [{"address", "size", "requested_size", "in_use", "bin",
//                "allocation_id", "region", "site": [...]}...],
//    "bins": [{"bin", "bin_size", "total_chunks", ...}...]}
// Addresses are JSON numbers (exact in JavaScript below 2^53, which covers
// user-space addresses on x86-64 and arm64). indent < 0: one line.
std::string MemoryDumpToJson(const MemoryDump& dump, int indent = -1);
// InvalidArgument naming the problem for text that is not such a document.
absl::StatusOr<MemoryDump> MemoryDumpFromJson(std::string_view json);

// The same for AllocatorStats alone (the "stats" object above).
std::string AllocatorStatsToJson(const AllocatorStats& stats, int indent = -1);
absl::StatusOr<AllocatorStats> AllocatorStatsFromJson(std::string_view json);

// TF's DumpMemoryLog text for `dump`: per-bin lines, the chunks of each
// region (at most `max_chunk_lines` in all, then a count of the rest), the
// in-use chunks by size, totals, the largest live allocations with their
// sites (top `top_n`) and the stats. `num_bytes`: the request that failed (0:
// none).
std::string FormatMemoryLog(const MemoryDump& dump, size_t num_bytes,
                            size_t max_chunk_lines = 1000, size_t top_n = 10);

// A human table in the spirit of PyTorch's memory_summary(): current and
// peak usage, requested vs allocated, pool, free, fragmentation, counters.
std::string FormatMemorySummary(const MemoryDump& dump);

// "1.50 MiB", "256 B": binary units.
std::string HumanReadableBytes(uint64_t bytes);

}  // namespace bfc

#endif  // BFC_MEMORY_DUMP_H_
