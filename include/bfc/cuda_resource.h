// File: bfc/cuda_resource.h
// -----------------------------------------------------------------------------
//
// CCCL memory resources over a bfc::Allocator, for code built on libcu++'s
// `cuda::mr` concepts (RMM, CUDA C++ containers, cuda::mr::resource_ref).
// Available when bfc is built with CUDA (BFC_HAVE_CUDA); needs the CCCL
// headers the CUDA toolkit ships (CUDA 13: <toolkit>/include/cccl) and compiles
// as plain C++17 with g++ or clang, no nvcc. With CMake, link the target
// bfc::cuda_resource (find_package(bfc)): it carries that include directory.
// Nothing links the CUDA runtime: the one CUDA call here (a stream
// synchronization) goes through bfc's run-time driver table.
//
//   bfc::Allocator pool(std::make_unique<bfc::CudaDeviceSubAllocator>(0),
//                       /*total_memory=*/size_t{8} << 30, "gpu0");
//   bfc::CudaDeviceResource mr(pool);                  // a copyable handle
//   cuda::mr::async_resource_ref<cuda::mr::device_accessible> ref{mr};
//   void* p = ref.allocate_async(1 << 20, 256, stream);
//   ...
//   ref.deallocate_async(p, 1 << 20, 256, stream);
//
// The model: a resource is a handle (a shared pointer) to one bfc::Allocator;
// copies share it, and two handles are equal exactly when they refer to the
// same allocator (identity). Constructed from an Allocator& the handle does
// not own it (the allocator must outlive every copy); constructed from a
// std::shared_ptr<Allocator> it shares ownership.
//
//   CudaDeviceResource  device_accessible                 over kDevice memory
//                                                         (CudaDeviceSubAllocator)
//   CudaPinnedResource  device_accessible, host_accessible over kHostPinned
//                                                         (CudaPinnedSubAllocator)
//
// Both satisfy cuda::mr::resource and cuda::mr::async_resource of CCCL 3.0
// (CUDA 13.0): allocate(bytes, alignment), deallocate(ptr, bytes, alignment),
// allocate_async(bytes, alignment, stream), deallocate_async(ptr, bytes,
// alignment, stream), ==, get_property(r, device_accessible). They also
// offer the spellings of newer CCCL (synchronous_resource / resource):
// allocate_sync, deallocate_sync, allocate(stream, bytes, alignment),
// deallocate(stream, ptr, bytes, alignment). The overloads do not collide:
// cuda::stream_ref is not constructible from an integer.
//
// Streams. Over an allocator with events (Allocator::SetStreamOps with
// bfc::CudaStreamOps, bfc/cuda_stream_ops.h) the async calls are
// stream-ordered, as cudaMallocAsync is:
//   * allocate_async(bytes, alignment, stream) is AllocateOnStream: memory
//     freed on `stream` is reused at once; memory freed on another stream
//     only when its free has completed or after `stream` is made to wait for
//     it (a cuStreamWaitEvent, no host block);
//   * deallocate_async(ptr, bytes, alignment, stream) is DeallocateOnStream:
//     it returns at once; the memory is fenced by `stream`'s work.
//   * the synchronous allocate / allocate_sync return memory usable at once
//     by the host and by any stream, as cudaMalloc's is
//     (AllocationAttributes::host_ready): memory another stream's work may
//     still use is handed out only after the host waited for that work;
//   * cudaStreamPerThread names a different stream on each thread, which
//     events recorded later cannot tell apart: allocate_async on it is the
//     synchronous allocate, and deallocate_async on it synchronizes the
//     calling thread's stream first, as without events. cudaStreamLegacy is
//     the legacy default stream (0).
// Over an allocator without events the resource cannot learn when another
// stream's work is done, so it falls back to what it did before streams:
// deallocate_async FIRST SYNCHRONIZES THE STREAM (CudaStreamSynchronize) and
// only then frees (the memory is then ready for any stream); if that
// synchronization fails (a broken context) the memory is deliberately not
// returned (it leaks) and the failure is logged.
//
// Errors: a request the pool cannot serve (out of memory, a resource whose
// kind does not match the allocator's memory type) returns nullptr and is
// logged by the allocator; nothing throws (unlike CCCL's own resources, which
// throw cuda::cuda_error), unless the resource was made with
// OnFailure::kThrow, which throws std::bad_alloc instead (what RMM's
// containers need: they never check for nullptr). Deallocation never fails
// visibly: a foreign pointer is reported and counted by the allocator
// (num_invalid_frees).
//
// Thread safety: thread-safe, as the Allocator is. Handles are values; a
// handle shared between threads must not be assigned to concurrently.
#ifndef BFC_CUDA_RESOURCE_H_
#define BFC_CUDA_RESOURCE_H_

