// File: tests/testing/gzip.h
// Gzip test data made in memory with zlib (what `gzip` writes: one member with
// its header and trailer), for tests of readers that must reject what is cut
// short or corrupt. Include only where zlib is linked (BFC_HAVE_ZLIB).
#ifndef BFC_TESTS_TESTING_GZIP_H_
#define BFC_TESTS_TESTING_GZIP_H_

#include <zlib.h>

#include <cstring>
#include <string>

namespace bfc::testing {

// `text` as one gzip member; "" if zlib fails.
inline std::string Gzip(const std::string& text) {
  z_stream z;
  std::memset(&z, 0, sizeof(z));
  if (deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
    return "";
  }
  std::string out(deflateBound(&z, text.size()) + 64, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  z.avail_in = static_cast<uInt>(text.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  const bool done = deflate(&z, Z_FINISH) == Z_STREAM_END;
  out.resize(done ? z.total_out : 0);
  deflateEnd(&z);
  return out;
}

}  // namespace bfc::testing

#endif  // BFC_TESTS_TESTING_GZIP_H_
