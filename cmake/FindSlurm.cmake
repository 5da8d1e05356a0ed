# Finds Slurm's plugin headers (Debian: libslurm-dev). A SPANK plugin must be built against the
# headers of the Slurm that loads it: Slurm refuses plugins of another release ("Incompatible
# plugin version"), and requires a rebuild for every major release.
#   Slurm::headers          imported target (spank.h, slurm.h; no library: slurmstepd provides the symbols)
#   Slurm_FOUND, Slurm_VERSION (e.g. 22.05.8), Slurm_VERSION_MAJOR (22.05)
find_path(Slurm_INCLUDE_DIR slurm/spank.h)
if(Slurm_INCLUDE_DIR AND EXISTS "${Slurm_INCLUDE_DIR}/slurm/slurm_version.h")
  # SLURM_VERSION_NUMBER is 0xYYMMPP: 0x160508 is 22.05.8.
  file(STRINGS "${Slurm_INCLUDE_DIR}/slurm/slurm_version.h" _slurm_v REGEX "^#define SLURM_VERSION_NUMBER ")
  if(_slurm_v MATCHES "0x([0-9a-fA-F][0-9a-fA-F])([0-9a-fA-F][0-9a-fA-F])([0-9a-fA-F][0-9a-fA-F])")
    math(EXPR _y "0x${CMAKE_MATCH_1}")
    math(EXPR _m "0x${CMAKE_MATCH_2}")
    math(EXPR _p "0x${CMAKE_MATCH_3}")
    if(_m LESS 10)
      set(_m "0${_m}")
    endif()
    set(Slurm_VERSION "${_y}.${_m}.${_p}")
    set(Slurm_VERSION_MAJOR "${_y}.${_m}")
  endif()
endif()
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(Slurm REQUIRED_VARS Slurm_INCLUDE_DIR Slurm_VERSION VERSION_VAR Slurm_VERSION
                                  REASON_FAILURE_MESSAGE "install libslurm-dev")
if(Slurm_FOUND AND NOT TARGET Slurm::headers)
  add_library(Slurm::headers INTERFACE IMPORTED GLOBAL)
  set_target_properties(Slurm::headers PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${Slurm_INCLUDE_DIR}")
endif()
mark_as_advanced(Slurm_INCLUDE_DIR)
