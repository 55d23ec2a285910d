// File: bfc/internal/constants.h
// -----------------------------------------------------------------------------
//
// The allocator's size granule and size classes, defined once. Everything
// that says "256" means kMinAllocationSize and derives from here: chunk sizes
// and chunk starts are multiples of it, requests round up to it, regions are
// aligned to it, and bin b holds chunks of [kMinAllocationSize << b,
// kMinAllocationSize << (b + 1)) (the last of the kNumBins bins takes the
// rest). The names are TF's and public (bfc/allocator.h includes this); they
// live in this low-level header so that the internal headers (bin.h) and the
// sub-allocators share them without including the Allocator.
#ifndef BFC_INTERNAL_CONSTANTS_H_
#define BFC_INTERNAL_CONSTANTS_H_

#include <cstddef>

namespace bfc {

inline constexpr int kMinAllocationBits = 8;
inline constexpr size_t kMinAllocationSize = size_t{1} << kMinAllocationBits;
inline constexpr int kNumBins = 21;

// The bins are indexed by a 32-bit bitmap of non-empty bins.
static_assert(kNumBins <= 32);

}  // namespace bfc

#endif  // BFC_INTERNAL_CONSTANTS_H_
