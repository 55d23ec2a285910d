// File: tests/trace_capture/fake_c10.c
// Stands in for PyTorch's libc10.so in trace_capture_test: the tracer keeps
// only the allocations whose caller lies in a library named libc10.so, so
// this library (built as libc10.so) allocates the way c10::alloc_cpu does,
// with posix_memalign at 64-byte alignment.
#include <stdlib.h>

void* fake_c10_alloc(size_t n) {
  void* p = NULL;
  return posix_memalign(&p, 64, n) == 0 ? p : NULL;
}

void fake_c10_free(void* p) { free(p); }
