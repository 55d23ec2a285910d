// File: src/report/text_escape.cc
#include "report/text_escape.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace bfc::internal {
namespace {

constexpr char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD

// The length of the well-formed UTF-8 sequence at s[i] (Unicode table 3-7),
// or 0 when none starts there. *code_point receives its value.
size_t SequenceAt(std::string_view s, size_t i, uint32_t* code_point) {
  const auto byte = [&](size_t k) -> uint32_t {
    return static_cast<unsigned char>(s[k]);
  };
  const uint32_t b0 = byte(i);
  if (b0 < 0x80) {
    *code_point = b0;
    return 1;
  }
  size_t n = 0;
  uint32_t lo = 0x80, hi = 0xBF;  // range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3;
    if (b0 == 0xE0) lo = 0xA0;  // no overlongs
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4;
    if (b0 == 0xF0) lo = 0x90;  // no overlongs
    if (b0 == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    return 0;  // a continuation byte, C0, C1 or F5..FF
  }
  if (s.size() - i < n) return 0;
  const uint32_t b1 = byte(i + 1);
  if (b1 < lo || b1 > hi) return 0;
  uint32_t cp = b0 & (0xFF >> (n + 1));
  cp = (cp << 6) | (b1 & 0x3F);
  for (size_t k = 2; k < n; ++k) {
    const uint32_t b = byte(i + k);
    if (b < 0x80 || b > 0xBF) return 0;
    cp = (cp << 6) | (b & 0x3F);
  }
  *code_point = cp;
  return n;
}

bool IsXmlChar(uint32_t cp) {
  if (cp < 0x20) return cp == 0x9 || cp == 0xA || cp == 0xD;
  return cp != 0xFFFE && cp != 0xFFFF;  // surrogates never get here
}

}  // namespace

std::string ToValidUtf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t i = 0;
  while (i < bytes.size()) {
    uint32_t cp = 0;
    const size_t n = SequenceAt(bytes, i, &cp);
    if (n == 0) {
      out += kReplacement;
      ++i;
    } else {
      out.append(bytes.substr(i, n));
      i += n;
    }
  }
  return out;
}

std::string EscapeXml(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    uint32_t cp = 0;
    const size_t n = SequenceAt(text, i, &cp);
    if (n == 0 || !IsXmlChar(cp)) {
      out += kReplacement;
      i += n == 0 ? 1 : n;
      continue;
    }
    switch (cp) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      case '\r':
        out += "&#13;";  // a literal CR would be normalized away
        break;
      default:
        out.append(text.substr(i, n));
    }
    i += n;
  }
  return out;
}

std::string EscapeJsonForHtmlScript(std::string_view json) {
  std::string out;
  out.reserve(json.size());
  for (size_t i = 0; i < json.size(); ++i) {
    const char c = json[i];
    if (c == '<') {
      out += "\\u003c";
    } else if (c == '>') {
      out += "\\u003e";
    } else if (c == '&') {
      out += "\\u0026";
    } else if (c == '\xE2' && i + 2 < json.size() && json[i + 1] == '\x80' &&
               (json[i + 2] == '\xA8' || json[i + 2] == '\xA9')) {
      out += json[i + 2] == '\xA8' ? "\\u2028" : "\\u2029";
      i += 2;
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace bfc::internal
