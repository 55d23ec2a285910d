# The packaging test (CTest: installed_headers, label packaging). Installs the
# bfc build tree into a scratch prefix, then checks what landed there:
#
#   (a) every installed header is either a public header (include/bfc/ of the
#       source tree, outside internal/) or an include/bfc/internal/ header that
#       a public header reaches through #include; nothing from src/ and no
#       header outside include/bfc/ is installed; every public header is;
#   (b) every installed header compiles alone (and twice in a row: include
#       guards) in a separate project that finds the package with
#       find_package(bfc) and links the header's own target (headers/);
#   (c) that project also checks the exported target names the README uses,
#       and is configured with nlohmann-json made unfindable, so the package
#       must not need it.
#
#   cmake -DBFC_BUILD_DIR=... -DSOURCE_DIR=<bfc root> -DWORK_DIR=...
#         [-DC_COMPILER=... -DCXX_COMPILER=... -DC_LAUNCHER=... -DCXX_LAUNCHER=...]
#         [-DJOBS=2] -P run.cmake
cmake_minimum_required(VERSION 3.25)
foreach(v BFC_BUILD_DIR SOURCE_DIR WORK_DIR)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "run.cmake: -D${v}=... is required")
  endif()
endforeach()
if(NOT JOBS)
  set(JOBS 2)
endif()

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    string(JOIN " " cmd ${ARGN})
    message(FATAL_ERROR "failed (${rc}): ${cmd}\n${out}\n${err}")
  endif()
endfunction()

file(REMOVE_RECURSE "${WORK_DIR}")
set(prefix "${WORK_DIR}/prefix")
run(${CMAKE_COMMAND} --install "${BFC_BUILD_DIR}" --prefix "${prefix}")

# --- (a) what was installed ----------------------------------------------------
set(header_regex "\\.(h|hh|hpp|hxx|inc|inl|cuh|ipp)$")
set(inc "${prefix}/include")
set(src_inc "${SOURCE_DIR}/include")
set(errors "")

# Headers anywhere in the prefix must be under include/bfc/.
file(GLOB_RECURSE all_files RELATIVE "${prefix}" "${prefix}/*")
set(installed "")
foreach(f IN LISTS all_files)
  if(NOT f MATCHES "${header_regex}")
    continue()
  endif()
  if(f MATCHES "^include/(bfc/.*)$")
    list(APPEND installed "${CMAKE_MATCH_1}")
  else()
    string(APPEND errors "  ${f}: a header outside include/bfc/\n")
  endif()
endforeach()
list(SORT installed)

# The source tree's public headers: include/bfc/ minus internal/.
file(GLOB_RECURSE src_headers RELATIVE "${src_inc}" "${src_inc}/bfc/*.h")
set(public "")
foreach(h IN LISTS src_headers)
  if(NOT h MATCHES "^bfc/internal/")
    list(APPEND public "${h}")
  endif()
endforeach()
foreach(h IN LISTS public)
  if(NOT EXISTS "${inc}/${h}")
    string(APPEND errors "  ${h}: a public header that was not installed\n")
  endif()
endforeach()

# Private headers (under src/) must never be installed, under any name.
file(GLOB_RECURSE private_headers "${SOURCE_DIR}/src/*")
set(private_hashes "")
foreach(p IN LISTS private_headers)
  if(p MATCHES "${header_regex}")
    file(SHA256 "${p}" hash)
    list(APPEND private_hashes "${hash}")
    file(RELATIVE_PATH rel "${SOURCE_DIR}" "${p}")
    set("private_${hash}" "${rel}")
  endif()
endforeach()

# Reachability: from every installed public header through #include
# "bfc/..." (or <bfc/...>), transitively.
set(reached "")
set(queue "")
foreach(h IN LISTS installed)
  if(h IN_LIST public)
    list(APPEND queue "${h}")
  endif()
