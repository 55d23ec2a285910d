// File: tests/memory_dump_test.cc
// RecordMemoryMap, the text dumps, the new stats, allocation sites and the
// JSON round trip, on fake sub-allocators (no GPU).
#include "bfc/memory_dump.h"

#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/attributes.h"
#include "bfc/account.h"
#include "bfc/allocator.h"
#include "bfc/pytorch_snapshot.h"
#include "bfc/report/memory_dump_json.h"
#include "bfc/report/replay_report.h"
#include "bfc/units.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "testing/fake_sub_allocator.h"

namespace bfc {
namespace {

using ::bfc::testing::FakeSubAllocator;
using ::bfc::testing::LogCapture;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

Allocator::Options NoRetry() {
  Allocator::Options o;
  o.allow_retry_on_failure = false;
  return o;
}

std::unique_ptr<Allocator> Make(size_t limit, Allocator::Options o = NoRetry(),
                                const std::string& name = "dump") {
  return std::make_unique<Allocator>(
      std::make_unique<FakeSubAllocator>(FakeSubAllocator::Options{}), limit,
      name, o);
}

// Every field, so a round trip that drops or garbles one fails.
void ExpectStatsEq(const AllocatorStats& a, const AllocatorStats& b) {
  EXPECT_EQ(a.num_allocs, b.num_allocs);
  EXPECT_EQ(a.bytes_in_use, b.bytes_in_use);
  EXPECT_EQ(a.peak_bytes_in_use, b.peak_bytes_in_use);
  EXPECT_EQ(a.largest_alloc_size, b.largest_alloc_size);
  EXPECT_EQ(a.bytes_limit, b.bytes_limit);
  EXPECT_EQ(a.bytes_reserved, b.bytes_reserved);
  EXPECT_EQ(a.peak_bytes_reserved, b.peak_bytes_reserved);
  EXPECT_EQ(a.bytes_reservable_limit, b.bytes_reservable_limit);
  EXPECT_EQ(a.largest_free_block_bytes, b.largest_free_block_bytes);
  EXPECT_EQ(a.pool_bytes, b.pool_bytes);
  EXPECT_EQ(a.peak_pool_bytes, b.peak_pool_bytes);
  EXPECT_EQ(a.num_invalid_frees, b.num_invalid_frees);
  EXPECT_EQ(a.num_invalid_requests, b.num_invalid_requests);
  EXPECT_EQ(a.num_ooms, b.num_ooms);
  EXPECT_EQ(a.num_extends, b.num_extends);
  EXPECT_EQ(a.num_regions_released, b.num_regions_released);
  EXPECT_EQ(a.num_sub_allocator_rejects, b.num_sub_allocator_rejects);
  EXPECT_EQ(a.num_retries, b.num_retries);
  EXPECT_EQ(a.bytes_requested_in_use, b.bytes_requested_in_use);
  EXPECT_DOUBLE_EQ(a.fragmentation, b.fragmentation);
}

void ExpectDumpEq(const MemoryDump& a, const MemoryDump& b) {
  EXPECT_EQ(a.allocator_name, b.allocator_name);
  EXPECT_EQ(a.limit, b.limit);
  // Every option, through the option table's text form.
  for (const OptionField& f : AllocatorOptionFields()) {
    EXPECT_EQ(AllocatorOptionToString(a.options, f.name),
              AllocatorOptionToString(b.options, f.name))
        << f.name;
  }
  ExpectStatsEq(a.stats, b.stats);
  ASSERT_EQ(a.regions.size(), b.regions.size());
  for (size_t i = 0; i < a.regions.size(); ++i) {
    EXPECT_EQ(a.regions[i].base, b.regions[i].base);
    EXPECT_EQ(a.regions[i].size, b.regions[i].size);
  }
  ASSERT_EQ(a.chunks.size(), b.chunks.size());
  for (size_t i = 0; i < a.chunks.size(); ++i) {
    const ChunkDump& x = a.chunks[i];
    const ChunkDump& y = b.chunks[i];
    EXPECT_EQ(x.address, y.address);
    EXPECT_EQ(x.size, y.size);
    EXPECT_EQ(x.requested_size, y.requested_size);
    EXPECT_EQ(x.in_use, y.in_use);
    EXPECT_EQ(x.bin, y.bin);
    EXPECT_EQ(x.allocation_id, y.allocation_id);
    EXPECT_EQ(x.region, y.region);
    EXPECT_EQ(x.site, y.site);
  }
  ASSERT_EQ(a.bins.size(), b.bins.size());
  for (size_t i = 0; i < a.bins.size(); ++i) {
    EXPECT_EQ(a.bins[i].bin, b.bins[i].bin);
    EXPECT_EQ(a.bins[i].bin_size, b.bins[i].bin_size);
    EXPECT_EQ(a.bins[i].total_chunks, b.bins[i].total_chunks);
    EXPECT_EQ(a.bins[i].total_bytes, b.bins[i].total_bytes);
    EXPECT_EQ(a.bins[i].chunks_in_use, b.bins[i].chunks_in_use);
    EXPECT_EQ(a.bins[i].bytes_in_use, b.bins[i].bytes_in_use);
    EXPECT_EQ(a.bins[i].requested_bytes_in_use,
              b.bins[i].requested_bytes_in_use);
    EXPECT_EQ(a.bins[i].free_chunks, b.bins[i].free_chunks);
    EXPECT_EQ(a.bins[i].free_bytes, b.bins[i].free_bytes);
  }
}

TEST(MemoryDumpTest, SnapshotDescribesRegionsChunksAndBins) {
  auto alloc = Make(64 * kMiB);
  void* a = alloc->AllocateRaw(256, 1000);      // 1024-byte chunk
  void* b = alloc->AllocateRaw(256, 3 * kKiB);  // 3 KiB
  void* c = alloc->AllocateRaw(256, 100);       // 256
  alloc->DeallocateRaw(b);                      // a hole between a and c

  const MemoryDump d = alloc->RecordMemoryMap();
  EXPECT_EQ(d.allocator_name, "dump");
  EXPECT_EQ(d.limit, 64 * kMiB);
  ASSERT_EQ(d.regions.size(), 1u);
  EXPECT_EQ(d.regions[0].size, 2 * kMiB);
  // a, hole, c, tail.
  ASSERT_EQ(d.chunks.size(), 4u);
  EXPECT_EQ(d.chunks[0].address, reinterpret_cast<uintptr_t>(a));
  EXPECT_EQ(d.chunks[0].size, 1024u);
  EXPECT_EQ(d.chunks[0].requested_size, 1000u);
  EXPECT_TRUE(d.chunks[0].in_use);
  EXPECT_EQ(d.chunks[0].allocation_id, alloc->AllocationId(a));
  EXPECT_FALSE(d.chunks[1].in_use);
  EXPECT_EQ(d.chunks[1].size, 3 * kKiB);
  EXPECT_EQ(d.chunks[1].bin, 3);  // [2 KiB, 4 KiB)
  EXPECT_EQ(d.chunks[2].address, reinterpret_cast<uintptr_t>(c));
  EXPECT_EQ(d.chunks[3].size, 2 * kMiB - 1024 - 3 * kKiB - 256);
  for (const ChunkDump& ch : d.chunks) {
    EXPECT_EQ(ch.region, 0);
    EXPECT_THAT(ch.site, IsEmpty());  // sites are off by default
  }
  // Chunks tile the region.
  uint64_t expected = d.regions[0].base;
  for (const ChunkDump& ch : d.chunks) {
    EXPECT_EQ(ch.address, expected);
    expected += ch.size;
  }
  EXPECT_EQ(expected, d.regions[0].base + d.regions[0].size);

  ASSERT_EQ(d.bins.size(), static_cast<size_t>(kNumBins));
  EXPECT_EQ(d.bins[0].bin_size, 256u);
  EXPECT_EQ(d.bins[0].chunks_in_use, 1);  // c
  EXPECT_EQ(d.bins[0].requested_bytes_in_use, 100);
  EXPECT_EQ(d.bins[2].chunks_in_use, 1);  // a: [1 KiB, 2 KiB)
  EXPECT_EQ(d.bins[3].free_chunks, 1);
  EXPECT_EQ(d.bins[3].free_bytes, static_cast<int64_t>(3 * kKiB));
  int64_t total = 0;
  for (const BinDump& bin : d.bins) total += bin.total_bytes;
  EXPECT_EQ(total, static_cast<int64_t>(d.PoolBytes()));

  EXPECT_EQ(d.stats.bytes_in_use, 1024 + 256);
  EXPECT_EQ(d.stats.bytes_requested_in_use, 1100);
  EXPECT_EQ(d.NumChunksInUse(), 2u);
  EXPECT_EQ(d.LargestFreeChunk(), d.chunks[3].size);
  alloc->DeallocateRaw(a);
  alloc->DeallocateRaw(c);
}

TEST(MemoryDumpTest, JsonRoundTripsEveryField) {
  Allocator::Options o = NoRetry();
  o.record_allocation_sites = true;
  o.garbage_collection = true;
  o.fragmentation_fraction = 0.25;
  auto alloc = Make(64 * kMiB, o, "json \"quoted\" <name>");
  std::vector<void*> ptrs;
  for (int i = 0; i < 50; ++i)
    ptrs.push_back(alloc->AllocateRaw(256, 300 * i + 1));
  for (int i = 0; i < 50; i += 3) alloc->DeallocateRaw(ptrs[i]);
  EXPECT_EQ(alloc->AllocateRaw(256, 1 << 30), nullptr);  // an OOM counted

  const MemoryDump d = alloc->RecordMemoryMap();
  ASSERT_GT(d.chunks.size(), 30u);
  EXPECT_EQ(d.stats.num_ooms, 1);
  for (int indent : {-1, 2}) {
    const std::string json = MemoryDumpToJson(d, indent);
    absl::StatusOr<MemoryDump> back = MemoryDumpFromJson(json);
    ASSERT_TRUE(back.ok()) << back.status();
    ExpectDumpEq(d, *back);
    EXPECT_EQ(MemoryDumpToJson(*back, indent), json);
  }
  for (int i = 0; i < 50; ++i) {
    if (i % 3 != 0) alloc->DeallocateRaw(ptrs[i]);
  }
}

// A retry_timeout set in code can be negative (no wait), infinite or past
// what the JSON reader takes; its dump must still read back, with a timeout
// that behaves the same.
TEST(MemoryDumpTest, TimeoutsSetInCodeReadBack) {
  const struct {
    absl::Duration timeout;
    double seconds;
  } cases[] = {
      {absl::Seconds(-5), 0},
      {absl::InfiniteDuration(), 1e12},
      {absl::Seconds(1e15), 1e12},
      {absl::Seconds(2.5), 2.5},
  };
  for (const auto& c : cases) {
    Allocator::Options o = NoRetry();
    o.retry_timeout = c.timeout;
    auto alloc = Make(4 * kMiB, o);
    const std::string json = MemoryDumpToJson(alloc->RecordMemoryMap(), -1);
    absl::StatusOr<MemoryDump> back = MemoryDumpFromJson(json);
    ASSERT_TRUE(back.ok()) << c.timeout << ": " << back.status();
    EXPECT_EQ(back->options.retry_timeout, absl::Seconds(c.seconds))
        << c.timeout;
  }
}

TEST(MemoryDumpTest, StatsJsonRoundTripsIncludingUnsetOptionals) {
  AllocatorStats s;
  s.num_allocs = 7;
  s.bytes_in_use = 1 << 20;
  s.pool_bytes = 4 << 20;
  s.num_retries = 3;
  s.bytes_requested_in_use = 1000;
  s.fragmentation = 0.375;
  absl::StatusOr<AllocatorStats> back =
      AllocatorStatsFromJson(AllocatorStatsToJson(s));
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectStatsEq(s, *back);
  EXPECT_FALSE(back->bytes_limit.has_value());
  EXPECT_FALSE(back->peak_pool_bytes.has_value());
}

TEST(MemoryDumpTest, MalformedJsonIsAnErrorNotACrash) {
  auto alloc = Make(64 * kMiB);
  void* p = alloc->AllocateRaw(256, 1000);
  const std::string good = MemoryDumpToJson(alloc->RecordMemoryMap());
  for (const std::string& bad :
       {std::string(""), std::string("{"), std::string("[]"),
        std::string("{\"format\": \"something else\"}"),
        good.substr(0, good.size() / 2)}) {
    absl::StatusOr<MemoryDump> d = MemoryDumpFromJson(bad);
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  // A chunk naming a region that does not exist.
  std::string broken = good;
  const size_t at = broken.find("\"region\":0");
  ASSERT_NE(at, std::string::npos) << good.substr(0, 2000);
  broken.replace(at, 10, "\"region\":9");
  EXPECT_FALSE(MemoryDumpFromJson(broken).ok());
  EXPECT_FALSE(AllocatorStatsFromJson("{\"num_allocs\": \"x\"}").ok());
  alloc->DeallocateRaw(p);
}

// A field holding a value nested 200,000 deep is refused with a short
// message: describing it by dump() recursed once per level and overflowed
// the stack (a segmentation fault in all three readers).
TEST(MemoryDumpTest, DeeplyNestedValuesAreRefusedBriefly) {
  const int depth = 200000;
  const std::string nested = std::string(depth, '[') + std::string(depth, ']');
  const absl::StatusOr<MemoryDump> d = MemoryDumpFromJson(
      "{\"format\":\"bfc-memory-dump\",\"version\":" + nested + "}");
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(d.status().message(),
              HasSubstr("\"version\" is not an integer (got an array of 1)"));
  EXPECT_LT(d.status().message().size(), 200u);
  const absl::StatusOr<AllocatorStats> st =
      AllocatorStatsFromJson("{\"num_allocs\":" + nested + "}");
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(
      st.status().message(),
      HasSubstr("\"num_allocs\" is not an integer (got an array of 1)"));
  const absl::StatusOr<ReplayReport> r = ReplayReportFromJson(
      "{\"format\":\"bfc-replay-report\",\"version\":" + nested + "}");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(),
              HasSubstr("\"version\" is not an integer (got an array of 1)"));
  // A long string is cut, not copied whole into the message.
  const absl::StatusOr<AllocatorStats> longs = AllocatorStatsFromJson(
      "{\"num_allocs\":\"" + std::string(100000, 'x') + "\"}");
  ASSERT_FALSE(longs.ok());
  EXPECT_THAT(longs.status().message(), HasSubstr("xxx...)"));
  EXPECT_LT(longs.status().message().size(), 200u);
}

// Numbers that do not fit their field are InvalidArgument naming the field,
// never a silent cast (1.9 -> 1, -1 -> 2^64 - 1, 1e300 -> undefined).
TEST(MemoryDumpTest, OutOfRangeNumbersNameTheField) {
  const std::string stats = AllocatorStatsToJson(AllocatorStats());
  struct Case {
    const char* key;
    const char* value;
    const char* message;
  };
  for (const Case& c : {
           Case{"num_allocs", "1.9", "\"num_allocs\" is not an integer"},
           Case{"num_allocs", "1e300", "\"num_allocs\" is not an integer"},
           Case{"num_allocs", "18446744073709551615",
                "\"num_allocs\" is out of range"},
           Case{"bytes_limit", "true", "\"bytes_limit\" is not an integer"},
           Case{"fragmentation", "\"x\"", "\"fragmentation\" is not a number"},
       }) {
    std::string json = stats;
    const std::string key = std::string("\"") + c.key + "\":";
    const size_t at = json.find(key);
    ASSERT_NE(at, std::string::npos) << c.key;
    const size_t end = json.find_first_of(",}", at);
    json.replace(at + key.size(), end - at - key.size(), c.value);
    absl::StatusOr<AllocatorStats> s = AllocatorStatsFromJson(json);
    ASSERT_FALSE(s.ok()) << json;
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.status().message(), HasSubstr(c.message)) << json;
  }
  // An unsigned dump field given a negative number.
  auto alloc = Make(64 * kMiB);
  std::string dump = MemoryDumpToJson(alloc->RecordMemoryMap());
  const size_t at = dump.find("\"limit\":");
  ASSERT_NE(at, std::string::npos);
  dump.insert(at + 8, "-");
  absl::StatusOr<MemoryDump> d = MemoryDumpFromJson(dump);
  ASSERT_FALSE(d.ok());
  EXPECT_THAT(d.status().message(), HasSubstr("\"limit\" is out of range"));
  // An unknown option is refused, a missing one keeps its default.
  std::string options = MemoryDumpToJson(alloc->RecordMemoryMap());
  const size_t o = options.find("\"max_oom_logs\":10,");
  ASSERT_NE(o, std::string::npos) << options.substr(0, 400);
  std::string unknown = options;
  unknown.replace(o, 18, "\"colour\":10,");
  EXPECT_THAT(MemoryDumpFromJson(unknown).status().message(),
              HasSubstr("unknown option \"colour\""));
  std::string missing = options;
  missing.erase(o, 18);
  absl::StatusOr<MemoryDump> back = MemoryDumpFromJson(missing);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->options.max_oom_logs, AllocatorOptions().max_oom_logs);
}

