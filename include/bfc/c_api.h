/* File: bfc/c_api.h
 * -----------------------------------------------------------------------------
 *
 * The C ABI of libbfc_alloc.so: a BFC allocator per device behind plain C
 * functions, so that frameworks that take an allocator as function pointers
 * can use bfc without linking C++. Usable from C, C++ and Python's ctypes;
 * needs no CUDA header.
 *
 *   PyTorch  torch.cuda.memory.CUDAPluggableAllocator(
 *                path, "bfc_malloc_or_throw", "bfc_free")
 *   CuPy     cupy.cuda.memory.CFunctionAllocator(0, bfc_cupy_malloc,
 *                                                bfc_cupy_free, owner)
 *
 * The model:
 *
 *   * One bfc::Allocator per device ordinal (0 <= device < BFC_MAX_DEVICES),
 *     created on the first call that names the device and never destroyed
 *     (frameworks free tensors during interpreter shutdown, after static
 *     destructors would have run; the process exit reclaims the memory).
 *   * Configuration is read once, from the environment variable
 *     BFC_ALLOC_CONF, on the first call of any function below:
 *
 *       BFC_ALLOC_CONF="backend:cuda,allow_growth:true,memory_limit:8GiB"
 *
 *     Comma-separated key:value pairs, each key at most once:
 *       preset                  tf (default) | low_footprint: a bundle of the
 *                               growth options below (bfc/allocator_options.h
 *                               lists it), applied first so that keys given
 *                               beside it win
 *       backend                 cuda (default; also "native") | host | virtual
 *                               | sim-cudamalloc | vmm (CUDA virtual memory:
 *                               one growing address range of 2 MiB pages,
 *                               PyTorch's expandable segments)
 *       allow_growth            true | false            (default true)
 *       allow_retry_on_failure  true | false            (default true)
 *       garbage_collection      true | false            (default false)
 *       abort_on_invalid_input  true | false            (default false)
 *       fragmentation_fraction  a number in [0, 1]      (default 0)
 *       retry_timeout           a duration: 10s, 500ms  (default 10s)
 *       max_oom_logs            an integer >= 0         (default 10)
 *       record_allocation_sites true | false            (default false)
 *       growth_policy           doubling | same_as_requested | fixed_step
 *                                                       (default doubling)
 *       initial_region_bytes    bytes                   (default 2MiB)
 *       max_growth_step_bytes   bytes, 0: no cap        (default 0)
 *       min_growth_step_bytes   bytes, 0: no floor      (default 0)
 *       min_growth_step_max_request_bytes bytes, 0: the floor applies to
 *                               every request           (default 0)
 *       release_before_extend   true | false            (default false)
 *       huge_allocation_bytes   bytes, 0: off           (default 0)
 *       min_split_remainder_bytes bytes, 0: TF's rule only (default 0)
 *       max_split_bytes         bytes, 0: off           (default 0)
 *       grow_below_peak_ratio   an integer >= 0, 0: off (default 0)
 *                               a region of the request's own rather than
 *                               a free chunk this many times larger, while
 *                               the pool stays within its peak (regions
 *                               that never merge: cuda, sim-cudamalloc)
 *       pool_release_threshold  a fraction of the limit in [0, 1], 0: off
 *                                                       (default 0)
 *       extend_by_missing_tail  true | false            (default false)
 *       release_partial_regions true | false            (default false)
 *                               backend:vmm: releases (empty_cache included)
 *                               also unmap the free pages inside regions
 *       reuse_follow_dependencies true | false          (default true)
 *       reuse_allow_opportunistic true | false          (default true)
 *       reuse_allow_internal_dependencies true | false  (default true)
 *                               stream-ordered reuse across streams
 *                               (backend:cuda; CUDA's cudaMemPoolReuse*
 *                               attributes of the same meaning)
 *       memory_limit            bytes, with an optional unit: B, KB, KiB, MB,
 *                               MiB, GB, GiB, TB, TiB, PB, PiB (1000- or
 *                               1024-based)
 *       memory_fraction         a number in (0, 1]: that fraction of the
 *                               device's memory
 *     Booleans are true/false or 1/0, in any case (PyTorch writes True).
 *     PyTorch's own keys: max_split_size_mb:N (an integer above 20, as in
 *     PyTorch) sets max_split_bytes to N MiB; garbage_collection_threshold:F
 *     (in (0, 1)) sets pool_release_threshold; giving both spellings of one
 *     option is an error. expandable_segments:True is backend:vmm
 *     (expandable_segments:False, PyTorch's default, changes nothing; either
 *     contradicting a backend key is an error). roundup_power2_divisions,
 *     pinned_* and release_lock_on_cudamalloc have no bfc meaning yet: each
 *     is ignored with what to use instead; backend:native is backend:cuda, and
 * so is backend:cudaMallocAsync, with a message (bfc is the allocator once it
 *     is loaded, not CUDA's pool).
 *     memory_limit and memory_fraction exclude each other. Without either the
 *     limit is: cuda, the device's free memory when its allocator is created
 *     (cuMemGetInfo); host, the machine's physical memory; virtual, 64 GiB.
 *     The backends:
 *       cuda     device memory (cuMemAlloc). Without a usable GPU, or in a
 *                library built without CUDA, every allocation fails with a
 *                message that says why.
 *       host     pageable host memory: usable (and testable) without a GPU.
 *       virtual  reserved, never-committed address space. The pointers MUST
 *                NOT be dereferenced; for replays and tests of the bookkeeping.
 *                A limit the kernel will not reserve (more than the address
 *                space) fails every allocation at once, saying so.
 *       sim-cudamalloc  the same, but regions are never adjacent (so never
 *                merge), as cudaMalloc's are: for footprint measurements.
 *     A backend that can never hand out memory fails each call at once with
 *     the cause, never after a retry wait as "out of memory".
 *   * A key bfc does not know (a typo, a PyTorch setting above) is one
 *     message on stderr at first use, naming the key and the accepted key it
 *     is nearest to, and is ignored: the rest of the configuration applies
 *     and allocations work (bfc_config_warnings() returns the messages).
 *   * A known key with a value bfc cannot use (a bad number, a limit of 0,
 *     both memory_limit and memory_fraction, a key given twice, an entry
 *     without ':') is never guessed at -- running without the limit the user
 *     asked for could take a GPU from its neighbours: one message naming the
 *     key and the accepted values goes to stderr (once), bfc_last_error()
 *     returns it after every call that fails because of it, and every
 *     allocation fails (returns NULL).
 *   * Streams (backend:cuda): stream-ordered, as cudaMallocAsync. Memory
 *     freed on stream S (bfc_free's `stream`) is handed out again at once to
 *     S; to another stream only when the free has completed on the device,
 *     or after the allocator makes that stream wait for it
 *     (cuStreamWaitEvent; no host block) -- never while S's work may still
 *     use it. bfc_record_stream(ptr, device, T) is PyTorch's
 *     Tensor.record_stream: the memory also waits for T's work. The
 *     reuse_* keys choose which of CUDA's three reuse rules apply (all, by
 *     default). cudaStreamLegacy is the legacy default stream, as NULL is.
 *     cudaStreamPerThread names a different stream on each thread, which no
 *     event can tell apart: a free on it synchronizes the calling thread's
 *     stream first (if that fails the memory is not returned), its
 *     allocations are ready for any stream, and bfc_record_stream refuses
 *     it. Host and virtual backends are not stream-ordered: their streams
 *     are ignored. CuPy's C hook passes no stream (the legacy default stream
 *     is assumed, and freed memory is reused at once: safe only while CuPy's
 *     kernels run on the default stream).
 *
 * Errors: functions never abort (unless abort_on_invalid_input) and never
 * throw. A failing call returns NULL / -1 / 0 as documented and sets a
 * thread-local message, read with bfc_last_error(). Successful calls leave the
 * message alone (like errno).
 *
 * abort_on_invalid_input:true (for debugging a caller): an invalid free (a
 * pointer this library did not hand out, a double free, a device never used
 * or out of range) or an invalid request (a size whose rounding overflows, a
 * device out of range) prints the message to stderr and calls abort()
 * instead of returning. Size 0, NULL, out of memory, an unusable backend and
 * a malformed BFC_ALLOC_CONF are not invalid input and never abort.
 *
 * Thread safety: every function is thread-safe, except
 * bfc_reset_for_testing().
 */