#ifndef BFC_HAVE_CUDA
#error "bfc/cuda_resource.h needs a bfc built with CUDA (BFC_HAVE_CUDA)"
#endif

// The cuda::mr concepts of CCCL 3.0 are behind this macro; it must be defined
// before any CCCL header is included (define it on the command line if you
// include CCCL headers before this one).
#ifndef LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE
#define LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE
#endif

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cuda/memory_resource>
#include <cuda/stream_ref>
#include <memory>
#include <new>
#include <string>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "bfc/allocator.h"
#include "bfc/cuda_sub_allocator.h"
#include "bfc/log.h"
#include "bfc/sub_allocator.h"

namespace bfc {

template <bool kHostAccessible>
class BasicCudaResource {
 public:
  // The memory type the allocator must hand out for this resource to serve.
  static constexpr MemoryType kMemoryType =
      kHostAccessible ? MemoryType::kHostPinned : MemoryType::kDevice;

  // What a failed allocation (not one of 0 bytes) does: return nullptr, the
  // default, or throw std::bad_alloc, as CCCL's own resources and RMM's
  // do. Pick kThrow under RMM: its containers (rmm::device_buffer,
  // device_uvector) use what allocate returns without a check, so a
  // nullptr would surface as a fault in a kernel (a review).
  enum class OnFailure { kReturnNull, kThrow };

  // Non-owning: `allocator` must outlive the handle and all its copies.
  explicit BasicCudaResource(Allocator& allocator,
                             OnFailure on_failure = OnFailure::kReturnNull)
      : allocator_(std::shared_ptr<Allocator>(), &allocator),
        on_failure_(on_failure) {}
  // Shares ownership of `allocator` (must not be null).
  explicit BasicCudaResource(std::shared_ptr<Allocator> allocator,
                             OnFailure on_failure = OnFailure::kReturnNull)
      : allocator_(std::move(allocator)), on_failure_(on_failure) {}

  Allocator& allocator() const { return *allocator_; }

  // True when the allocator's memory is of kMemoryType, i.e. when this
  // resource can allocate from it at all.
  static bool Serves(const Allocator& allocator) {
    return allocator.GetMemoryType() == kMemoryType;
  }

  // --- CCCL 3.0: cuda::mr::resource ----------------------------------------

  // `bytes` aligned to `alignment` (a power of two; <= 256 gives 256), or
  // nullptr: out of memory, bytes == 0, or the allocator's memory is not of
  // kMemoryType.
  void* allocate(size_t bytes,
                 size_t alignment = cuda::mr::default_cuda_malloc_alignment) {
    if (!Serves(*allocator_)) {
      LogQuietly([&] {
        return "bfc::BasicCudaResource: allocator '" + allocator_->Name() +
               "' hands out " + MemoryTypeName(allocator_->GetMemoryType()) +
               " memory, this resource needs " + MemoryTypeName(kMemoryType);
      });
      return Checked(nullptr, bytes);
    }
    // Usable at once by the host and by any stream, as cudaMalloc's memory
    // is: memory a stream's work may still use is handed out only after the
    // host has waited for that work (a review: a synchronous allocation got
    // memory a copy on another stream still read).
    AllocationAttributes attr;
    attr.host_ready = allocator_->HasStreamOps();
    return Checked(allocator_->AllocateRaw(alignment, bytes, attr), bytes);
  }
  // `bytes` and `alignment` are not needed (the allocator knows the chunk).
  void deallocate(
      void* ptr, size_t /*bytes*/,
      size_t /*alignment*/ = cuda::mr::default_cuda_malloc_alignment) noexcept {
    allocator_->DeallocateRaw(ptr);
  }

  // --- CCCL 3.0: cuda::mr::async_resource ----------------------------------