// A dump document broken in one field at a time (hostile or corrupted
// input): each is InvalidArgument naming the field's JSON path and what is
// wrong, never a silent cast, a crash or a dump that lies (a chunk outside
// its region, a negative size, a bin that does not exist). The expected
// messages are written out here, not computed by the reader.
TEST(MemoryDumpTest, EveryFieldIsCheckedForTypeAndRange) {
  using nlohmann::json;
  auto alloc = Make(64 * kMiB);
  void* a = alloc->AllocateRaw(256, 1000);
  void* b = alloc->AllocateRaw(256, 3 * kMiB);  // a second region
  void* c = alloc->AllocateRaw(256, 100);
  alloc->DeallocateRaw(c);
  const json good = json::parse(MemoryDumpToJson(alloc->RecordMemoryMap()));
  alloc->DeallocateRaw(a);
  alloc->DeallocateRaw(b);
  ASSERT_GE(good["regions"].size(), 2u);
  ASSERT_TRUE(MemoryDumpFromJson(good.dump()).ok());
  size_t used = 0, free = 0;
  while (!good["chunks"][used]["in_use"].get<bool>()) ++used;
  while (good["chunks"][free]["in_use"].get<bool>()) ++free;
  const std::string u = "/chunks/" + std::to_string(used);
  const std::string f = "/chunks/" + std::to_string(free);
  const std::string un = "chunks[" + std::to_string(used) + "]";
  const std::string fn = "chunks[" + std::to_string(free) + "]";
  const uint64_t base0 = good["regions"][0]["base"];
  const uint64_t chunk0_size = good["chunks"][0]["size"];
  const int64_t bin0_chunks = good["bins"][0]["total_chunks"];

  struct Case {
    std::string pointer;  // JSON pointer of the field to change
    json value;           // its new value; discarded: remove the field
    std::string message;  // a substring of the error
  };
  const std::vector<Case> cases = {
      {"/version", 1.0, "\"version\" is not an integer"},
      {"/version", 1.5, "\"version\" is not an integer"},
      {"/version", 2, "unsupported version 2"},
      {"/format", 1, "\"format\" is not a string"},
      {"/limit", -1, "\"limit\" is out of range"},
      {"/limit", 1.9, "\"limit\" is not an integer"},
      {"/limit", 1e300, "\"limit\" is not an integer"},
      {"/allocator", nullptr, "\"allocator\" is not a string"},
      {"/stats", json::array(), "\"stats\" is not an object"},
      {"/stats/bytes_in_use", -1, "\"stats.bytes_in_use\" is out of range"},
      {"/stats/num_allocs", 1.9, "\"stats.num_allocs\" is not an integer"},
      {"/stats/bytes_limit", -4096, "\"stats.bytes_limit\" is out of range"},
      {"/stats/fragmentation", 1.5, "\"stats.fragmentation\" is out of range"},
      {"/stats/fragmentation", -0.1, "\"stats.fragmentation\" is out of range"},
      {"/stats/fragmentation", 1e300,
       "\"stats.fragmentation\" is out of range"},
      {"/options", 3, "\"options\" is not an object"},
      {"/options/max_oom_logs", 1.9, "\"options.max_oom_logs\" is not an int"},
      {"/options/max_oom_logs", -1, "\"options.max_oom_logs\": "},
      {"/options/max_oom_logs", 4294967296, "\"options.max_oom_logs\": "},
      {"/options/allow_growth", "true",
       "\"options.allow_growth\" is not true/false"},
      {"/options/fragmentation_fraction", 1e300,
       "\"options.fragmentation_fraction\": "},
      {"/options/fragmentation_fraction", "0.5",
       "\"options.fragmentation_fraction\" is not a number"},
      {"/options/retry_timeout_seconds", 1e300,
       "\"options.retry_timeout_seconds\" is out of range"},
      {"/options/retry_timeout_seconds", -1,
       "\"options.retry_timeout_seconds\" is out of range"},
      {"/regions", json::object(), "\"regions\" is not an array"},
      {"/regions/0", 7, "\"regions[0]\" is not an object"},
      {"/regions/0/size", 0, "\"regions[0].size\" is out of range"},
      {"/regions/0/size", -1, "\"regions[0].size\" is out of range"},
      {"/regions/0/base", json(~uint64_t{0} - 100),
       "\"regions[0].size\" is out of range"},            // base + size wraps
      {"/regions/1/base", base0, "\"regions[1].base\""},  // overlaps region 0
      {"/chunks/0/region", 7, "\"chunks[0].region\" names region 7 of"},
      {"/chunks/0/region", -1, "\"chunks[0].region\" names region -1 of"},
      {"/chunks/0/address", json(base0 - 256),
       "\"chunks[0].address\" is out of range"},
      {"/chunks/0/size", -256, "\"chunks[0].size\" is out of range"},
      {"/chunks/0/size", json(uint64_t{1} << 63),
       "\"chunks[0].size\" is out of range"},  // beyond its region
      {"/chunks/0/size", 0, "\"chunks[0].size\" is out of range"},
      {"/chunks/1/address", json(base0), "\"chunks[1].address\""},  // overlap
      {"/chunks/0/requested_size", json(chunk0_size + 1),
       "\"chunks[0].requested_size\" is out of range"},
      {"/chunks/0/in_use", 1, "\"chunks[0].in_use\" is not true/false"},
      {"/chunks/0/site", "frame", "\"chunks[0].site\" is not an array"},
      {"/chunks/0/site", json::array({1}), "\"chunks[0].site[0]\""},
      {u + "/bin", 3, "\"" + un + ".bin\" is out of range"},
      {u + "/allocation_id", -1, "\"" + un + ".allocation_id\" is out of"},
      {u + "/allocation_id", 0, "\"" + un + ".allocation_id\" is out of"},
      {f + "/bin", 21, "\"" + fn + ".bin\" is out of range [0, 20]"},
      {f + "/bin", -1, "\"" + fn + ".bin\" is out of range [0, 20]"},
      {f + "/bin", 4294967296, "\"" + fn + ".bin\" is out of range"},
      {f + "/bin", 2.5, "\"" + fn + ".bin\" is not an integer"},
      {f + "/allocation_id", 5, "\"" + fn + ".allocation_id\" is out of"},
      {"/bins", "none", "\"bins\" is not an array"},
      {"/bins/0/bin", 21, "\"bins[0].bin\" is out of range"},
      {"/bins/0/bin", 4294967296, "\"bins[0].bin\" is out of range"},
      {"/bins/1/bin", 0, "\"bins[1].bin\" repeats bin 0"},
      {"/bins/0/total_chunks", -1, "\"bins[0].total_chunks\" is out of range"},
      {"/bins/0/chunks_in_use", bin0_chunks + 1,
       "\"bins[0].chunks_in_use\" is out of range"},
      {"/bins/0/free_bytes", -1, "\"bins[0].free_bytes\" is out of range"},
      {"/bins/0/bin_size", -256, "\"bins[0].bin_size\" is out of range"},
      {"/chunks", json::value_t::discarded, "missing \"chunks\""},
      {"/regions/0/base", json::value_t::discarded,
       "missing \"regions[0].base\""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.pointer + " = " +
                 (c.value.is_discarded() ? "(removed)" : c.value.dump()));
    json doc = good;
    const json::json_pointer pointer(c.pointer);
    if (c.value.is_discarded()) {
      doc[pointer.parent_pointer()].erase(pointer.back());
    } else {
      doc[pointer] = c.value;
    }
    absl::StatusOr<MemoryDump> d = MemoryDumpFromJson(doc.dump());
    ASSERT_FALSE(d.ok());
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(d.status().message(), HasSubstr(c.message));
  }
}