#ifndef BFC_C_API_H_
#define BFC_C_API_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define BFC_C_API __attribute__((visibility("default")))
#else
#define BFC_C_API
#endif

/* Devices 0 .. BFC_MAX_DEVICES - 1 are accepted. */
#define BFC_MAX_DEVICES 64

/* The CUDA runtime's own stream type is `struct CUstream_st*`; naming the same
 * incomplete struct makes bfc_stream_t the very same type as cudaStream_t (C
 * and C++), so the header needs no CUDA include and the ABI is identical. */
struct CUstream_st;
typedef struct CUstream_st* bfc_stream_t;

/* bfc::AllocatorStats as plain C. Sizes in bytes. A field that the C++ stats
 * leave unset (std::nullopt) is -1. */
typedef struct bfc_stats {
  int64_t num_allocs;
  int64_t bytes_in_use;
  int64_t peak_bytes_in_use;
  int64_t largest_alloc_size;
  int64_t bytes_limit;
  int64_t bytes_reserved;
  int64_t peak_bytes_reserved;
  int64_t bytes_reservable_limit;
  int64_t largest_free_block_bytes;
  int64_t pool_bytes;
  int64_t peak_pool_bytes;
  int64_t num_invalid_frees;
  int64_t num_invalid_requests;
  int64_t num_ooms;
  int64_t num_extends;
  int64_t num_regions_released;
  int64_t num_sub_allocator_rejects;
  int64_t num_retries;
  int64_t bytes_requested_in_use;
  double fragmentation; /* (free - largest free chunk) / free, in [0, 1] */
} bfc_stats;

