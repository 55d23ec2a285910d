# Installs the library and an exported CMake package, so consumers can write
#   find_package(bfc REQUIRED)
#   target_link_libraries(app PRIVATE bfc::bfc)   # or bfc::replay, bfc::report,
#                                                 # bfc::planner, bfc::cuda_resource
#
# Headers: include/bfc is the public contract and is installed whole;
# include/bfc/internal holds only what public headers embed (allocator.h's
# members). Private headers live beside their sources under src/ and are never
# installed. The packaging test (tests/packaging/run.cmake) checks both, and
# compiles every installed header alone against the installed package.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/bfc DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.h")
get_property(bfc_install_targets GLOBAL PROPERTY BFC_INSTALL_TARGETS)
install(TARGETS ${bfc_install_targets} EXPORT bfcTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT bfcTargets NAMESPACE bfc:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/bfc)

# bfcConfig.cmake looks for ZLIB only when bfc::replay's link interface names
# it (a static library carries its private dependencies).
set(BFC_PACKAGE_HAVE_ZLIB OFF)
if(TARGET bfc_replay)
  get_target_property(_bfc_replay_libs bfc_replay LINK_LIBRARIES)
  if("ZLIB::ZLIB" IN_LIST _bfc_replay_libs)
    set(BFC_PACKAGE_HAVE_ZLIB ON)
  endif()
endif()
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/bfcConfig.cmake.in
  ${PROJECT_BINARY_DIR}/bfcConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/bfc)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/bfcConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/bfcConfig.cmake ${PROJECT_BINARY_DIR}/bfcConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/bfc)
