# The installed runtime: libtrainrt.so, its public headers, a CMake package (find_package(trainrt)
# gives trainrt::runtime) and a pkg-config file (trainrt.pc).
include(CMakePackageConfigHelpers)
set(TRAINRT_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/trainrt)

install(TARGETS trainrt EXPORT trainrtTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime NAMELINK_COMPONENT dev)
# The front door: the headers a training program includes and the ones they include, nothing else.
# The rest (the modules' shared helpers, the backends' factories, telemetry the trainer uses) stays
# in the tree, so a consumer never builds on a symbol that is not part of libtrainrt's API. A new
# public header goes into this list; tests/install/consumer includes every one of them.
set(TRAINRT_PUBLIC_HEADERS
    common/include/trainrt/error.hpp
    common/include/trainrt/dtype.hpp
    common/include/trainrt/memory.hpp
    pmix_bootstrap/include/trainrt/bootstrap/session.hpp
    kernels/include/trainrt/kernels/cpu.hpp
    kernels/include/trainrt/kernels/cuda.hpp
    kernels/include/trainrt/kernels/tensor_list.hpp
    checkpoint/include/trainrt/checkpoint/manager.hpp
    checkpoint/include/trainrt/checkpoint/inspect.hpp
    checkpoint/include/trainrt/checkpoint/stop_signals.hpp
    runtime/include/trainrt/runtime/init.hpp
    runtime/include/trainrt/runtime/communicator.hpp
    runtime/include/trainrt/runtime/nccl_communicator.hpp
    runtime/include/trainrt/runtime/bucketer.hpp
    runtime/include/trainrt/runtime/observability.hpp)
foreach(header ${TRAINRT_PUBLIC_HEADERS})
  # common/include/trainrt/error.hpp -> include/trainrt/error.hpp
  string(REGEX REPLACE "^[^/]+/include/" "" relative ${header})
  get_filename_component(subdir ${relative} DIRECTORY)
  install(FILES ${PROJECT_SOURCE_DIR}/${header} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/${subdir} COMPONENT dev)
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