TEST(MemoryDumpTest, RequestedBytesAndFragmentationStats) {
  auto alloc = Make(64 * kMiB);
  void* a = alloc->AllocateRaw(256, 1000);
  void* b = alloc->AllocateRaw(256, 64 * kKiB);
  void* c = alloc->AllocateRaw(256, 1);
  AllocatorStats s = *alloc->GetStats();
  EXPECT_EQ(s.bytes_requested_in_use, 1000 + 64 * 1024 + 1);
  EXPECT_EQ(s.bytes_in_use, 1024 + 64 * 1024 + 256);
  // The free tail is one chunk: no external fragmentation.
  EXPECT_DOUBLE_EQ(s.fragmentation, 0.0);

  alloc->DeallocateRaw(b);  // a 64 KiB hole before c, apart from the tail
  s = *alloc->GetStats();
  EXPECT_EQ(s.bytes_requested_in_use, 1001);
  const double free_bytes = static_cast<double>(*s.pool_bytes - s.bytes_in_use);
  EXPECT_DOUBLE_EQ(s.fragmentation, 64.0 * 1024 / free_bytes);
  EXPECT_TRUE(alloc->Validate().ok());
  alloc->DeallocateRaw(a);
  alloc->DeallocateRaw(c);
  s = *alloc->GetStats();
  EXPECT_EQ(s.bytes_requested_in_use, 0);
  EXPECT_DOUBLE_EQ(s.fragmentation, 0.0);
  EXPECT_THAT(s.DebugString(), HasSubstr("Fragmentation:"));
}