/* --- PyTorch: CUDAPluggableAllocator ------------------------------------ */

/* `size` bytes on `device`, aligned to 256, or NULL (out of memory, bad
 * device, bad configuration, no GPU: see bfc_last_error()). size 0 returns
 * NULL without an error. */
BFC_C_API void* bfc_malloc(size_t size, int device, bfc_stream_t stream);
/* bfc_malloc for a C++ caller that turns exceptions into errors, as PyTorch
 * does: a failure throws std::bad_alloc (its what() is the bfc_last_error()
 * message) instead of returning NULL. PyTorch's CUDAPluggableAllocator does
 * not check the pointer its alloc function returns, so with bfc_malloc an
 * out-of-memory becomes a tensor at address NULL that faults when used; with
 * this one it is a Python exception naming the failure. The only function
 * here that throws; never call it from C. size 0 returns NULL. */
BFC_C_API void* bfc_malloc_or_throw(size_t size, int device,
                                    bfc_stream_t stream);
/* Frees `ptr` from bfc_malloc on `device`, in `stream`'s order (the stream
 * whose work used it last; see "Streams"). `size` is ignored.
 * NULL is a no-op. A pointer the device's allocator did not hand out is
 * reported (bfc_last_error(), the allocator's num_invalid_frees) and ignored.
 */
BFC_C_API void bfc_free(void* ptr, size_t size, int device,
                        bfc_stream_t stream);
/* PyTorch's Tensor.record_stream for memory from bfc_malloc: `stream` also
 * uses `ptr`, so once freed it is not handed to another stream before that
 * use is done. Returns 0, or -1 for NULL, a pointer the device's allocator
 * did not hand out, or a device never used (see bfc_last_error()). A no-op on
 * backends that are not stream-ordered. */
