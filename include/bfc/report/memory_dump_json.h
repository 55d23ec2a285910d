// File: bfc/report/memory_dump_json.h
// -----------------------------------------------------------------------------
//
// MemoryDump and AllocatorStats as JSON, both ways (library bfc::report).
// A dump round-trips: MemoryDumpFromJson(MemoryDumpToJson(d)) gives back every
// field of d. The "options" object has one key per row of the option table
// (bfc/allocator_options.h), durations as "<name>_seconds" numbers; the
// "stats" object one key per AllocatorStats field, optional ones null when
// unset.
//
// Example:
//
//   bfc::MemoryDump dump = allocator.RecordMemoryMap();
//   std::ofstream("map.json") << bfc::MemoryDumpToJson(dump, /*indent=*/1);
//
// Thread safety: stateless functions.
#ifndef BFC_REPORT_MEMORY_DUMP_JSON_H_
#define BFC_REPORT_MEMORY_DUMP_JSON_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "bfc/allocator_stats.h"
#include "bfc/memory_dump.h"

namespace bfc {

// JSON:
//   {"format": "bfc-memory-dump", "version": 1, "allocator": NAME,
//    "limit": N, "options": {...}, "stats": {...},
//    "regions": [{"base": N, "size": N}...],
//    "chunks": [{"address", "size", "requested_size", "in_use", "bin",
//                "allocation_id", "region", "site": [...]}...],
//    "bins": [{"bin", "bin_size", "total_chunks", ...}...]}
// Addresses are JSON numbers (exact in JavaScript below 2^53, which covers
// user-space addresses on x86-64 and arm64). indent < 0: one line.
std::string MemoryDumpToJson(const MemoryDump& dump, int indent = -1);
// InvalidArgument naming the problem for text that is not such a document.
// An option missing from "options" keeps its default (dumps written before
// the option existed); an unknown option is InvalidArgument.
absl::StatusOr<MemoryDump> MemoryDumpFromJson(std::string_view json);

// The same for AllocatorStats alone (the "stats" object above).
std::string AllocatorStatsToJson(const AllocatorStats& stats, int indent = -1);
absl::StatusOr<AllocatorStats> AllocatorStatsFromJson(std::string_view json);

}  // namespace bfc

#endif  // BFC_REPORT_MEMORY_DUMP_JSON_H_