TEST(MemoryDumpTest, ResetPeakStatsKeepsCounters) {
  auto alloc = Make(64 * kMiB);
  void* big = alloc->AllocateRaw(256, 8 * kMiB);
  void* small = alloc->AllocateRaw(256, kKiB);
  alloc->DeallocateRaw(big);
  AllocatorStats before = *alloc->GetStats();
  ASSERT_GT(before.peak_bytes_in_use, before.bytes_in_use);
  alloc->ResetPeakStats();
  AllocatorStats after = *alloc->GetStats();
  EXPECT_EQ(after.peak_bytes_in_use, after.bytes_in_use);
  EXPECT_EQ(after.peak_pool_bytes, after.pool_bytes);
  EXPECT_EQ(after.num_allocs, before.num_allocs);  // ClearStats resets it
  EXPECT_EQ(after.largest_alloc_size, before.largest_alloc_size);
  alloc->DeallocateRaw(small);
}

TEST(MemoryDumpTest, RetriesAreCounted) {
  Allocator::Options o;
  o.allow_retry_on_failure = true;
  o.retry_timeout = absl::Seconds(5);
  auto alloc = Make(4 * kMiB, o);
  void* hog = alloc->AllocateRaw(256, 3 * kMiB);
  ASSERT_NE(hog, nullptr);
  std::thread freer([&] {
    absl::SleepFor(absl::Milliseconds(100));
    alloc->DeallocateRaw(hog);
  });
  void* p = alloc->AllocateRaw(256, 3 * kMiB);  // waits for the free
  freer.join();
  EXPECT_NE(p, nullptr);
  EXPECT_GE(alloc->GetStats()->num_retries, 1);
  EXPECT_EQ(alloc->GetStats()->num_ooms, 0);
  alloc->DeallocateRaw(p);
}