BFC_C_API int bfc_record_stream(void* ptr, int device, bfc_stream_t stream);
/* Call before destroying `stream` (cudaStreamDestroy) that memory was freed
 * on or recorded for: the device's allocator records one last event on it
 * and never names it to the driver again (a later stream that gets the same
 * handle is a new stream). Without it, memory freed on a destroyed stream
 * can never be shown safe: it is kept from other streams and from
 * bfc_empty_cache for good. Returns 0 (also for a device with no allocator
 * yet, and on backends that are not stream-ordered), or -1 when the event
 * cannot be recorded or kept (see bfc_last_error()). Allocator::ForgetStream
 * in C++. */
BFC_C_API int bfc_forget_stream(int device, bfc_stream_t stream);
/* Releases the free regions of every device created so far (and, with
 * release_partial_regions over backend:vmm, the free pages inside the
 * others); the signature of PyTorch's (C++)
 * CUDAPluggableAllocator::set_reset_fn, which empty_cache() calls. */
BFC_C_API void bfc_empty_cache_all(void);

/* --- CuPy: CFunctionAllocator ------------------------------------------- */

/* CuPy's `void*(*)(void* param, size_t size, int device)` and
 * `void(*)(void* param, void* ptr, int device)`. `param` is ignored (pass 0).
 * Same behaviour as bfc_malloc / bfc_free. */
BFC_C_API void* bfc_cupy_malloc(void* param, size_t size, int device);
BFC_C_API void bfc_cupy_free(void* param, void* ptr, int device);

/* --- Introspection and control ------------------------------------------ */

/* Gives the device's fully free regions back to the backend (PyTorch's
 * empty_cache); with release_partial_regions over backend:vmm, also the free
 * pages inside the other regions. Returns the bytes released; 0 when none, or
 * on failure (bad device, allocator not usable; see bfc_last_error()). A device
 * not used yet releases 0 without creating its allocator. */
BFC_C_API size_t bfc_empty_cache(int device);
/* Fills *out with the device's stats. Returns 0, or -1 (out untouched) for a
 * NULL `out`, a bad device, or an allocator that cannot be created. Creates
 * the device's allocator if needed. */
BFC_C_API int bfc_get_stats(int device, bfc_stats* out);
/* bfc::Allocator::ResetPeakStats(): the peaks (bytes in use, pool bytes)
 * restart from the current values; counters are kept (PyTorch's
 * reset_peak_memory_stats). Returns 0 or -1. */
BFC_C_API int bfc_reset_peak_stats(int device);

/* --- Accounts (bfc/account.h) --------------------------------------------- */

/* An account: a named budget over one device's allocator, in a tree (paths
 * like "root/pool1"), with a limit on its subtree and a reservation taken
 * from its parent. A framework makes one per memory pool and sets it current
 * around the pool's use (PyTorch's `with torch.cuda.use_mem_pool(pool)`):
 * allocations on that thread and device are then charged to it, and a
 * limit it passes fails the allocation (NULL, with bfc_last_error naming the
 * account) before the device memory is touched. Frees credit the account an
 * allocation was charged to, whichever thread frees it. */
typedef struct bfc_account bfc_account;

/* An account's stats; -1 for "no limit" in limit_bytes and headroom_bytes. */
typedef struct bfc_account_stats {
  int64_t bytes_in_use; /* the subtree's charges */
  int64_t own_bytes;    /* its own allocations' */
  int64_t peak_bytes_in_use;
  int64_t allocations;
  int64_t frees;
  int64_t failures; /* allocations a limit refused */
  int64_t live_allocations;
  int64_t limit_bytes;
  int64_t reservation_bytes;
  int64_t headroom_bytes; /* what one more allocation could charge now */
} bfc_account_stats;

/* A root account on `device` (parent NULL; the device's allocator is created
 * if needed) or a child of `parent` (on the parent's device; `device` must
 * match). limit_bytes < 0: no limit. reservation_bytes: quota taken from the
 * parent now (a root's must be 0). NULL on failure (a bad name, a taken
 * name, a reservation the parent cannot give: bfc_last_error()). */
BFC_C_API bfc_account* bfc_account_create(int device, bfc_account* parent,
                                          const char* name, int64_t limit_bytes,
                                          int64_t reservation_bytes);
