// File: tools/trace_capture/c10_alloc_tracer.c
// An LD_PRELOAD tracer that records PyTorch's tensor-storage allocations as
// an RMM logging CSV for bfc-replay. It interposes posix_memalign and free
// and keeps only the allocations whose caller lies in libc10.so (CPU
// c10::alloc_cpu: every tensor storage) and the frees of exactly those
// pointers, so oneDNN's scratch buffers and the interpreter's own mallocs
// stay out. The driver (capture.py) starts and stops recording and marks
// phases through the exported shim_* functions (ctypes), then has the
// records written out once, after the run: nothing is formatted while the
// model runs.
//
// Build: cc -O2 -fPIC -shared -o libc10_alloc_tracer.so c10_alloc_tracer.c
//        -ldl -lpthread
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

typedef struct {
  uint64_t t_ns;
  uint64_t ptr;
  uint64_t size;
  uint32_t tid;
  uint32_t action;  // 0 allocate, 1 free
} rec_t;

#define MAX_RECS (8u << 20)  // 8M records (lazy mmap, 256 MiB virtual)
#define HBITS 21
#define HSIZE (1u << HBITS)  // tracked-pointer hash set
#define EMPTY 0
#define TOMB 1
#define MAX_PHASES 256
#define MAX_CALLERS 4096

static rec_t *recs;
static uint64_t nrecs;
static uint64_t *hkeys;  // open addressing, linear probing
static uint64_t *hvals;  // size
static uint64_t hlive, hused, hoverflow, rec_overflow, realloc_of_tracked;
static int recording;
static uint64_t t0;

typedef struct {
  char name[64];
  uint64_t first;
  uint64_t t_ns;
} phase_t;
static phase_t phases[MAX_PHASES];
static int nphases;

typedef struct {
  uintptr_t addr;
  int is_c10;
  uint64_t count, bytes, maxsz;
  int fn;
} caller_t;
static caller_t callers[MAX_CALLERS];
static int ncallers, caller_overflow;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static __thread int in_hook __attribute__((tls_model("initial-exec")));

static int (*real_posix_memalign)(void **, size_t, size_t);
static void (*real_free)(void *);
static void *(*real_malloc)(size_t);
static void *(*real_calloc)(size_t, size_t);
static void *(*real_realloc)(void *, size_t);
static void *(*real_aligned_alloc)(size_t, size_t);
static void *(*real_memalign)(size_t, size_t);

// dlsym may itself call calloc/malloc before the real ones are known: those
// come from this static arena and are never freed.
static char boot_buf[65536] __attribute__((aligned(64)));
static size_t boot_off;
static int initializing;

