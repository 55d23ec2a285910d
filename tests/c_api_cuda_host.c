/* File: tests/c_api_cuda_host.c
 * -----------------------------------------------------------------------------
 *
 * A C host that loads libbfc_alloc.so with dlopen and calls it exactly as
 * PyTorch's CUDAPluggableAllocator (malloc(size, device, stream) /
 * free(ptr, size, device, stream), empty_cache through the reset function)
 * and CuPy's CFunctionAllocator (malloc(param, size, device) /
 * free(param, ptr, device)) do, with backend:cuda, on two devices and several
 * streams. In CI the driver is the fake (BFC_CUDA_DRIVER_LIBRARY,
 * FAKE_CUDA_DEVICE_COUNT=2; CTest c_api_cuda_host, label cuda): what the .so
 * asked of the driver is checked through the fake's control calls. Against a
 * real driver those checks are left out.
 *
 *   c_api_cuda_host PATH_TO_LIBBFC_ALLOC_SO
 *
 * Exit status 0 when every check holds; otherwise each failed check is printed.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bfc/c_api.h"

static int failures = 0;

#define CHECK(cond, ...)                                                       \
  do {                                                                         \
    if (!(cond)) {                                                             \
      ++failures;                                                              \
      fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                            \
      fprintf(stderr, "\n");                                                   \
    }                                                                          \
  } while (0)

typedef void* (*torch_malloc_fn)(size_t, int, bfc_stream_t);
typedef void (*torch_free_fn)(void*, size_t, int, bfc_stream_t);
typedef void (*reset_fn)(void);
typedef void* (*cupy_malloc_fn)(void*, size_t, int);
typedef void (*cupy_free_fn)(void*, void*, int);
typedef int (*stats_fn)(int, bfc_stats*);
typedef const char* (*error_fn)(void);
typedef size_t (*bytes_fn)(int);
typedef int (*count_fn)(int);
typedef int (*create_stream_fn)(bfc_stream_t*, unsigned);
typedef int (*query_stream_fn)(bfc_stream_t);
typedef void (*hold_fn)(void*);
typedef void* (*stream_of_fn)(void*);
typedef long (*call_count_fn)(const char*);
typedef int (*record_stream_fn)(void*, int, bfc_stream_t);
typedef int (*forget_stream_fn)(int, bfc_stream_t);
typedef int (*destroy_stream_fn)(bfc_stream_t);
typedef void (*fail_call_fn)(const char*, int, int);
typedef void (*void_fn)(void);

/* Releases a stream the fake holds after 100 ms, saying so first. */
typedef int (*ctx_fn)(void*);
typedef int (*ctx_out_fn)(void**);
struct releaser {
  void (*release)(void*);
  int released;
  void* stream; /* as fake_cuda_stream_of names it */
};
static void* release_later(void* arg) {
  struct releaser* r = (struct releaser*)arg;
  const struct timespec wait = {0, 100 * 1000 * 1000};
  nanosleep(&wait, NULL);
  __atomic_store_n(&r->released, 1, __ATOMIC_SEQ_CST);
  r->release(r->stream);
  return NULL;
}

/* Frees p on `stream` while `held` is held, a thread releasing it 100 ms
 * later; 1 when the free returned only after the release. */
static int free_waits_for_release(torch_free_fn torch_free,
                                  void (*release)(void*), void* held, void* p,
                                  size_t size, int device,
                                  bfc_stream_t stream) {
  struct releaser r = {release, 0, held};
  pthread_t t;
  if (pthread_create(&t, NULL, release_later, &r) != 0) return 0;
  torch_free(p, size, device, stream);
  const int waited = __atomic_load_n(&r.released, __ATOMIC_SEQ_CST) == 1;
  pthread_join(t, NULL);
  return waited;
}

