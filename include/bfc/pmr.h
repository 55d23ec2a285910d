// File: bfc/pmr.h
// -----------------------------------------------------------------------------
//
// bfc::PmrResource is a `std::pmr::memory_resource` over a bfc::Allocator, so
// standard containers can draw host memory from a BFC pool:
//
//   bfc::Allocator pool(std::make_unique<bfc::HostSubAllocator>(),
//                       /*total_memory=*/size_t{256} << 20, "host");
//   bfc::PmrResource resource(pool);
//   std::pmr::vector<int> v(&resource);
//   std::pmr::unordered_map<int, std::pmr::string> m(&resource);
//
// The model: every do_allocate is one Allocator::AllocateRaw, every
// do_deallocate one DeallocateRaw; the resource holds no state of its own
// beyond a reference, so the pool's stats, limit and ReleaseFreeRegions()
// cover the containers' memory.
//
// Memory types: containers write into what they get, so only allocators whose
// sub-allocator hands out host-accessible memory are served: kHostPageable
// (HostSubAllocator) and kHostPinned (CudaPinnedSubAllocator). Over an
// allocator with stream events (a pinned pool shared with CUDA streams) the
// memory is ready for the host when handed out
// (AllocationAttributes::host_ready). Over any other
// type (kDevice, kUnknown such as VirtualSubAllocator) every allocation throws
// std::bad_alloc rather than hand out memory the container would fault on.
//
// Errors: following the std::pmr contract, a failed allocation (out of
// memory, memory type not host-accessible) throws std::bad_alloc. This is the
// one place where an exception leaves the bfc library; everything else
// reports through absl::Status or nullptr. Deallocating a pointer the
// allocator did not hand out is reported and counted by the allocator
// (num_invalid_frees) and otherwise ignored; it never throws.
//
// Ownership: the resource refers to the allocator and does not own it; the
// allocator must outlive the resource and every container using it.
//
// Equality: two PmrResources are equal exactly when they wrap the same
// bfc::Allocator object (identity), since then either can free the other's
// memory. A PmrResource never equals any other kind of resource.
//
// Thread safety: thread-safe, as the Allocator is; the resource itself is
// immutable.
#ifndef BFC_PMR_H_
#define BFC_PMR_H_

#include <algorithm>
#include <cstddef>
#include <memory_resource>
#include <new>

#include "bfc/allocator.h"
#include "bfc/sub_allocator.h"

namespace bfc {

class PmrResource final : public std::pmr::memory_resource {
 public:
  // `allocator` must outlive the resource.
  explicit PmrResource(Allocator& allocator) : allocator_(&allocator) {}

  PmrResource(const PmrResource&) = default;
  PmrResource& operator=(const PmrResource&) = delete;

  Allocator& allocator() const { return *allocator_; }

  // True when the allocator's memory may be dereferenced on the host, i.e.
  // when allocations from this resource can succeed at all.
  static bool Serves(const Allocator& allocator) {
    const MemoryType type = allocator.GetMemoryType();
    return type == MemoryType::kHostPageable || type == MemoryType::kHostPinned;
  }

 private:
  // At least `bytes` (0 is served as 1, so the pointer is unique) aligned to
  // `alignment` (a power of two, as pmr guarantees; above 256 is honoured).
  // Throws std::bad_alloc when the allocator cannot serve the request.
  void* do_allocate(size_t bytes, size_t alignment) override {
    if (!Serves(*allocator_)) throw std::bad_alloc();
    // Containers write at once: over a pinned pool with stream events,
    // memory a stream's copy may still read is handed out only after the
    // host waited for it (a review: a container wrote into memory a held
    // stream still used; the CUDA resources' allocate does the same).
    AllocationAttributes attr;
    attr.host_ready = allocator_->HasStreamOps();
    void* p =
        allocator_->AllocateRaw(alignment, std::max<size_t>(bytes, 1), attr);
    if (p == nullptr) throw std::bad_alloc();
    return p;
  }

  // `bytes` and `alignment` are not needed: the allocator knows the chunk.
  void do_deallocate(void* p, size_t /*bytes*/, size_t /*alignment*/) override {
    allocator_->DeallocateRaw(p);
  }

  bool do_is_equal(
      const std::pmr::memory_resource& other) const noexcept override {
    const auto* o = dynamic_cast<const PmrResource*>(&other);
    return o != nullptr && o->allocator_ == allocator_;
  }

  Allocator* const allocator_;
};

}  // namespace bfc

#endif  // BFC_PMR_H_
