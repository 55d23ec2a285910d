/* Compiled as C (not C++) into c_api_test: bfc/c_api.h must be valid C. */
#include "bfc/c_api.h"

/* Referencing the declarations checks their C spelling without linking. */
typedef void* (*bfc_c_malloc_type)(size_t, int, bfc_stream_t);
static bfc_c_malloc_type bfc_c_unused_type_check(void) { return 0; }

size_t bfc_c_header_stats_size(void) {
  bfc_stats s;
  (void)bfc_c_unused_type_check;
  (void)s;
  return sizeof(bfc_stats);
}