TEST(MemoryDumpTest, OomLogsTheMemoryDump) {
  LogCapture log;
  auto alloc = Make(4 * kMiB);
  void* a = alloc->AllocateRaw(256, 3 * kMiB);
  EXPECT_EQ(alloc->AllocateRaw(256, 2 * kMiB), nullptr);
  EXPECT_TRUE(
      log.Contains("BFCAllocator dump for dump", LogSeverity::kWarning));
  EXPECT_TRUE(log.Contains("Bin (256): \tTotal Chunks:"));
  EXPECT_TRUE(log.Contains("Summary of in-use Chunks by size"));
  EXPECT_TRUE(log.Contains("Largest live allocations (1 of 1)"));
  EXPECT_TRUE(log.Contains("record_allocation_sites"));  // the hint
  EXPECT_EQ(alloc->GetStats()->num_ooms, 1);
  alloc->DeallocateRaw(a);
}

// From a review against TF: failures of requests whose caller can do without
// them (retry_on_failure false) each logged a full report, so a dozen of them
// used up max_oom_logs and the real out-of-memory after them logged nothing.
// TF logs those as one line and keeps its full report for the real one.
TEST(MemoryDumpTest, FailuresTheCallerCanDoWithoutKeepTheFullReport) {
  LogCapture log;
  auto alloc = Make(2 * kMiB, NoRetry());
  void* hog = alloc->AllocateRaw(256, 2 * kMiB);
  ASSERT_NE(hog, nullptr);
  AllocationAttributes optional;
  optional.retry_on_failure = false;
  for (int i = 0; i < 12; ++i) {
    EXPECT_EQ(alloc->AllocateRaw(256, 1536, optional), nullptr);
  }
  int notes = 0;
  for (const auto& [severity, line] : log.lines()) {
    EXPECT_THAT(line, Not(HasSubstr("BFCAllocator dump for")));
    EXPECT_THAT(line, Not(HasSubstr("Occupancy")));
    notes += line.find("its caller can do without") != std::string::npos;
  }
  EXPECT_EQ(notes, 10);  // max_oom_logs
  EXPECT_TRUE(log.Contains("trying to allocate 1.5KiB (1536 bytes)"));
  EXPECT_EQ(alloc->GetStats()->num_ooms, 12);
  EXPECT_EQ(alloc->num_oom_logs_suppressed(), 2);

  EXPECT_EQ(alloc->AllocateRaw(256, 4096), nullptr);  // a real one
  // TF's size style (HumanReadableNumBytes): one decimal for KiB.
  EXPECT_TRUE(log.Contains("ran out of memory trying to allocate 4.0KiB",
                           LogSeverity::kWarning));
  EXPECT_TRUE(log.Contains("BFCAllocator dump for dump"));
  EXPECT_TRUE(log.Contains("Occupancy"));
  alloc->DeallocateRaw(hog);
}