endforeach()
while(queue)
  list(POP_FRONT queue h)
  if(h IN_LIST reached)
    continue()
  endif()
  list(APPEND reached "${h}")
  file(STRINGS "${inc}/${h}" lines REGEX "^[ \t]*#[ \t]*include[ \t]*[<\"]bfc/")
  foreach(line IN LISTS lines)
    string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*[<\"](bfc/[^>\"]+)[>\"].*$" "\\1" dep "${line}")
    if(dep MATCHES "^bfc/internal/")
      list(APPEND "needed_by_${dep}" "${h}")
    endif()
    if(NOT EXISTS "${inc}/${dep}")
      string(APPEND errors "  ${h}: includes ${dep}, which is not installed\n")
    elseif(NOT dep IN_LIST reached)
      list(APPEND queue "${dep}")
    endif()
  endforeach()
endwhile()

set(internal "")
foreach(h IN LISTS installed)
  file(SHA256 "${inc}/${h}" hash)
  if(hash IN_LIST private_hashes)
    string(APPEND errors "  ${h}: a copy of the private header ${private_${hash}}\n")
  elseif(NOT EXISTS "${src_inc}/${h}")
    string(APPEND errors "  ${h}: not a header of include/ in the source tree\n")
  elseif(h MATCHES "^bfc/internal/")
    if(h IN_LIST reached)
      list(APPEND internal "${h}")
    else()
      string(APPEND errors "  ${h}: an internal header no public header includes "
                           "(move it beside its sources under src/)\n")
    endif()
  elseif(NOT h IN_LIST public)
    string(APPEND errors "  ${h}: neither public nor internal\n")
  endif()
endforeach()
if(errors)
  message(FATAL_ERROR "installed headers that should not be there:\n${errors}")
endif()

list(LENGTH installed n_installed)
list(LENGTH public n_public)
list(LENGTH internal n_internal)
message(STATUS "installed ${n_installed} headers: ${n_public} public, ${n_internal} internal")
foreach(h IN LISTS internal)
  list(REMOVE_DUPLICATES "needed_by_${h}")
  string(JOIN ", " by ${needed_by_${h}})
  message(STATUS "  ${h} <- ${by}")
endforeach()

# --- (b), (c) each header alone, against the installed package -------------------
string(REPLACE ";" "\n" header_lines "${installed}")
file(WRITE "${WORK_DIR}/headers.txt" "${header_lines}\n")
set(config_args
    "-DCMAKE_PREFIX_PATH=${prefix}"
    "-DBFC_INSTALLED_INCLUDE_DIR=${inc}"
    "-DBFC_HEADERS_FILE=${WORK_DIR}/headers.txt"
    -DCMAKE_BUILD_TYPE=Release
    # The package must not need nlohmann-json (bfc::report uses it privately).
    -DCMAKE_DISABLE_FIND_PACKAGE_nlohmann_json=ON)
foreach(pair C_COMPILER:CMAKE_C_COMPILER CXX_COMPILER:CMAKE_CXX_COMPILER
             C_LAUNCHER:CMAKE_C_COMPILER_LAUNCHER CXX_LAUNCHER:CMAKE_CXX_COMPILER_LAUNCHER)
  string(REPLACE ":" ";" pair "${pair}")
  list(GET pair 0 in)
  list(GET pair 1 out)
  if(${in})
    list(APPEND config_args "-D${out}=${${in}}")
  endif()
endforeach()
run(${CMAKE_COMMAND} -S "${CMAKE_CURRENT_LIST_DIR}/headers" -B "${WORK_DIR}/headers"
    ${config_args})
# Keep going after a failure, so that every header that does not compile is
# named at once.
set(keep_going "")
file(STRINGS "${WORK_DIR}/headers/CMakeCache.txt" generator REGEX "^CMAKE_GENERATOR:")
if(generator MATCHES "=Unix Makefiles$")
  set(keep_going -- -k)
elseif(generator MATCHES "=Ninja")
  set(keep_going -- -k 0)
endif()
run(${CMAKE_COMMAND} --build "${WORK_DIR}/headers" --parallel ${JOBS} ${keep_going})
file(READ "${WORK_DIR}/headers/summary.txt" summary)
message(STATUS "${summary}")
