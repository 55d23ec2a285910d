// File: bfc/memory_dump.h
// -----------------------------------------------------------------------------
//
// A snapshot of an Allocator's memory, as plain data: what
// `Allocator::RecordMemoryMap()` returns (TensorFlow's name) and what the
// text dumps, the SVG memory map (bfc/report/memory_map_svg.h) and the HTML
// viewer (bfc/report/replay_report.h) are drawn from.
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
// Rendering: the text forms the allocator itself prints (FormatMemoryLog on
// out-of-memory, FormatLargestLiveAllocations in the leak report) are here;
// JSON both ways (bfc/report/memory_dump_json.h) and the SVG map
// (bfc/report/memory_map_svg.h) are in the report library, bfc::report.
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

#include "bfc/allocator_options.h"
#include "bfc/allocator_stats.h"
#include "bfc/units.h"

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
  // A free chunk that work queued on these streams may still use (its fence
  // is not known complete): reused by another stream only after a wait.
  // Stream handles as integers; empty when clean or in use.
  std::vector<uint64_t> pending_streams;
  // The account an in-use chunk is charged to (bfc/account.h): an index
  // into MemoryDump::accounts; -1 for none.
  int account = -1;
};

// One account (bfc/account.h) of the allocator: its place in the tree and
// its stats (AccountStats' meanings; limit -1 when it has none).
struct AccountDump {
  std::string path;  // "root/session"
  int parent = -1;   // index into MemoryDump::accounts; -1 for a root
  int64_t limit_bytes = -1;
  int64_t reservation_bytes = 0;
  int64_t bytes_in_use = 0;
  int64_t own_bytes = 0;
  int64_t peak_bytes_in_use = 0;
  int64_t allocations = 0;
  int64_t frees = 0;
  int64_t failures = 0;
  int64_t live_allocations = 0;
  bool closed = false;
};

// One stream the allocator has seen (stream-ordered reuse).
struct StreamDump {
  uint64_t stream = 0;         // the handle as an integer (0: the implicit one)
  bool forgotten = false;      // ForgetStream was called
  int64_t bytes_pending = 0;   // free bytes whose fence names this stream
  int64_t events_pending = 0;  // recorded events not yet known complete
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

struct MemoryDump {
  std::string allocator_name;
  AllocatorOptions options;  // what the allocator was built with
  uint64_t limit = 0;        // total_memory
  AllocatorStats stats;
  std::vector<RegionDump> regions;  // address order
  std::vector<ChunkDump> chunks;    // address order (region by region)
  std::vector<BinDump> bins;        // kNumBins entries, bin 0 first
  // Streams: empty while only the implicit stream was used.
  std::vector<StreamDump> streams;
  StreamStats stream_stats;
  // Accounts, parents before children; empty when none was made.
  std::vector<AccountDump> accounts;

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

// One change of an allocator's memory, recorded while history is on
// (Allocator::RecordMemoryHistory): PyTorch's trace entries
// (torch.cuda.memory._record_memory_history) with bfc's names.
struct MemoryEvent {
  enum class Action : uint8_t {
    kAllocate = 0,      // a chunk handed out
    kFree = 1,          // a chunk given back by its caller
    kRegionAlloc = 2,   // a new region from the sub-allocator
    kRegionExtend = 3,  // memory from the sub-allocator joined to a region
    kRegionFree = 4,    // a region given back to the sub-allocator
    kOutOfMemory = 5,   // a request that failed
  };
  Action action = Action::kAllocate;
  // Chunk address; region base; first byte added (kRegionExtend, which may
  // lie before or after the region it joins); 0 for kOutOfMemory.
  uint64_t address = 0;
  // Chunk bytes; region bytes; bytes added; bytes asked (kOutOfMemory).
  uint64_t size = 0;
  uint64_t requested_size = 0;  // kAllocate / kFree: bytes asked; else 0
  int64_t allocation_id = -1;   // kAllocate / kFree; else -1
  // kOutOfMemory: bytes the limit still allowed to be taken from the
  // sub-allocator (PyTorch's device_free); else 0.
  uint64_t free_bytes = 0;
  int64_t time_us = 0;  // wall clock, microseconds since the Unix epoch
};

const char* MemoryEventActionName(MemoryEvent::Action action);

// What Allocator::GetMemoryHistory returns: the newest `max_entries` events,
// oldest first, and how many older ones were dropped to keep it bounded.
struct MemoryHistory {
  std::vector<MemoryEvent> events;
  uint64_t dropped = 0;
  size_t max_entries = 0;  // 0: recording is off
};

// Live allocations in report order: largest first, then oldest.
void SortByReportOrder(std::vector<OutstandingAllocation>* allocations);

// "Largest live allocations (n of m):" and one entry per allocation, its
// site's first frames when sites were recorded (else a hint how to record
// them): the leak report's and the memory log's closing section.
std::string FormatLargestLiveAllocations(const MemoryDump& dump, size_t top_n);

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

}  // namespace bfc

#endif  // BFC_MEMORY_DUMP_H_