static void* must_sym(void* lib, const char* name) {
  void* p = dlsym(lib, name);
  if (p == NULL) {
    fprintf(stderr, "missing symbol %s\n", name);
    exit(2);
  }
  return p;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s PATH_TO_LIBBFC_ALLOC_SO\n", argv[0]);
    return 2;
  }
  /* What a user sets before starting python. */
  setenv("BFC_ALLOC_CONF", "backend:cuda,memory_fraction:0.5", 1);
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    fprintf(stderr, "dlopen %s: %s\n", argv[1], dlerror());
    return 2;
  }
  torch_malloc_fn torch_malloc = (torch_malloc_fn)must_sym(lib, "bfc_malloc");
  torch_free_fn torch_free = (torch_free_fn)must_sym(lib, "bfc_free");
  reset_fn empty_cache_all = (reset_fn)must_sym(lib, "bfc_empty_cache_all");
  cupy_malloc_fn cupy_malloc = (cupy_malloc_fn)must_sym(lib, "bfc_cupy_malloc");
  cupy_free_fn cupy_free = (cupy_free_fn)must_sym(lib, "bfc_cupy_free");
  stats_fn get_stats = (stats_fn)must_sym(lib, "bfc_get_stats");
  error_fn last_error = (error_fn)must_sym(lib, "bfc_last_error");

  /* The fake's controls, when the driver is the fake. */
  const char* driver_path = getenv("BFC_CUDA_DRIVER_LIBRARY");
  void* driver = dlopen(driver_path != NULL ? driver_path : "libcuda.so.1",
                        RTLD_NOW | RTLD_LOCAL);
  bytes_fn device_bytes = NULL;
  count_fn live = NULL;
  create_stream_fn create_stream = NULL;
  if (driver != NULL && dlsym(driver, "fake_cuda_is_fake") != NULL) {
    device_bytes = (bytes_fn)dlsym(driver, "fake_cuda_bytes_in_use");
    live = (count_fn)dlsym(driver, "fake_cuda_live_allocations");
  }
  if (driver != NULL) {
    create_stream = (create_stream_fn)dlsym(driver, "cuStreamCreate");
  }

  /* The first call creates device 0's allocator and makes its primary
   * context current on this thread (as the runtime would); streams are
   * created in it, as PyTorch's are. */
  void* warm = torch_malloc(256, 0, NULL);
  CHECK(warm != NULL, "first malloc: %s", last_error());
  torch_free(warm, 256, 0, NULL);
  /* Two devices (the fake has two; a real machine may have fewer). */
  int num_devices = 2;
  typedef int (*device_count_fn)(int*);
  device_count_fn device_count =
      driver != NULL ? (device_count_fn)dlsym(driver, "cuDeviceGetCount")
                     : NULL;
  int visible = 0;
  if (device_count != NULL && device_count(&visible) == 0 && visible < 2) {
    num_devices = visible;
  }
  /* PyTorch: blocks on every device, on the default stream and two others. */
  bfc_stream_t streams[3] = {NULL, NULL, NULL};
  if (create_stream != NULL) {
    CHECK(create_stream(&streams[1], 0) == 0, "cuStreamCreate");
    CHECK(create_stream(&streams[2], 1) == 0, "cuStreamCreate");
  }
  void* blocks[2][3][4];
  for (int device = 0; device < num_devices; ++device) {
    for (int s = 0; s < 3; ++s) {
      for (int i = 0; i < 4; ++i) {
        const size_t size = (size_t)(i + 1) << 20;
        blocks[device][s][i] = torch_malloc(size, device, streams[s]);
        CHECK(blocks[device][s][i] != NULL, "device %d: %s", device,
              last_error());
        CHECK(((uintptr_t)blocks[device][s][i] % 256) == 0, "alignment");
      }
    }
  }
  bfc_stats st;
  for (int device = 0; device < num_devices; ++device) {
    CHECK(get_stats(device, &st) == 0, "stats of device %d", device);
    /* What was asked for; bytes_in_use counts whole chunks (TF's rule of
     * not splitting a chunk under twice the request). */
    CHECK(st.bytes_requested_in_use == 3 * (1 + 2 + 3 + 4) << 20,
          "device %d bytes_requested_in_use %lld", device,
          (long long)st.bytes_requested_in_use);
    CHECK(st.bytes_in_use >= st.bytes_requested_in_use, "in use");
    CHECK(st.bytes_limit > 0, "device %d limit", device);
    if (device_bytes != NULL) {
      /* The pool's regions are what the driver handed out on that device. */
      CHECK((int64_t)device_bytes(device) == st.pool_bytes,
            "device %d: driver holds %zu, pool %lld", device,
            device_bytes(device), (long long)st.pool_bytes);
    }
  }
  for (int device = 0; device < num_devices; ++device) {
    for (int s = 0; s < 3; ++s) {
      for (int i = 0; i < 4; ++i) {
        torch_free(blocks[device][s][i], (size_t)(i + 1) << 20, device,
                   streams[s]);
      }
    }
  }
  /* A pointer of device 0 freed on device 1: reported, nothing crashes. */
  void* p = torch_malloc(4096, 0, NULL);
  CHECK(p != NULL, "%s", last_error());
  if (num_devices > 1) {
    torch_free(p, 4096, 1, NULL);
    CHECK(strlen(last_error()) > 0, "foreign free not reported");
  }
  torch_free(p, 4096, 0, NULL);

  /* CuPy. */
  void* q = cupy_malloc(NULL, 1000, num_devices - 1);
  CHECK(q != NULL, "cupy: %s", last_error());
  cupy_free(NULL, q, num_devices - 1);

  /* Streams, as PyTorch drives them (fake driver only: it holds a stream's
   * work pending). */
  hold_fn hold = NULL, release = NULL;
  call_count_fn call_count = NULL;
  query_stream_fn query = NULL;
  stream_of_fn stream_of = NULL;
  if (driver != NULL && dlsym(driver, "fake_cuda_is_fake") != NULL) {
    stream_of = (stream_of_fn)dlsym(driver, "fake_cuda_stream_of");
    hold = (hold_fn)dlsym(driver, "fake_cuda_hold_stream");
    release = (hold_fn)dlsym(driver, "fake_cuda_release_stream");
    call_count = (call_count_fn)dlsym(driver, "fake_cuda_call_count");
    query = (query_stream_fn)dlsym(driver, "cuStreamQuery");
  }
  record_stream_fn record_stream =
      (record_stream_fn)must_sym(lib, "bfc_record_stream");
  void_fn reset = (void_fn)must_sym(lib, "bfc_reset_for_testing");
  const int kNotReady = 600; /* CUDA_ERROR_NOT_READY */
  if (hold != NULL && create_stream != NULL) {
    /* 1. A block freed on stream 1 while its kernel is pending is never
     * handed to stream 2 unless stream 2 is made to wait for it (then
     * stream 2 cannot finish first). */
    void* a = torch_malloc(8 << 20, 0, streams[1]);
    CHECK(a != NULL, "%s", last_error());
    hold(streams[1]);
    torch_free(a, 8 << 20, 0, streams[1]);
    const long waits = call_count("cuStreamWaitEvent");
    void* b = torch_malloc(8 << 20, 0, streams[2]);
    CHECK(b != NULL, "%s", last_error());
    if (b == a) {
      CHECK(query(streams[2]) == kNotReady,
            "stream 2 got stream 1's pending block without waiting for it");
      CHECK(call_count("cuStreamWaitEvent") == waits + 1, "one wait");
    }
    /* 2. record_stream: stream 2 also uses c; freed on stream 2's behalf's
     * owner (stream 2 is held), the default stream must not take it unless
     * it waits. */
    release(streams[1]);
    void* c = torch_malloc(4 << 20, 0, streams[1]);
    CHECK(c != NULL, "%s", last_error());
    CHECK(record_stream(c, 0, streams[2]) == 0, "%s", last_error());
    hold(streams[2]);
    torch_free(c, 4 << 20, 0, streams[1]);
    void* d = torch_malloc(4 << 20, 0, NULL);
    CHECK(d != NULL, "%s", last_error());
    if (d == c) {
      CHECK(query(NULL) == kNotReady,
            "the default stream got memory stream 2 still uses, no wait");
    }
    CHECK(record_stream((void*)&failures, 0, streams[2]) == -1,
          "record_stream of a foreign pointer");
    release(streams[2]);
    torch_free(b, 8 << 20, 0, streams[2]);
    torch_free(d, 4 << 20, 0, NULL);

    /* 3. The reuse keys change what a caller sees. Each case: a block freed
     * on stream 1 with its work held, then 8 MiB blocks on stream 2. */
    const char* confs[4] = {
        "backend:cuda,memory_fraction:0.5",
        "backend:cuda,memory_fraction:0.5,"
        "reuse_allow_internal_dependencies:false",
        "backend:cuda,memory_fraction:0.5,"
        "reuse_allow_internal_dependencies:false,"
        "reuse_allow_opportunistic:false",
        "backend:cuda,memory_fraction:0.5,reuse_follow_dependencies:false"};
    for (int k = 0; k < 4; ++k) {
      setenv("BFC_ALLOC_CONF", confs[k], 1);
      reset();
      void* w = torch_malloc(256, 0, NULL);
      torch_free(w, 256, 0, NULL);
      void* x = torch_malloc(8 << 20, 0, streams[1]);
      void* x2 = torch_malloc(8 << 20, 0, streams[1]);
      hold(streams[1]);
      torch_free(x, 8 << 20, 0, streams[1]);
      torch_free(x2, 8 << 20, 0, streams[1]);
      const long before = call_count("cuStreamWaitEvent");
      void* y = torch_malloc(8 << 20, 0, streams[2]);
      void* y2 = torch_malloc(8 << 20, 0, streams[2]);
      const long inserted = call_count("cuStreamWaitEvent") - before;
      const int reused = (y == x || y == x2) + (y2 == x || y2 == x2);
      release(streams[1]);
      void* z[8];
      int reused_after = 0;
      for (int i = 0; i < 8; ++i) {
        z[i] = torch_malloc(8 << 20, 0, streams[2]);
        reused_after += z[i] == x || z[i] == x2;
      }
      switch (k) {
        case 0: /* all rules: both taken after one wait covering both */
          CHECK(reused == 2 && inserted == 1, "default: reused %d waits %ld",
                reused, inserted);
          break;
        case 1: /* no waits: nothing pending taken; completed work is */
          CHECK(reused == 0 && inserted == 0 && reused_after > 0,
                "internal:false: reused %d waits %ld after %d", reused,
                inserted, reused_after);
          break;
        case 2: /* no waits, no polling: only the out-of-memory path */
          CHECK(reused == 0 && reused_after == 0,
                "opportunistic:false: reused %d after %d", reused,
                reused_after);
          break;
        case 3: /* a wait per block: the first wait is not followed */
          CHECK(reused == 2 && inserted == 2,
                "follow_dependencies:false: reused %d waits %ld", reused,
                inserted);
          break;
      }
      torch_free(y, 8 << 20, 0, streams[2]);
      torch_free(y2, 8 << 20, 0, streams[2]);
      for (int i = 0; i < 8; ++i) torch_free(z[i], 8 << 20, 0, streams[2]);
    }

    /* 4. backend:vmm (expandable segments, also spelled
     * expandable_segments:True): one region grows by mapped pages; with
     * release_partial_regions empty_cache unmaps the free pages inside it,
     * without it only whole free regions go. [1 MiB][9 MiB][2 MiB], the
     * middle freed: 4 of its pages go back (the first MiB shares a page). */
    const char* vmm_confs[3] = {
        "backend:vmm,memory_fraction:0.5,preset:low_footprint",
        "expandable_segments:True,memory_fraction:0.5,preset:low_footprint",
        "backend:vmm,memory_fraction:0.5,preset:low_footprint,"
        "release_partial_regions:false"};
    long long vmm_pool[3] = {0, 0, 0};
    for (int k = 0; k < 3; ++k) {
      setenv("BFC_ALLOC_CONF", vmm_confs[k], 1);
      reset();
      void* a1 = torch_malloc(1 << 20, 0, NULL);
      void* b1 = torch_malloc(9 << 20, 0, NULL);
      void* c1 = torch_malloc(2 << 20, 0, NULL);
      CHECK(a1 != NULL && b1 != NULL && c1 != NULL, "vmm %d: %s", k,
            last_error());
      CHECK((char*)b1 == (char*)a1 + (1 << 20) &&
                (char*)c1 == (char*)b1 + (9 << 20),
            "vmm %d: regions are not contiguous: %p %p %p", k, a1, b1, c1);
      torch_free(b1, 9 << 20, 0, NULL);
      empty_cache_all();
      CHECK(get_stats(0, &st) == 0, "stats");
      vmm_pool[k] = (long long)st.pool_bytes;
      torch_free(a1, 1 << 20, 0, NULL);
      torch_free(c1, 2 << 20, 0, NULL);
      empty_cache_all();
    }
    CHECK(vmm_pool[0] == (4 << 20) && vmm_pool[1] == (4 << 20) &&
              vmm_pool[2] == (12 << 20),
          "vmm pools after empty_cache %lld %lld %lld", vmm_pool[0],
          vmm_pool[1], vmm_pool[2]);
    setenv("BFC_ALLOC_CONF", "backend:cuda,memory_fraction:0.5", 1);
    reset();

    /* 5. Memory freed on a stream that is then destroyed (free, then
     * cudaStreamDestroy: the right order). bfc_forget_stream before the
     * destroy records the stream's last event while it exists; without it
     * the memory could never be shown safe and empty_cache kept it for good
     * (a review). */
    forget_stream_fn forget =
        (forget_stream_fn)must_sym(lib, "bfc_forget_stream");
    destroy_stream_fn destroy =
        (destroy_stream_fn)dlsym(driver, "cuStreamDestroy_v2");
    CHECK(destroy != NULL, "cuStreamDestroy_v2");
    if (destroy != NULL) {
      void* w5 = torch_malloc(256, 0, NULL);
      bfc_stream_t s5 = NULL;
      CHECK(create_stream(&s5, 0) == 0, "cuStreamCreate");
      void* m5 = torch_malloc(1 << 20, 0, s5);
      CHECK(m5 != NULL, "%s", last_error());
      hold(s5); /* its kernel still runs */
      torch_free(m5, 1 << 20, 0, s5);
      CHECK(forget(0, s5) == 0, "bfc_forget_stream: %s", last_error());
      release(s5);
      CHECK(destroy(s5) == 0, "cuStreamDestroy");
      torch_free(w5, 256, 0, NULL);
      empty_cache_all();
      CHECK(get_stats(0, &st) == 0, "stats");
      CHECK(st.pool_bytes == 0, "a forgotten stream's memory is pinned: %lld",
            (long long)st.pool_bytes);
      /* A device with no allocator, and a backend without streams: 0. */
      CHECK(forget(1, s5) == 0 || num_devices < 2, "%s", last_error());
    }

    /* 6. A driver call that fails while a device's allocator is set up
     * (cuMemGetInfo, out of memory for a moment) fails that call only; the
     * next one sets the device up (it used to stay failed for good). */
    fail_call_fn fail_call = (fail_call_fn)dlsym(driver, "fake_cuda_fail_call");
    reset();
    if (fail_call != NULL) {
      fail_call("cuMemGetInfo", 1, 2 /* CUDA_ERROR_OUT_OF_MEMORY */);
      void* f1 = torch_malloc(4096, 0, NULL);
      CHECK(f1 == NULL, "the injected failure did not fail the first call");
      CHECK(strstr(last_error(), "cuMemGetInfo") != NULL, "message: %s",
            last_error());
      void* f2 = torch_malloc(4096, 0, NULL);
      CHECK(f2 != NULL, "the device stayed failed: %s", last_error());
      torch_free(f2, 4096, 0, NULL);
    }
  }

  /* cudaStreamPerThread (0x2) names a different stream on each thread, so
   * no event recorded under that handle can order one thread's work with
   * another's (a review: memory one thread freed on it went to another
   * thread's at once). A free on it synchronizes the calling thread's
   * stream first; its memory then serves any stream, and record_stream
   * refuses the handle. */
  if (hold != NULL) {
    bfc_stream_t per_thread = (bfc_stream_t)(uintptr_t)0x2;
    void* p = torch_malloc(1 << 20, 0, per_thread);
    CHECK(p != NULL, "per-thread malloc: %s", last_error());
    CHECK(record_stream(p, 0, per_thread) == -1, "record_stream took 0x2");
    CHECK(strstr(last_error(), "cudaStreamPerThread") != NULL, "message: %s",
          last_error());
    void* mine = stream_of(per_thread); /* this thread's own stream */
    hold(mine);                         /* this thread's kernel still uses p */
    CHECK(free_waits_for_release(torch_free, release, mine, p, 1 << 20, 0,
                                 per_thread),
          "the free returned while the thread's stream still used the memory");
    void* q = torch_malloc(1 << 20, 0, per_thread);
    CHECK(q != NULL, "per-thread malloc: %s", last_error());
    torch_free(q, 1 << 20, 0, per_thread);
  }

  /* The same free of device 1's memory under device 0's context, as
   * PyTorch frees under any device guard: device 1's stream is the one
   * waited for (it synchronized the current context's). */
  typedef int (*retain_fn)(void**, int);
  retain_fn retain = driver != NULL
                         ? (retain_fn)dlsym(driver, "cuDevicePrimaryCtxRetain")
                         : NULL;
  ctx_fn push =
      driver != NULL ? (ctx_fn)dlsym(driver, "cuCtxPushCurrent_v2") : NULL;
  ctx_out_fn pop =
      driver != NULL ? (ctx_out_fn)dlsym(driver, "cuCtxPopCurrent_v2") : NULL;
  if (hold != NULL && num_devices >= 2 && retain != NULL && push != NULL &&
      pop != NULL) {
    bfc_stream_t per_thread = (bfc_stream_t)(uintptr_t)0x2;
    void *zero = NULL, *one = NULL, *popped = NULL;
    CHECK(retain(&zero, 0) == 0 && retain(&one, 1) == 0, "contexts");
    void* p = torch_malloc(1 << 20, 1, per_thread);
    CHECK(p != NULL, "per-thread malloc on device 1: %s", last_error());
    CHECK(push(one) == 0, "push");
    void* mine = stream_of(per_thread); /* this thread's, on device 1 */
    hold(mine);                         /* device 1's kernel still uses p */
    CHECK(pop(&popped) == 0, "pop");
    CHECK(push(zero) == 0, "push"); /* the free comes under device 0 */
    CHECK(free_waits_for_release(torch_free, release, mine, p, 1 << 20, 1,
                                 per_thread),
          "the free returned while device 1's stream still used the memory");
    CHECK(pop(&popped) == 0 && popped == zero, "the context stays device 0's");
  }

  /* empty_cache() gives every region back to the driver. */
  empty_cache_all();
  for (int device = 0; device < num_devices; ++device) {
    CHECK(get_stats(device, &st) == 0, "stats");
    CHECK(st.bytes_in_use == 0, "device %d still uses %lld", device,
          (long long)st.bytes_in_use);
    CHECK(st.pool_bytes == 0, "device %d pool %lld after empty_cache", device,
          (long long)st.pool_bytes);
    if (live != NULL) {
      CHECK(live(device) == 0, "device %d: %d blocks left in the driver",
            device, live(device));
    }
  }
  /* A device that does not exist: NULL and a message naming it. */
  CHECK(torch_malloc(4096, 7, NULL) == NULL, "device 7");
  CHECK(strstr(last_error(), "device 7") != NULL, "message: %s", last_error());
  if (failures == 0) printf("c_api_cuda_host: all checks passed\n");
  return failures == 0 ? 0 : 1;
}