TEST(MemoryDumpTest, MemoryLogCapsChunkLines) {
  auto alloc = Make(64 * kMiB);
  std::vector<void*> ptrs;
  for (int i = 0; i < 40; ++i) ptrs.push_back(alloc->AllocateRaw(256, 256));
  const MemoryDump d = alloc->RecordMemoryMap();
  const std::string text = FormatMemoryLog(d, 4096, /*max_chunk_lines=*/10);
  EXPECT_THAT(text, HasSubstr("... 31 more chunks not listed"));
  EXPECT_THAT(text, HasSubstr("40 Chunks of size 256 totalling 10.00 KiB"));
  EXPECT_THAT(text, HasSubstr("Bin for 4.00 KiB was 4.00 KiB"));
  for (void* p : ptrs) alloc->DeallocateRaw(p);
}

TEST(MemoryDumpTest, MemorySummaryIsATable) {
  auto alloc = Make(64 * kMiB);
  void* a = alloc->AllocateRaw(256, 1536 * kKiB);
  const std::string summary = alloc->MemorySummary();
  EXPECT_THAT(summary, HasSubstr("bfc memory summary: allocator 'dump'"));
  EXPECT_THAT(summary, HasSubstr("Allocated (in-use chunks)"));
  EXPECT_THAT(summary, HasSubstr("1.50 MiB"));
  EXPECT_THAT(summary, HasSubstr("External fragmentation"));
  // Every line is a table row of the same width.
  size_t start = 0;
  while (start < summary.size()) {
    const size_t end = summary.find('\n', start);
    EXPECT_EQ(end - start, 75u) << summary.substr(start, end - start);
    start = end + 1;
  }
  alloc->DeallocateRaw(a);
}

ABSL_ATTRIBUTE_NOINLINE void* AllocateFromHere(Allocator& alloc, size_t n) {
  void* p = alloc.AllocateRaw(256, n);
  // Keeps the call from being a tail call, so this frame stays on the stack.
  ABSL_ATTRIBUTE_UNUSED volatile int keep = 0;
  return p;
}

