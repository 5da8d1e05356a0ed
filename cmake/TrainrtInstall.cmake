# The installed runtime: libtrainrt.so, its public headers, a CMake package (find_package(trainrt)
# gives trainrt::runtime) and a pkg-config file (trainrt.pc).
include(CMakePackageConfigHelpers)
set(TRAINRT_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/trainrt)

install(TARGETS trainrt EXPORT trainrtTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime NAMELINK_COMPONENT dev)
foreach(dir common/include pmix_bootstrap/include kernels/include checkpoint/include runtime/include)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${dir}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT dev
          FILES_MATCHING PATTERN "*.hpp" PATTERN "*.h"
          # Shared by the modules (the topology loaders, the plugin, the writers, the tools, the
          # binding), not part of libtrainrt's API: a consumer could not count on their symbols.
          PATTERN "small_file.hpp" EXCLUDE PATTERN "temp_file.hpp" EXCLUDE PATTERN "access_error.hpp" EXCLUDE
          PATTERN "number.hpp" EXCLUDE PATTERN "data_interface.hpp" EXCLUDE)
endforeach()
install(EXPORT trainrtTargets NAMESPACE trainrt:: DESTINATION ${TRAINRT_CMAKE_DIR} COMPONENT dev)

configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/trainrtConfig.cmake.in
                              ${CMAKE_CURRENT_BINARY_DIR}/trainrtConfig.cmake INSTALL_DESTINATION ${TRAINRT_CMAKE_DIR})
# 0.x: a minor release may change the API, so only the same minor version is compatible.
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/trainrtConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/trainrtConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/trainrtConfigVersion.cmake
        DESTINATION ${TRAINRT_CMAKE_DIR} COMPONENT dev)

# The prefix is found from the .pc file's own place, so a relocated install (cmake --install
# --prefix X, dpkg) works.
file(RELATIVE_PATH TRAINRT_PC_TO_PREFIX "/p/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/p")
configure_file(${CMAKE_CURRENT_LIST_DIR}/trainrt.pc.in ${CMAKE_CURRENT_BINARY_DIR}/trainrt.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/trainrt.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT dev)
