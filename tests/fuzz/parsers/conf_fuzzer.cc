// File: tests/fuzz/parsers/conf_fuzzer.cc
// BFC_ALLOC_CONF (ParseAllocConf) and the byte-size grammar (ParseByteSize)
// on arbitrary text. What they accept must pass ValidateAllocatorOptions,
// survive the AllocatorOptionToString -> SetAllocatorOption round trip, and
// build an Allocator that serves a few requests and validates.
//
// Found: a size with 128 zeros after the point divided by zero (SIGFPE through
// memory_limit); n unknown keys cost O(n^2) (regressions/conf).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "bfc/allocator.h"
#include "bfc/allocator_options.h"
#include "bfc/units.h"
#include "bfc/virtual_sub_allocator.h"
#include "c_api/alloc_conf.h"
#include "fuzz_support.h"

namespace {

[[noreturn]] void Fail(const std::string& what) {
  fprintf(stderr, "conf_fuzzer: %s\n", what.c_str());
  abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  bfc::fuzz::SilenceLogs();
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  for (uint64_t unit : {uint64_t{1}, bfc::kMiB}) {
    absl::StatusOr<uint64_t> bytes = bfc::ParseByteSize(text, unit);
    if (bytes.ok()) (void)bfc::HumanReadableBytesExact(*bytes);
  }

  absl::StatusOr<bfc::c_api::AllocConf> conf = bfc::c_api::ParseAllocConf(text);
  if (!conf.ok()) return 0;
  bfc::AllocatorOptions o = conf->options;
  if (absl::Status v = bfc::ValidateAllocatorOptions(o); !v.ok()) {
    Fail("parsed options fail validation: " + std::string(v.message()));
  }
  // bfc/allocator_options.h: setting a field to its own printed value
  // changes nothing.
  for (const bfc::OptionField& f : bfc::AllocatorOptionFields()) {
    bfc::AllocatorOptions copy = o;
    const std::string printed = bfc::AllocatorOptionToString(o, f.name);
    const absl::Status st = bfc::SetAllocatorOption(copy, f.name, printed);
    if (!st.ok() || copy != o) {
      Fail("round trip of " + std::string(f.name) + " via \"" + printed +
           "\": " + std::string(st.message()));
    }
  }

  (void)bfc::c_api::MakeVirtualSubAllocator(conf->backend, size_t{1} << 20);

  o.abort_on_invalid_input = false;
  o.record_allocation_sites = false;  // a stack walk per request: slow
  constexpr size_t kLimit = size_t{64} << 20;
  bfc::Allocator alloc(std::make_unique<bfc::VirtualSubAllocator>(kLimit),
                       kLimit, "fuzz", o);
  bfc::AllocationAttributes attr;
  attr.retry_on_failure = false;
  std::vector<void*> live;
  // Requests drawn from the input's hash: 1 B to 16 MiB.
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < size; ++i) h = (h ^ data[i]) * 1099511628211ull;
  for (int i = 0; i < 64; ++i) {
    h = h * 6364136223846793005ull + 1442695040888963407ull;
    if (((h >> 60) & 3) == 0 && !live.empty()) {
      alloc.DeallocateRaw(live.back());
      live.pop_back();
    } else {
      const size_t bytes = (size_t{1} << ((h >> 33) % 25)) + ((h >> 20) & 1023);
      if (void* p = alloc.AllocateRaw(256, bytes, attr)) live.push_back(p);
    }
  }
  if (absl::Status v = alloc.Validate(); !v.ok()) {
    Fail("Validate: " + std::string(v.message()));
  }
  for (void* p : live) alloc.DeallocateRaw(p);
  return 0;
}