static int is_boot(void *p) {
  return (char *)p >= boot_buf && (char *)p < boot_buf + sizeof boot_buf;
}
static void *boot_alloc(size_t n) {
  size_t off = (boot_off + 63) & ~(size_t)63;
  if (off + n > sizeof boot_buf) return NULL;
  boot_off = off + n;
  return boot_buf + off;  // static storage is zeroed
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

static void *map(size_t n) {
  void *p = mmap(NULL, n, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? NULL : p;
}

static void init(void) {
  static int done;
  if (done) return;
  initializing = 1;
  real_malloc = dlsym(RTLD_NEXT, "malloc");
  real_calloc = dlsym(RTLD_NEXT, "calloc");
  real_realloc = dlsym(RTLD_NEXT, "realloc");
  real_free = dlsym(RTLD_NEXT, "free");
  real_posix_memalign = dlsym(RTLD_NEXT, "posix_memalign");
  real_aligned_alloc = dlsym(RTLD_NEXT, "aligned_alloc");
  real_memalign = dlsym(RTLD_NEXT, "memalign");
  initializing = 0;
  if (!recs) recs = map(sizeof(rec_t) * (size_t)MAX_RECS);
  if (!hkeys) hkeys = map(sizeof(uint64_t) * HSIZE);
  if (!hvals) hvals = map(sizeof(uint64_t) * HSIZE);
  done = 1;
}

__attribute__((constructor)) static void ctor(void) { init(); }

static inline uint32_t hidx(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdull;
  k ^= k >> 33;
  return (uint32_t)k & (HSIZE - 1);
}

// Callers hold `lock`.
static void hset_insert(uint64_t k, uint64_t v) {
  if (hused + 1 > HSIZE * 3 / 4) {
    hoverflow++;
    return;
  }
  uint32_t i = hidx(k), tomb = UINT32_MAX;
  for (;;) {
    uint64_t c = hkeys[i];
    if (c == EMPTY) break;
    if (c == TOMB) {
      if (tomb == UINT32_MAX) tomb = i;
    } else if (c == k) {
      hvals[i] = v;
      return;
    }
    i = (i + 1) & (HSIZE - 1);
  }
  if (tomb != UINT32_MAX)
    i = tomb;
  else
    hused++;
  hkeys[i] = k;
  hvals[i] = v;
  hlive++;
}

// Removes k; 1 with its size in *v when it was tracked.
static int hset_remove(uint64_t k, uint64_t *v) {
  uint32_t i = hidx(k);
  for (;;) {
    uint64_t c = hkeys[i];
    if (c == EMPTY) return 0;
    if (c == k) {
      *v = hvals[i];
      hkeys[i] = TOMB;
      hlive--;
      return 1;
    }
    i = (i + 1) & (HSIZE - 1);
  }
}

static void push(uint32_t action, void *p, uint64_t size) {
  if (nrecs >= MAX_RECS) {
    rec_overflow++;
    return;
  }
  rec_t *r = &recs[nrecs++];
  r->t_ns = now_ns() - t0;
  r->ptr = (uint64_t)(uintptr_t)p;
  r->size = size;
  r->tid = (uint32_t)syscall(SYS_gettid);
  r->action = action;
}

// Whether a caller address lies in libc10.so, cached per address (dladdr
// allocates, so it runs with in_hook set and without the lock).
static caller_t *classify(uintptr_t addr, int fn) {
  pthread_mutex_lock(&lock);
  for (int i = 0; i < ncallers; i++)
    if (callers[i].addr == addr && callers[i].fn == fn) {
      pthread_mutex_unlock(&lock);
      return &callers[i];
    }
  pthread_mutex_unlock(&lock);
  Dl_info di;
  int is_c10 = 0;
  if (dladdr((void *)addr, &di) && di.dli_fname &&
      strstr(di.dli_fname, "libc10.so"))
    is_c10 = 1;
  pthread_mutex_lock(&lock);
  caller_t *c = NULL;
  for (int i = 0; i < ncallers; i++)
    if (callers[i].addr == addr && callers[i].fn == fn) {
      c = &callers[i];
      break;
    }
  if (!c) {
    if (ncallers < MAX_CALLERS) {
      c = &callers[ncallers];
      c->addr = addr;
      c->is_c10 = is_c10;
      c->fn = fn;
      c->count = c->bytes = c->maxsz = 0;
      ncallers++;
    } else
      caller_overflow++;
  }
  pthread_mutex_unlock(&lock);
  return c;
}

// fn: 0 posix_memalign, 1 aligned_alloc, 2 memalign (the aligned entry
// points; callers outside libc10 are only counted, for the info file).
static void on_alloc(void *p, size_t size, uintptr_t caller, int fn) {
  if (!p || !recording) return;
  in_hook = 1;
  caller_t *c = classify(caller, fn);
  int is_c10 = c ? c->is_c10 : 0;
  pthread_mutex_lock(&lock);
  if (c) {
    c->count++;
    c->bytes += size;
    if (size > c->maxsz) c->maxsz = size;
  }
  if (is_c10 && recording) {
    hset_insert((uint64_t)(uintptr_t)p, size);
    push(0, p, size);
  }
  pthread_mutex_unlock(&lock);
  in_hook = 0;
}

static void on_free(void *p) {
  if (!p || !hkeys) return;
  pthread_mutex_lock(&lock);
  uint64_t sz;
  if (hlive && hset_remove((uint64_t)(uintptr_t)p, &sz)) push(1, p, sz);
  pthread_mutex_unlock(&lock);
}

int posix_memalign(void **out, size_t align, size_t size) {
  init();
  int r = real_posix_memalign(out, align, size);
  if (r == 0 && !in_hook)
    on_alloc(*out, size, (uintptr_t)__builtin_return_address(0), 0);
  return r;
}

void *aligned_alloc(size_t align, size_t size) {
  init();
  void *p = real_aligned_alloc(align, size);
  if (!in_hook) on_alloc(p, size, (uintptr_t)__builtin_return_address(0), 1);
  return p;
}

void *memalign(size_t align, size_t size) {
  init();
  void *p = real_memalign(align, size);
  if (!in_hook) on_alloc(p, size, (uintptr_t)__builtin_return_address(0), 2);
  return p;
}

void *malloc(size_t n) {
  if (!real_malloc) {
    if (initializing) return boot_alloc(n);
    init();
  }
  return real_malloc(n);
}

void *calloc(size_t a, size_t b) {
  if (!real_calloc) {
    if (initializing) return boot_alloc(a * b);
    init();
  }
  return real_calloc(a, b);
}

void *realloc(void *p, size_t n) {
  if (is_boot(p)) {
    // The arena keeps no block sizes: copy what may be there, never past
    // the arena's end.
    const size_t left = (size_t)(boot_buf + sizeof boot_buf - (char *)p);
    void *q = malloc(n);
    if (q) memcpy(q, p, n < left ? n : left);
    return q;
  }
  if (!real_realloc) init();
  if (p && !in_hook) {
    // A tracked pointer handed to realloc ends its life there: logged as
    // its free (counted; none was seen in PyTorch 1.13).
    pthread_mutex_lock(&lock);
    uint64_t sz;
    if (hkeys && hlive && hset_remove((uint64_t)(uintptr_t)p, &sz)) {
      push(1, p, sz);
      realloc_of_tracked++;
    }
    pthread_mutex_unlock(&lock);
  }
  return real_realloc(p, n);
}

void free(void *p) {
  if (!p || is_boot(p)) return;
  if (!real_free) init();
  if (!in_hook) on_free(p);
  real_free(p);
}

// The control API capture.py calls through ctypes.
void shim_start(void) {
  init();
  pthread_mutex_lock(&lock);
  t0 = now_ns();
  nrecs = 0;
  nphases = 0;
  recording = 1;
  pthread_mutex_unlock(&lock);
}

void shim_mark_phase(const char *name) {
  pthread_mutex_lock(&lock);
  if (nphases < MAX_PHASES) {
    phase_t *ph = &phases[nphases++];
    strncpy(ph->name, name, sizeof ph->name - 1);
    ph->name[sizeof ph->name - 1] = 0;
    ph->first = nrecs;
    ph->t_ns = now_ns() - t0;
  }
  pthread_mutex_unlock(&lock);
}

void shim_stop(void) {
  pthread_mutex_lock(&lock);
  recording = 0;
  pthread_mutex_unlock(&lock);
}

static void wr(int fd, const char *s, size_t n) {
  while (n) {
    ssize_t w = write(fd, s, n);
    if (w <= 0) {
      if (errno == EINTR) continue;
      return;
    }
    s += w;
    n -= (size_t)w;
  }
}

// Writes the trace (RMM CSV), its phases (Phase,FirstEvent,Time) and an info
// text with the tracer's counters and every caller seen; returns the number
// of records.
long shim_dump(const char *csv, const char *phases_csv, const char *info) {
  in_hook = 1;
  pthread_mutex_lock(&lock);
  char line[256];
  int fd = open(csv, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) {
    static char buf[1 << 16];
    size_t bl = 0;
    const char *hdr = "Thread,Time,Action,Pointer,Size,Stream\n";
    wr(fd, hdr, strlen(hdr));
    for (uint64_t i = 0; i < nrecs; i++) {
      rec_t *r = &recs[i];
      int n = snprintf(line, sizeof line, "%u,%llu.%09llu,%s,0x%llx,%llu,0\n",
                       r->tid, (unsigned long long)(r->t_ns / 1000000000ull),
                       (unsigned long long)(r->t_ns % 1000000000ull),
                       r->action ? "free" : "allocate",
                       (unsigned long long)r->ptr, (unsigned long long)r->size);
      if (bl + n > sizeof buf) {
        wr(fd, buf, bl);
        bl = 0;
      }
      memcpy(buf + bl, line, n);
      bl += n;
    }
    wr(fd, buf, bl);
    close(fd);
  }
  fd = open(phases_csv, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) {
    const char *hdr = "Phase,FirstEvent,Time\n";
    wr(fd, hdr, strlen(hdr));
    for (int i = 0; i < nphases; i++) {
      int n = snprintf(line, sizeof line, "%s,%llu,%llu.%09llu\n",
                       phases[i].name, (unsigned long long)phases[i].first,
                       (unsigned long long)(phases[i].t_ns / 1000000000ull),
                       (unsigned long long)(phases[i].t_ns % 1000000000ull));
      wr(fd, line, n);
    }
    close(fd);
  }
  fd = open(info, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) {
    int n = snprintf(line, sizeof line,
                     "records %llu\nlive_tracked_at_dump %llu\nhash_overflow "
                     "%llu\nrec_overflow %llu\ncaller_overflow "
                     "%d\nrealloc_of_tracked %llu\n",
                     (unsigned long long)nrecs, (unsigned long long)hlive,
                     (unsigned long long)hoverflow,
                     (unsigned long long)rec_overflow, caller_overflow,
                     (unsigned long long)realloc_of_tracked);
    wr(fd, line, n);
    static const char *fns[] = {"posix_memalign", "aligned_alloc", "memalign",
                                "malloc"};
    for (int i = 0; i < ncallers; i++) {
      caller_t *c = &callers[i];
      Dl_info di;
      const char *lib = "?", *sym = "?";
      uintptr_t base = 0, sbase = 0;
      if (dladdr((void *)c->addr, &di)) {
        if (di.dli_fname) {
          lib = strrchr(di.dli_fname, '/');
          lib = lib ? lib + 1 : di.dli_fname;
        }
        base = (uintptr_t)di.dli_fbase;
        if (di.dli_sname) {
          sym = di.dli_sname;
          sbase = (uintptr_t)di.dli_saddr;
        }
      }
      n = snprintf(line, sizeof line,
                   "caller %s c10=%d count=%llu bytes=%llu max=%llu "
                   "where=%s+0x%lx %s+0x%lx\n",
                   fns[c->fn], c->is_c10, (unsigned long long)c->count,
                   (unsigned long long)c->bytes, (unsigned long long)c->maxsz,
                   lib, (unsigned long)(c->addr - base), sym,
                   (unsigned long)(sbase ? c->addr - sbase : 0));
      wr(fd, line, n);
    }
    close(fd);
  }
  long r = (long)nrecs;
  pthread_mutex_unlock(&lock);
  in_hook = 0;
  return r;
}