/* Makes `account` (NULL: none) the one this thread's bfc_malloc and
 * bfc_cupy_malloc charge on its device (other devices: uncharged). Returns
 * the previous one. The thread holds the account until it sets another (or
 * exits): destroyed meanwhile by another thread, the account is closed and
 * this thread's allocations fail ("account ... is closed") instead of
 * charging freed memory. */
BFC_C_API bfc_account* bfc_account_set_current(bfc_account* account);
/* Fills *out. Returns 0, or -1 for a NULL argument. */
BFC_C_API int bfc_account_get_stats(const bfc_account* account,
                                    bfc_account_stats* out);
/* Closes the account: 0 when nothing is charged to it any more; 1 when
 * allocations still are (leaks: listed in bfc_last_error(); never freed,
 * and their frees still credit the parents); -1 when children are open (it
 * stays open) or for NULL. */
BFC_C_API int bfc_account_close(bfc_account* account);
/* Closes (if needed) and frees the handle; children keep their parents'
 * state alive. No longer current on this thread (a thread it is current on
 * keeps it, closed, until it sets another). NULL is a no-op. */
BFC_C_API void bfc_account_destroy(bfc_account* account);

/* --- Memory history and PyTorch memory snapshots ------------------------- */

/* Starts recording the device's allocations, frees, regions taken, extended
 * or given back, and failed requests, keeping the newest `max_entries`
 * (PyTorch's torch.cuda.memory._record_memory_history(max_entries=...), which
 * does not reach a pluggable allocator); 0 stops and drops them. Starting
 * again clears the history. Returns 0, or -1 (bad device, allocator not
 * usable). Creates the device's allocator if needed. */
BFC_C_API int bfc_record_memory_history(int device, size_t max_entries);
/* Writes a PyTorch memory snapshot of the device to `path`: the pickle
 * torch.cuda.memory._dump_snapshot writes, which PyTorch's memory viewer
 * (pytorch.org/memory_viz) opens -- the regions and chunks now (with their
 * allocation sites when record_allocation_sites is on) and the recorded
 * history (bfc/pytorch_snapshot.h has the mapping). Written to a
 * temporary file beside `path` and renamed into place, so a failure leaves
 * any earlier file whole, with its permissions (a new file gets 0666 less
 * the umask); a symlink is written through (its target is replaced, not the
 * link), and a device, FIFO or pipe (/dev/stdout, /dev/fd/N) is written to
 * in place, never replaced (a FIFO without a reader fails at once; a slow
 * reader is waited for). Returns 0, or -1
 * (NULL or empty path, bad device, a device never used, a file that cannot be
 * written; see bfc_last_error()).
 */
BFC_C_API int bfc_dump_snapshot(int device, const char* path);

/* The message of the last failure on the calling thread, or "" if none. The
 * pointer stays valid until the thread's next failing call. */
BFC_C_API const char* bfc_last_error(void);
/* What BFC_ALLOC_CONF gave for nothing: one line per unknown key (with the
 * key it was likely meant to be) or PyTorch setting bfc does not take (with
 * what to use instead); "" when none. Reads BFC_ALLOC_CONF if no call has
 * yet. The same lines went to stderr once, at first use. The pointer stays
 * valid until bfc_reset_for_testing(). */
BFC_C_API const char* bfc_config_warnings(void);
/* The library version, "MAJOR.MINOR.PATCH". */
BFC_C_API const char* bfc_version(void);

/* TEST ONLY. Destroys every device's allocator (all memory from them becomes
 * invalid) and forgets the configuration, so that the next call reads
 * BFC_ALLOC_CONF again. Must not run concurrently with any other call. An
 * allocator with an account still alive (a handle not destroyed, or current
 * on some thread) is not destroyed but set aside for good, with a message on
 * stderr: its accounts stay usable until destroyed. No account is current on
 * the calling thread afterwards. */
BFC_C_API void bfc_reset_for_testing(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* BFC_C_API_H_ */
