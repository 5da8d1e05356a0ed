# Finds libxxhash (Debian: libxxhash-dev) through its pkg-config file.
#   XXHash::xxhash          imported target
#   XXHash_FOUND, XXHash_VERSION
#   XXHash_HAS_DISPATCH     the library exports XXH3's runtime-dispatched (AVX2/AVX-512) entry points
#                           and ships xxh_x86dispatch.h (x86-64 builds of 0.8+)
find_package(PkgConfig QUIET)
if(PkgConfig_FOUND)
  pkg_check_modules(PC_XXHASH QUIET IMPORTED_TARGET GLOBAL libxxhash)
endif()
set(XXHash_VERSION ${PC_XXHASH_VERSION})
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(XXHash REQUIRED_VARS PC_XXHASH_LINK_LIBRARIES VERSION_VAR XXHash_VERSION
                                  REASON_FAILURE_MESSAGE "install libxxhash-dev")
if(XXHash_FOUND AND NOT TARGET XXHash::xxhash)
  add_library(XXHash::xxhash ALIAS PkgConfig::PC_XXHASH)
endif()
if(XXHash_FOUND AND NOT DEFINED XXHash_HAS_DISPATCH)
  include(CheckCXXSourceCompiles)
  include(CMakePushCheckState)
  cmake_push_check_state(RESET)
  set(CMAKE_REQUIRED_LIBRARIES PkgConfig::PC_XXHASH)
  set(CMAKE_REQUIRED_QUIET ON)
  check_cxx_source_compiles([=[
    #include <xxh_x86dispatch.h>
    int main() { XXH3_state_t* s = XXH3_createState(); XXH3_64bits_reset(s);
                 XXH3_64bits_update_dispatch(s, "x", 1); return (int)XXH3_64bits_digest(s); }
  ]=] XXHash_HAS_DISPATCH)
  cmake_pop_check_state()
endif()
