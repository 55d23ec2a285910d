// File: report/json_value.h
// -----------------------------------------------------------------------------
//
// nlohmann::json values for the memory dump types, so that documents that
// embed a dump (the replay report) build one tree instead of re-parsing text.
// Internal: needs nlohmann-json, which is not a public dependency of bfc.
// The *FromJsonValue functions throw nlohmann::json exceptions or
// std::invalid_argument on malformed input; callers catch them.
#ifndef BFC_INTERNAL_MEMORY_DUMP_JSON_H_
#define BFC_INTERNAL_MEMORY_DUMP_JSON_H_

#include "bfc/allocator_stats.h"
#include "bfc/memory_dump.h"
#include "nlohmann/json.hpp"

namespace bfc::internal {

nlohmann::json StatsToJsonValue(const AllocatorStats& stats);
AllocatorStats StatsFromJsonValue(const nlohmann::json& j);
nlohmann::json MemoryDumpToJsonValue(const MemoryDump& dump);
MemoryDump MemoryDumpFromJsonValue(const nlohmann::json& j);

}  // namespace bfc::internal

#endif  // BFC_INTERNAL_MEMORY_DUMP_JSON_H_
