// File: src/core/internal/bits.h
// -----------------------------------------------------------------------------
//
// Power-of-two arithmetic shared by the allocator and the sub-allocators:
// alignment tests and round-ups, once. Private to the core (not installed).
// The allocator's own granule is kMinAllocationSize (bfc/internal/constants.h);
// RoundedBytes (bfc/internal/bin.h) is the inline, installed round-up to it.
#ifndef BFC_CORE_INTERNAL_BITS_H_
#define BFC_CORE_INTERNAL_BITS_H_

#include <cstddef>
#include <cstdint>
#include <limits>

#include "bfc/internal/check.h"
#include "bfc/internal/constants.h"

namespace bfc::internal {

[[nodiscard]] constexpr bool IsPowerOfTwo(size_t x) {
  return x != 0 && (x & (x - 1)) == 0;
}

static_assert(IsPowerOfTwo(kMinAllocationSize));

// True when `a` is a multiple of the power of two `alignment`.
[[nodiscard]] constexpr bool IsAligned(uintptr_t a, size_t alignment) {
  return (a & (alignment - 1)) == 0;
}
[[nodiscard]] inline bool IsAligned(const void* p, size_t alignment) {
  return IsAligned(reinterpret_cast<uintptr_t>(p), alignment);
}

// `a` rounded up to a multiple of the power of two `alignment`. Requires: the
// result does not wrap (an address inside a region, plus padding that fits
// in it); use RoundUp where the size comes from a caller.
[[nodiscard]] inline uintptr_t AlignUp(uintptr_t a, size_t alignment) {
  BFC_DCHECK(IsPowerOfTwo(alignment));
  return (a + alignment - 1) & ~(static_cast<uintptr_t>(alignment) - 1);
}

// `x` rounded down to a multiple of the power of two `alignment`.
[[nodiscard]] constexpr size_t AlignDown(size_t x, size_t alignment) {
  return x & ~(alignment - 1);
}

// Rounds `x` up to a multiple of the power of two `alignment` into *out;
// false (and *out untouched) when that overflows size_t.
[[nodiscard]] inline bool RoundUp(size_t x, size_t alignment, size_t* out) {
  BFC_DCHECK(IsPowerOfTwo(alignment));
  if (x > std::numeric_limits<size_t>::max() - (alignment - 1)) return false;
  *out = (x + alignment - 1) & ~(alignment - 1);
  return true;
}

}  // namespace bfc::internal

#endif  // BFC_CORE_INTERNAL_BITS_H_
