// File: tests/trace_capture/capture_driver.c
// A scripted "model" for trace_capture_test, run with the tracer preloaded:
// storages come from the fake libc10.so, one buffer from the program itself
// (which must not be recorded), and phases are marked as capture.py marks
// them. Usage: capture_driver TRACE.csv PHASES.csv INFO.txt
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

void* fake_c10_alloc(size_t n);
void fake_c10_free(void* p);

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s TRACE.csv PHASES.csv INFO.txt\n", argv[0]);
    return 2;
  }
  void (*start)(void) = (void (*)(void))dlsym(RTLD_DEFAULT, "shim_start");
  void (*stop)(void) = (void (*)(void))dlsym(RTLD_DEFAULT, "shim_stop");
  void (*mark)(const char*) =
      (void (*)(const char*))dlsym(RTLD_DEFAULT, "shim_mark_phase");
  long (*dump)(const char*, const char*, const char*) = (long (*)(
      const char*, const char*, const char*))dlsym(RTLD_DEFAULT, "shim_dump");
  if (start == NULL || stop == NULL || mark == NULL || dump == NULL) {
    fprintf(stderr, "the tracer is not preloaded (LD_PRELOAD)\n");
    return 2;
  }
  void* before = fake_c10_alloc(512);  // before shim_start: not recorded
  start();
  mark("construct");
  void* weight = fake_c10_alloc(4096);
  void* own = NULL;  // the program's own buffer: not c10's
  if (posix_memalign(&own, 64, 1000) != 0) return 1;
  mark("iter0");
  void* a = fake_c10_alloc(1 << 20);
  void* b = fake_c10_alloc(300);
  fake_c10_free(a);
  free(own);
  fake_c10_free(before);  // allocated before recording: not recorded
  mark("iter1");
  void* c = fake_c10_alloc(1 << 20);
  fake_c10_free(b);
  fake_c10_free(c);
  mark("teardown");
  fake_c10_free(weight);
  mark("end");
  stop();
  const long n = dump(argv[1], argv[2], argv[3]);
  printf("%ld records\n", n);
  return n == 8 ? 0 : 1;
}
