// File: src/report/text_escape.h
// -----------------------------------------------------------------------------
//
// Text from the user (allocator names, trace names taken from file names,
// symbolized frames) escaped for the grammar of each output bfc::report
// writes. Private to bfc::report.
//
//   ToValidUtf8             any bytes -> well-formed UTF-8 (Unicode 15, table
//                           3-7): each byte that does not start a well-formed
//                           sequence becomes U+FFFD. No overlongs, no
//                           surrogates, nothing above U+10FFFF.
//   EscapeXml               any bytes -> XML 1.0 character data or attribute
//                           value: ToValidUtf8, then & < > " ' as entities,
//                           CR as &#13;, and every character XML 1.0 forbids
//                           even as a reference (C0 controls but TAB and LF,
//                           U+FFFE, U+FFFF) as U+FFFD.
//   EscapeJsonForHtmlScript JSON text -> the same JSON value, safe as the
//                           content of an HTML <script> element: < > & as
//                           \u003c \u003e \u0026, so that no "</script", "<!--"
//                           or "<script" can appear (the HTML tokenizer's
//                           script data states, HTML Living Standard 13.2.5.4
//                           and on, would otherwise end the element early or
//                           swallow the rest of the page), and U+2028/U+2029
//                           as \u2028 \u2029 (line terminators to older
//                           JavaScript). Only for JSON text: outside strings
//                           JSON has none of these characters.
//
// Thread-safe (pure functions).
#ifndef BFC_REPORT_TEXT_ESCAPE_H_
#define BFC_REPORT_TEXT_ESCAPE_H_

#include <string>
#include <string_view>

namespace bfc::internal {

std::string ToValidUtf8(std::string_view bytes);
std::string EscapeXml(std::string_view text);
std::string EscapeJsonForHtmlScript(std::string_view json);

}  // namespace bfc::internal

#endif  // BFC_REPORT_TEXT_ESCAPE_H_
