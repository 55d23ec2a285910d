# Build helpers shared by every subdirectory.

# Sanitizer flags apply to everything in the build (library, tests, tools), so a
# sanitizer build checks the whole program.
function(bfc_apply_sanitizers)
  if(BFC_SANITIZE)
    set(flags "-fsanitize=${BFC_SANITIZE}" -fno-omit-frame-pointer -fno-sanitize-recover=all)
    add_compile_options(${flags})
    add_link_options(${flags})
  endif()
endfunction()

# Warnings for the project's own targets.
function(bfc_target_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wno-unused-parameter)
  if(BFC_THREAD_SAFETY_ANALYSIS)
    if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
      message(FATAL_ERROR "BFC_THREAD_SAFETY_ANALYSIS needs clang (CXX=clang++)")
    endif()
    target_compile_options(${target} PRIVATE -Wthread-safety -Werror)
  endif()
endfunction()

# bfc_add_test(NAME name SOURCES a.cc b.cc [LIBS ...] [LABELS ...] [CUDA]
#              [OPTIMIZED])
# One GoogleTest executable, registered with CTest test by test. CUDA: the
# test exercises CUDA paths; it gets the label `cuda` and, unless
# BFC_TEST_REAL_CUDA is ON, runs against the fake driver
# (BFC_CUDA_DRIVER_LIBRARY=<bfc_fake_cuda>). The sources compile with
# BFC_TEST_COMPILE_OPTIONS (-O0) unless OPTIMIZED: a test whose own code does
# the heavy work (the planner's quadratic reference strategies) keeps the
# build type's flags, where -O0 would cost more running than it saves
# compiling (under ASan: 41 s against 13.5 s, for 8 s more compiling).
function(bfc_add_test)
  cmake_parse_arguments(T "CUDA;OPTIMIZED" "NAME;TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${T_NAME} ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE bfc::bfc GTest::gtest GTest::gmock GTest::gtest_main ${T_LIBS})
  # Tests may reach private headers ("core/...", "c_api/...") and the shared
  # test support ("testing/...") from any folder under tests/.
  target_include_directories(${T_NAME} PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/tests)
  if(BFC_HAVE_CUDA)
    # The toolkit's headers (types and constants only; nothing links CUDA).
    target_include_directories(${T_NAME} PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
  endif()
  target_compile_definitions(${T_NAME} PRIVATE BFC_TEST_DATA_DIR="${PROJECT_SOURCE_DIR}/tests/data")
  bfc_target_warnings(${T_NAME})
  if(NOT T_OPTIMIZED)
    target_compile_options(${T_NAME} PRIVATE ${BFC_TEST_COMPILE_OPTIONS})
  endif()
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  gtest_discover_tests(${T_NAME} DISCOVERY_TIMEOUT 60
                       PROPERTIES TIMEOUT ${T_TIMEOUT})
  # Labels are set by a file CTest reads after the discovered tests: CMake
  # 3.25's PROPERTIES flattens a list, so a second label ("concurrency;
  # adversarial") became a property name and was lost. ${T_NAME}_TESTS is the
  # list gtest_discover_tests defines.
  set(environment "")
  if(T_CUDA)
    list(APPEND T_LABELS cuda)
    if(TARGET bfc_fake_cuda)
      add_dependencies(${T_NAME} bfc_fake_cuda)
      target_compile_definitions(${T_NAME} PRIVATE BFC_TEST_HAVE_FAKE_CUDA=1)
      if(NOT BFC_TEST_REAL_CUDA)
        set(environment "BFC_CUDA_DRIVER_LIBRARY=$<TARGET_FILE:bfc_fake_cuda>")
      endif()
    endif()
  endif()
  if(T_LABELS OR environment)
    set(labels_file "${CMAKE_CURRENT_BINARY_DIR}/${T_NAME}_labels.cmake")
    # file(GENERATE): the fake driver's path is a generator expression.
    string(CONCAT content
           "if(DEFINED ${T_NAME}_TESTS)\n"
           "  set_tests_properties(\${${T_NAME}_TESTS} PROPERTIES LABELS \"${T_LABELS}\")\n"
           "  set_tests_properties(\${${T_NAME}_TESTS} PROPERTIES ENVIRONMENT \"${environment}\")\n"
           "endif()\n")
    file(GENERATE OUTPUT "${labels_file}" CONTENT "${content}")
    set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${labels_file}")
  endif()
endfunction()