  // Memory safe for `stream` (see the header comment).
  void* allocate_async(size_t bytes, size_t alignment,
                       cuda::stream_ref stream) {
    if (!allocator_->HasStreamOps()) return allocate(bytes, alignment);
    if (!Serves(*allocator_)) return allocate(bytes, alignment);  // logs
    // cudaStreamPerThread names another stream on each thread: memory for
    // it is ready for any stream (see the header comment).
    if (stream.get() == cudaStreamPerThread) return allocate(bytes, alignment);
    AllocationAttributes attr;
    attr.stream = Canonical(stream);
    return Checked(allocator_->AllocateRaw(alignment, bytes, attr), bytes);
  }
  void* allocate_async(size_t bytes, cuda::stream_ref stream) {
    return allocate_async(bytes, cuda::mr::default_cuda_malloc_alignment,
                          stream);
  }
  // Frees in `stream`'s order, or synchronizes `stream` first when the
  // allocator has no events (see the header comment).
  void deallocate_async(void* ptr, size_t bytes, size_t alignment,
                        cuda::stream_ref stream) noexcept {
    if (ptr == nullptr) return;
    // cudaStreamPerThread: this thread's stream, which no event recorded
    // later on the same handle could name from another thread (a review:
    // one thread's per-thread stream reused another's memory with no wait):
    // synchronized now, as without events.
    if (allocator_->HasStreamOps() && stream.get() != cudaStreamPerThread) {
      // A foreign pointer is counted by the allocator (and logged here).
      const absl::Status s =
          allocator_->DeallocateOnStream(ptr, Canonical(stream));
      if (!s.ok()) {
        LogQuietly([&] {
          return std::string("bfc::BasicCudaResource: ") +
                 std::string(s.message());
        });
      }
      return;
    }
    const absl::Status synced =
        CudaStreamSynchronize(static_cast<void*>(stream.get()));
    if (!synced.ok()) {
      LogQuietly([&] {
        return std::string("bfc::BasicCudaResource: ") +
               std::string(synced.message()) + "; not returning " +
               std::to_string(bytes) + " bytes to '" + allocator_->Name() +
               "' while the stream may still use them";
      });
      return;
    }
    deallocate(ptr, bytes, alignment);
  }
  void deallocate_async(void* ptr, size_t bytes,
                        cuda::stream_ref stream) noexcept {
    deallocate_async(ptr, bytes, cuda::mr::default_cuda_malloc_alignment,
                     stream);
  }

  // --- newer CCCL spellings (synchronous_resource / stream-first resource) --

  void* allocate_sync(
      size_t bytes,
      size_t alignment = cuda::mr::default_cuda_malloc_alignment) {
    return allocate(bytes, alignment);
  }
  void deallocate_sync(
      void* ptr, size_t bytes,
      size_t alignment = cuda::mr::default_cuda_malloc_alignment) noexcept {
    deallocate(ptr, bytes, alignment);
  }
  void* allocate(cuda::stream_ref stream, size_t bytes,
                 size_t alignment = cuda::mr::default_cuda_malloc_alignment) {
    return allocate_async(bytes, alignment, stream);
  }
  void deallocate(
      cuda::stream_ref stream, void* ptr, size_t bytes,
      size_t alignment = cuda::mr::default_cuda_malloc_alignment) noexcept {
    deallocate_async(ptr, bytes, alignment, stream);
  }

  // --- equality and properties ---------------------------------------------

  // The allocator's name for `stream`: cudaStreamLegacy is the legacy
  // default stream, which the driver calls (and kImplicitStream) name 0.
  static StreamId Canonical(cuda::stream_ref stream) {
    return stream.get() == cudaStreamLegacy
               ? kImplicitStream
               : static_cast<StreamId>(stream.get());
  }

  friend bool operator==(const BasicCudaResource& a,
                         const BasicCudaResource& b) noexcept {
    return a.allocator_.get() == b.allocator_.get();
  }
  friend bool operator!=(const BasicCudaResource& a,
                         const BasicCudaResource& b) noexcept {
    return !(a == b);
  }

  friend void get_property(const BasicCudaResource&,
                           cuda::mr::device_accessible) noexcept {}
  template <bool kHost = kHostAccessible, std::enable_if_t<kHost, int> = 0>
  friend void get_property(const BasicCudaResource&,
                           cuda::mr::host_accessible) noexcept {}

 private:
  // Logs the message `make` builds, at error severity. Building it can
  // throw std::bad_alloc when the host is out of memory; that message is
  // dropped, so that nothing leaves the noexcept calls above (a review).
  template <typename F>
  static void LogQuietly(F&& make) noexcept {
    try {
      Log(LogSeverity::kError, make());
    } catch (...) {
    }
  }

  // `p`, or std::bad_alloc for a failed request under OnFailure::kThrow.
  void* Checked(void* p, size_t bytes) const {
    if (p == nullptr && bytes != 0 && on_failure_ == OnFailure::kThrow) {
      throw std::bad_alloc();
    }
    return p;
  }

  std::shared_ptr<Allocator> allocator_;
  OnFailure on_failure_ = OnFailure::kReturnNull;
};

using CudaDeviceResource = BasicCudaResource<false>;
using CudaPinnedResource = BasicCudaResource<true>;

}  // namespace bfc

#endif  // BFC_CUDA_RESOURCE_H_
