# Debian packages: `cmake --build build --target package` writes one .deb per component:
#   train-runtime-slurm   the SPANK plugin + its plugstack.conf.d line; pinned to the Slurm major
#                         release it was built against (Slurm requires SPANK plugins to be rebuilt
#                         for every major release); the systemd oneshot that writes the topology
#                         cache at boot, before slurmd (enabled, and run once, on install; the cache
#                         goes on removal). Depends on train-runtime-tools for trainrt-topo.
#   train-runtime-tools   trainrt-topo, trainrt-ckpt, the example trainer
#   libtrainrt0           libtrainrt.so.0
#   libtrainrt-dev        headers, the CMake package, trainrt.pc
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME train-runtime)
set(CPACK_PACKAGE_VENDOR "train-runtime")
set(CPACK_PACKAGE_CONTACT "train-runtime maintainers <root@localhost>")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION misc)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# libtrainrt.so.0 is built here, not installed: tell dpkg-shlibdeps where to find it.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS ${PROJECT_BINARY_DIR}/runtime)
set(CPACK_DEBIAN_ENABLE_COMPONENT_DEPENDS ON)
set(CPACK_PACKAGING_INSTALL_PREFIX ${CMAKE_INSTALL_PREFIX})

set(CPACK_COMPONENTS_ALL runtime dev tools)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME libtrainrt${PROJECT_VERSION_MAJOR})
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SECTION libs)
set(CPACK_COMPONENT_RUNTIME_DESCRIPTION "train-runtime: the job-side runtime library\n PMIx bootstrap, host and NCCL collectives, gradient buckets, fault-tolerant checkpoints.")
set(CPACK_DEBIAN_DEV_PACKAGE_NAME libtrainrt-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_COMPONENT_DEV_DEPENDS runtime)
set(CPACK_COMPONENT_DEV_DESCRIPTION "train-runtime: headers, CMake package and pkg-config file\n find_package(trainrt) gives trainrt::runtime; pkg-config trainrt.")
set(CPACK_DEBIAN_TOOLS_PACKAGE_NAME train-runtime-tools)
set(CPACK_COMPONENT_TOOLS_DEPENDS runtime)
set(CPACK_COMPONENT_TOOLS_DESCRIPTION "train-runtime: trainrt-topo, trainrt-ckpt and the example trainer\n Topology and placement of GPU nodes, checkpoint inspection.")
if(TRAINRT_HAVE_SLURM)
  list(APPEND CPACK_COMPONENTS_ALL plugin)
  set(CPACK_DEBIAN_PLUGIN_PACKAGE_NAME train-runtime-slurm)
  set(CPACK_COMPONENT_PLUGIN_DESCRIPTION "train-runtime: the Slurm SPANK plugin (srun --train-runtime)\n GPU-first, rail-aware placement and the training environment for every task.")
  # Slurm's own plugins package carries the plugin folder and plugstack.conf; its version pins the
  # major release (22.05 -> >= 22.05, << 22.06).
  string(REPLACE "." ";" _slurm_parts "${Slurm_VERSION_MAJOR}")
  list(GET _slurm_parts 0 _slurm_year)
  list(GET _slurm_parts 1 _slurm_month)
  math(EXPR _slurm_next "${_slurm_month} + 1")
  if(_slurm_next LESS 10)
    set(_slurm_next "0${_slurm_next}")
  endif()
  set(CPACK_DEBIAN_PLUGIN_PACKAGE_DEPENDS
      "slurm-wlm-basic-plugins (>= ${Slurm_VERSION_MAJOR}~), slurm-wlm-basic-plugins (<< ${_slurm_year}.${_slurm_next}~)")
  # The plugstack line is the admin's to edit: a conffile, kept across upgrades.
  file(WRITE ${PROJECT_BINARY_DIR}/debian-plugin/conffiles "${SLURM_PLUGSTACK_D}/train-runtime.conf\n")
  set(CPACK_DEBIAN_PLUGIN_PACKAGE_CONTROL_EXTRA ${PROJECT_BINARY_DIR}/debian-plugin/conffiles ${TRAINRT_PLUGIN_MAINTAINER_SCRIPTS})
  set(CPACK_DEBIAN_PLUGIN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
  set(CPACK_COMPONENT_PLUGIN_DEPENDS tools)  # the boot unit runs trainrt-topo
endif()
include(CPack)
