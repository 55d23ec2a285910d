# Installs the library and an exported CMake package, so consumers can write
#   find_package(bfc REQUIRED)
#   target_link_libraries(app PRIVATE bfc::bfc)
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/bfc DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
get_property(bfc_install_targets GLOBAL PROPERTY BFC_INSTALL_TARGETS)
install(TARGETS ${bfc_install_targets} EXPORT bfcTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT bfcTargets NAMESPACE bfc:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/bfc)

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/bfcConfig.cmake.in
  ${PROJECT_BINARY_DIR}/bfcConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/bfc)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/bfcConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/bfcConfig.cmake ${PROJECT_BINARY_DIR}/bfcConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/bfc)
