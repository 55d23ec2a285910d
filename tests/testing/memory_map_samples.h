// File: tests/testing/memory_map_samples.h
// Memory dumps from real allocators for the picture tests: a handful of
// chunks, and 100k+ chunks over several regions.
#ifndef BFC_TESTS_TESTING_MEMORY_MAP_SAMPLES_H_
#define BFC_TESTS_TESTING_MEMORY_MAP_SAMPLES_H_

#include <cstddef>
#include <memory>
#include <vector>

#include "bfc/allocator.h"
#include "bfc/internal/check.h"
#include "bfc/memory_dump.h"
#include "bfc/virtual_sub_allocator.h"

namespace bfc::testing {

inline std::unique_ptr<Allocator> SampleAllocator(const char* name,
                                                  size_t limit,
                                                  bool allow_growth) {
  Allocator::Options o;
  o.allow_retry_on_failure = false;
  o.allow_growth = allow_growth;
  return std::make_unique<Allocator>(
      std::make_unique<VirtualSubAllocator>(size_t{8} << 30), limit, name, o);
}

// 10 chunks in one 16 MiB region: in use with padding, free holes, a tail.
inline MemoryDump SmallSampleDump() {
  std::unique_ptr<Allocator> a =
      SampleAllocator("small <sample>", size_t{16} << 20,
                      /*allow_growth=*/false);
  const size_t sizes[] = {3 << 20,   1 << 20,    2 << 20,
                          700 << 10, 1500 << 10, (1 << 20) + 1000,
                          2 << 20,   900 << 10,  1 << 20};
  std::vector<void*> p;
  for (size_t s : sizes) p.push_back(a->AllocateRaw(256, s));
  a->DeallocateRaw(p[1]);
  a->DeallocateRaw(p[4]);
  a->DeallocateRaw(p[7]);
  // Best fit is the 1.46 MiB hole, too small to split: 0.26 MiB of padding.
  p[4] = a->AllocateRaw(256, 1200 << 10);
  MemoryDump d = a->RecordMemoryMap();
  for (size_t i = 0; i < p.size(); ++i) {
    if (i != 1 && i != 7) a->DeallocateRaw(p[i]);
  }
  return d;
}

// The large sample's allocations, and the chunks its dump holds at least.
// At check level 2 every call validates the whole allocator (O(chunks)),
// which makes 120k allocations quadratic (~20 minutes per dump); there the
// sample is a tenth (about 10 s).
inline int LargeSampleAllocations() {
  return internal::ValidateEveryCall() ? 12000 : 120000;
}
inline size_t LargeSampleMinChunks() {
  return static_cast<size_t>(LargeSampleAllocations() / 6 * 5);  // 100k at 120k
}

// 120k small allocations, every third freed: >100k chunks in several regions.
inline MemoryDump LargeSampleDump() {
  std::unique_ptr<Allocator> a = SampleAllocator("large", size_t{8} << 30,
                                                 /*allow_growth=*/true);
  std::vector<void*> p;
  for (int i = 0, n = LargeSampleAllocations(); i < n; ++i) {
    p.push_back(a->AllocateRaw(256, 200 + (i * 7919) % 3000));
  }
  for (size_t i = 0; i < p.size(); i += 3) a->DeallocateRaw(p[i]);
  MemoryDump d = a->RecordMemoryMap();
  for (size_t i = 0; i < p.size(); ++i) {
    if (i % 3 != 0) a->DeallocateRaw(p[i]);
  }
  return d;
}

}  // namespace bfc::testing

#endif  // BFC_TESTS_TESTING_MEMORY_MAP_SAMPLES_H_
