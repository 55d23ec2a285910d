/* File: tests/packaging/so_load_check.c
 * -----------------------------------------------------------------------------
 *
 * Loads libbfc_alloc.so the way a framework does (dlopen) and uses it with
 * the backends that need no GPU, then asks for backend:cuda with no driver
 * reachable: the .so must load and serve without Abseil or any CUDA library
 * on the machine, and the first CUDA use must fail at once with a message
 * saying no driver was found and how to point at one. Run by
 * so_closure_test.sh in a process that cannot see Abseil.
 *
 *   so_load_check PATH_TO_LIBBFC_ALLOC_SO
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bfc/c_api.h"

typedef void* (*malloc_fn)(size_t, int, bfc_stream_t);
typedef void (*free_fn)(void*, size_t, int, bfc_stream_t);
typedef const char* (*error_fn)(void);
typedef void (*reset_fn)(void);
typedef int (*stats_fn)(int, bfc_stats*);

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s PATH_TO_LIBBFC_ALLOC_SO\n", argv[0]);
    return 2;
  }
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    fprintf(stderr, "so_load_check: dlopen failed: %s\n", dlerror());
    return 1;
  }
  malloc_fn m = (malloc_fn)dlsym(lib, "bfc_malloc");
  free_fn f = (free_fn)dlsym(lib, "bfc_free");
  error_fn err = (error_fn)dlsym(lib, "bfc_last_error");
  reset_fn reset = (reset_fn)dlsym(lib, "bfc_reset_for_testing");
  stats_fn stats = (stats_fn)dlsym(lib, "bfc_get_stats");
  if (!m || !f || !err || !reset || !stats) {
    fprintf(stderr, "so_load_check: a bfc_* symbol is missing\n");
    return 1;
  }
  const char* confs[] = {"backend:host,memory_limit:64MiB",
                         "backend:virtual,memory_limit:1GiB"};
  for (int i = 0; i < 2; ++i) {
    setenv("BFC_ALLOC_CONF", confs[i], 1);
    reset();
    void* p[16];
    for (int k = 0; k < 16; ++k) {
      p[k] = m((size_t)(k + 1) * 4096, 0, NULL);
      if (p[k] == NULL) {
        fprintf(stderr, "so_load_check: %s: malloc failed: %s\n", confs[i],
                err());
        return 1;
      }
    }
    if (i == 0) memset(p[3], 0x5a, 4 * 4096); /* host memory is real */
    for (int k = 0; k < 16; ++k) f(p[k], 0, 0, NULL);
    bfc_stats s;
    if (stats(0, &s) != 0 || s.bytes_in_use != 0 || s.num_allocs != 16) {
      fprintf(stderr, "so_load_check: %s: stats wrong\n", confs[i]);
      return 1;
    }
    printf("so_load_check: %s: 16 blocks allocated and freed\n", confs[i]);
  }
  /* No CUDA driver where it is looked for: a clear error at once. */
  setenv("BFC_CUDA_DRIVER_LIBRARY", "/nonexistent/libcuda.so.1", 1);
  setenv("BFC_ALLOC_CONF", "backend:cuda", 1);
  reset();
  if (m(4096, 0, NULL) != NULL) {
    fprintf(stderr, "so_load_check: backend:cuda served without a driver\n");
    return 1;
  }
  if (strstr(err(), "no CUDA driver found") == NULL ||
      strstr(err(), "BFC_CUDA_DRIVER_LIBRARY") == NULL) {
    fprintf(stderr, "so_load_check: unclear error: %s\n", err());
    return 1;
  }
  printf("so_load_check: backend:cuda without a driver: %s\n", err());
  return 0;
}