TEST(MemoryDumpTest, AllocationSitesNameTheCaller) {
  Allocator::Options o = NoRetry();
  o.record_allocation_sites = true;
  auto alloc = Make(64 * kMiB, o);
  void* small = AllocateFromHere(*alloc, 1000);
  void* large = AllocateFromHere(*alloc, 100 * kKiB);
  void* gone = AllocateFromHere(*alloc, 10);
  alloc->DeallocateRaw(gone);
  EXPECT_TRUE(alloc->Validate().ok());

  std::vector<OutstandingAllocation> live = alloc->OutstandingAllocations();
  ASSERT_EQ(live.size(), 2u);
  EXPECT_EQ(live[0].address, reinterpret_cast<uintptr_t>(large));  // largest
  EXPECT_EQ(live[1].address, reinterpret_cast<uintptr_t>(small));
  for (const OutstandingAllocation& a : live) {
    ASSERT_FALSE(a.site.empty());
    EXPECT_THAT(a.site[0], HasSubstr("AllocateFromHere"));
    EXPECT_THAT(a.site, Not(Contains(HasSubstr("bfc::Allocator::"))));
  }
  const MemoryDump d = alloc->RecordMemoryMap();
  EXPECT_TRUE(d.options.record_allocation_sites);
  for (const ChunkDump& c : d.chunks) {
    if (c.in_use) {
      ASSERT_FALSE(c.site.empty());
      EXPECT_THAT(c.site[0], HasSubstr("AllocateFromHere"));
    } else {
      EXPECT_THAT(c.site, IsEmpty());
    }
  }
  // The leak report names the site.
  LogCapture log;
  alloc.reset();
  EXPECT_TRUE(
      log.Contains("2 outstanding allocation(s)", LogSeverity::kWarning));
  EXPECT_TRUE(log.Contains("at bfc::(anonymous namespace)::AllocateFromHere"));
}

TEST(MemoryDumpTest, WithoutSitesNothingIsRecorded) {
  auto alloc = Make(64 * kMiB);
  void* p = AllocateFromHere(*alloc, 1000);
  std::vector<OutstandingAllocation> live = alloc->OutstandingAllocations();
  ASSERT_EQ(live.size(), 1u);
  EXPECT_THAT(live[0].site, IsEmpty());
  EXPECT_EQ(live[0].requested_size, 1000u);
  EXPECT_EQ(live[0].size, 1024u);
  EXPECT_EQ(live[0].allocation_id, alloc->AllocationId(p));
  LogCapture log;
  alloc.reset();
  EXPECT_TRUE(log.Contains("Largest live allocations (1 of 1)"));
  EXPECT_TRUE(log.Contains("record_allocation_sites"));
}

TEST(MemoryDumpTest, HumanReadableBytes) {
  EXPECT_EQ(HumanReadableBytes(0), "0 B");
  EXPECT_EQ(HumanReadableBytes(1023), "1023 B");
  EXPECT_EQ(HumanReadableBytes(1536), "1.50 KiB");
  EXPECT_EQ(HumanReadableBytes(uint64_t{3} << 30), "3.00 GiB");
}

// FormatMemorySummary takes any dump, also one built by hand: an account
// whose parent is itself, later in the list, or out of range is printed at
// the top level instead of hanging or reading past the list (from an
// adversarial review). MemoryDumpFromJson refuses such dumps.
TEST(MemoryDumpTest, SummaryOfAccountsWithImpossibleParents) {
  for (const int parent : {0, 1, 1000000, std::numeric_limits<int>::max()}) {
    MemoryDump d;
    d.allocator_name = "hand-made";
    d.limit = 1 << 20;
    AccountDump a;
    a.path = "root";
    a.parent = parent;
    d.accounts.push_back(a);
    AccountDump b;
    b.path = "root/b";
    b.parent = parent == 0 ? 0 : 1;  // itself when `parent` is 1
    d.accounts.push_back(b);
    const std::string s = FormatMemorySummary(d);
    EXPECT_THAT(s, HasSubstr("root (none)")) << parent;
    EXPECT_THAT(s, HasSubstr("b (none)")) << parent;
  }
}

}  // namespace
// Whether `s` is well-formed UTF-8 (no check of overlong forms).
bool IsUtf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t n = c < 0x80           ? 1
                     : (c >> 5) == 0x6  ? 2
                     : (c >> 4) == 0xE  ? 3
                     : (c >> 3) == 0x1E ? 4
                                        : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) >> 6) != 2) return false;
    }
    i += n;
  }
  return true;
}

// From a review: a long account name was cut inside a character, so the
// summary was not UTF-8.
TEST(MemoryDumpTest, SummaryCutsLongNamesAtACharacter) {
  Allocator a(std::make_unique<FakeSubAllocator>(FakeSubAllocator::Options{}),
              size_t{1} << 30, "utf8");
  AccountOptions ao;
  ao.name = "a";
  for (int i = 0; i < 20; ++i) ao.name += "\xc3\xbc";  // u with umlaut
  auto root = Account::CreateRoot(&a, ao);
  ASSERT_TRUE(root.ok()) << root.status();
  const std::string summary = a.MemorySummary();
  EXPECT_THAT(summary, HasSubstr("a\xc3\xbc"));
  EXPECT_THAT(summary, HasSubstr("..."));
  EXPECT_TRUE(IsUtf8(summary)) << summary;
}

// From a review: a request past the largest roundable size wrapped to 256 B
// in the log's "Bin for" line.
TEST(MemoryDumpTest, TheLogOfAHugeRequestDoesNotWrap) {
  Allocator a(std::make_unique<FakeSubAllocator>(FakeSubAllocator::Options{}),
              size_t{1} << 30, "huge");
  const std::string log = a.MemoryLog(std::numeric_limits<size_t>::max());
  EXPECT_THAT(log, Not(HasSubstr("Bin for 256B")));
  EXPECT_THAT(log, Not(HasSubstr("Bin for 256 B")));
  EXPECT_THAT(log, HasSubstr("Bin for 16.00 EiB"));
}

