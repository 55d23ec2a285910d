# cmake -DIN=file -DOUT=file.cc -DSYMBOL=name -P BfcEmbedText.cmake
# Writes a C++ file defining `extern const char bfc::internal::SYMBOL[]` with
# the text of IN, so a template kept as a real file (tools/viewer/viewer.html)
# ships inside the library.
file(READ "${IN}" content)
string(FIND "${content}" ")bfcembed\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${IN} contains the raw-string delimiter )bfcembed\"")
endif()
file(WRITE "${OUT}.tmp"
  "// Generated from ${IN} by cmake/BfcEmbedText.cmake: do not edit.\n"
  "namespace bfc::internal {\n"
  "extern const char ${SYMBOL}[];\n"
  "const char ${SYMBOL}[] = R\"bfcembed(${content})bfcembed\";\n"
  "}  // namespace bfc::internal\n")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUT}.tmp")
