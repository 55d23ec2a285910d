// A consumer of the installed bfc package: allocates, frees and validates.
#include <cstdio>
#include <memory>

#include "bfc/allocator.h"
#include "bfc/host_sub_allocator.h"

int main() {
  bfc::Allocator alloc(std::make_unique<bfc::HostSubAllocator>(),
                       size_t{64} << 20, "consumer");
  void* p = alloc.AllocateRaw(256, 1000);
  if (p == nullptr || alloc.AllocatedSize(p) != 1024) return 1;
  static_cast<char*>(p)[999] = 1;  // host memory is writable
  alloc.DeallocateRaw(p);
  if (!alloc.Validate().ok() || alloc.GetStats()->bytes_in_use != 0) return 2;
  std::printf("consumer ok: %s\n",
              alloc.RenderOccupancy().substr(0, 10).c_str());
  return 0;
}