// From a review: a partial release (pages inside a free chunk given back)
// was written as a "segment_free" of an address no segment starts at, so the
// snapshot's trace did not replay into its own segments. Regions that change
// shape are written as expandable segments (segment_map / segment_unmap).
TEST(MemoryDumpTest, APartialReleaseIsASegmentUnmapInTheSnapshot) {
  FakeSubAllocator::Options so;
  so.partial_free_bytes = 4096;
  Allocator::Options o;
  o.allow_retry_on_failure = false;
  o.release_partial_regions = true;
  Allocator a(std::make_unique<FakeSubAllocator>(so), size_t{1} << 30,
              "partial", o);
  a.RecordMemoryHistory(1000);
  void* keep = a.AllocateRaw(256, 256);
  ASSERT_NE(keep, nullptr);
  ASSERT_GT(a.ReleaseFreeMemory(), 0u);
  ASSERT_TRUE(a.Validate().ok()) << a.Validate();
  const std::string pickle =
      PyTorchSnapshotPickle(a.RecordMemoryMap(), a.GetMemoryHistory().events);
  EXPECT_NE(pickle.find("segment_unmap"), std::string::npos);
  EXPECT_NE(pickle.find("segment_map"), std::string::npos);
  EXPECT_EQ(pickle.find("segment_free"), std::string::npos);
  EXPECT_EQ(pickle.find("segment_alloc"), std::string::npos);
  a.DeallocateRaw(keep);
}

// A segment's blocks tile it: a gap before a chunk (a hand-built dump may
// have one) and the free rest after the last chunk are written as inactive
// blocks of their own sizes; and the segment's requested_size sums what its
// live chunks asked for, not their rounded sizes (PyTorch's viewer shows
// both). Sizes below 64 KiB are BININT2 ('M' and two bytes little-endian).
TEST(MemoryDumpTest, ASnapshotSegmentTilesItsGapsAndSumsRequestedBytes) {
  MemoryDump dump;
  dump.regions.push_back({0x100000, 0x10000});
  ChunkDump chunk;
  chunk.address = 0x101000;  // a 4 KiB gap before it
  chunk.size = 0x2000;
  chunk.requested_size = 0x1f00;
  chunk.in_use = true;
  chunk.allocation_id = 1;
  dump.chunks.push_back(chunk);
  const std::string pickle = PyTorchSnapshotPickle(dump, {});
  const std::string size_key("\x8c\x04size", 6);
  const auto count = [&](const std::string& needle) {
    size_t n = 0;
    for (size_t at = pickle.find(needle); at != std::string::npos;
         at = pickle.find(needle, at + 1)) {
      ++n;
    }
    return n;
  };
  EXPECT_EQ(count(size_key + std::string("M\x00\x10", 3)), 1u);  // the gap
  EXPECT_EQ(count(size_key + std::string("M\x00\x20", 3)), 1u);  // the chunk
  EXPECT_EQ(count(size_key + std::string("M\x00\xd0", 3)), 1u);  // the rest
  EXPECT_EQ(count("inactive"), 2u);
  const std::string requested_key("\x8c\x0erequested_size", 16);
  // The block's and the segment's.
  EXPECT_EQ(count(requested_key + std::string("M\x00\x1f", 3)), 2u);
  EXPECT_EQ(count(requested_key + std::string("M\x00\x20", 3)), 0u);
}

// From a review, on dumps built by hand (PyTorchSnapshotPickle takes any
// MemoryDump): a region ending past 2^64 wrapped its end, so its chunks
// were dropped from its blocks; a negative device was written as is on the
// segments, and a large one made that many empty device_traces lists.
TEST(MemoryDumpTest, ASnapshotOfAHandBuiltDumpKeepsItsBlocksAndDevice) {
  MemoryDump dump;
  const uint64_t base = ~uint64_t{0} - 4095;  // 4 KiB below the top
  dump.regions.push_back({base, 8192});       // would end past 2^64
  ChunkDump chunk;
  chunk.address = base;
  chunk.size = 8192;
  chunk.requested_size = 0x0123456789AB;  // findable in the bytes
  chunk.in_use = true;
  chunk.allocation_id = 1;
  dump.chunks.push_back(chunk);
  const std::string pickle = PyTorchSnapshotPickle(dump, {});
  // The chunk is a block: its requested size is written as LONG1, 8 bytes
  // little-endian.
  const std::string requested("\x8a\x08\xab\x89\x67\x45\x23\x01\x00\x00", 10);
  EXPECT_NE(pickle.find(requested), std::string::npos);
  // The segment is the 4 KiB inside the address space, and the chunk's
  // block is cut to it: "size" 4096 (BININT2), never 8192, and no inactive
  // block (a wrapped end once made one of ~2^64 bytes at address 4096).
  const std::string size_key("\x8c\x04size", 6);
  EXPECT_NE(pickle.find(size_key + std::string("M\x00\x10", 3)),
            std::string::npos);
  EXPECT_EQ(pickle.find(size_key + std::string("M\x00\x20", 3)),
            std::string::npos);
  EXPECT_NE(pickle.find(std::string("\x8c\x0atotal_sizeM\x00\x10", 14)),
            std::string::npos);
  EXPECT_EQ(pickle.find("inactive"), std::string::npos);
  // A region that ends exactly at 2^64 is whole: one block of 4 KiB.
  dump.regions[0].size = 4096;
  dump.chunks[0].size = 4096;
  const std::string at_top = PyTorchSnapshotPickle(dump, {});
  EXPECT_NE(at_top.find(size_key + std::string("M\x00\x10", 3)),
            std::string::npos);
  EXPECT_EQ(at_top.find("inactive"), std::string::npos);
  dump.regions[0].size = 8192;
  dump.chunks[0].size = 8192;

  // Devices: clamped to [0, 127] (c10::DeviceIndex), the same everywhere.
  auto with_device = [&](int device) {
    PyTorchSnapshotOptions options;
    options.device = device;
    return PyTorchSnapshotPickle(dump, {}, options);
  };
  EXPECT_EQ(with_device(-5), with_device(0));
  EXPECT_EQ(with_device(1 << 30), with_device(127));
  EXPECT_NE(with_device(126), with_device(127));
  EXPECT_LT(with_device(1 << 30).size(), size_t{4096});
}

}  // namespace bfc
