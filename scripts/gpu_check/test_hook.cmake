# TEST HOOK of scripts/gpu-check.sh (--test-break-target), for tests/gpu_check/self_test.sh only:
# makes every C++ source of the CMake target GPU_CHECK_TEST_BREAK_TARGET fail to compile, to prove
# that a target that does not build fails only the gpu-check steps that need it. Included through
# CMAKE_PROJECT_INCLUDE; never part of a real build.
if(GPU_CHECK_TEST_BREAK_TARGET AND NOT _gpu_check_test_hook_armed)
  set(_gpu_check_test_hook_armed ON)
  function(_gpu_check_break_target)
    if(NOT TARGET ${GPU_CHECK_TEST_BREAK_TARGET})
      message(FATAL_ERROR "gpu-check test hook: no target '${GPU_CHECK_TEST_BREAK_TARGET}' to break")
    endif()
    set_property(TARGET ${GPU_CHECK_TEST_BREAK_TARGET} APPEND PROPERTY COMPILE_OPTIONS
                 "$<$<COMPILE_LANGUAGE:CXX>:SHELL:-include ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/test_hook_broken.h>")
    message(STATUS "gpu-check TEST HOOK: ${GPU_CHECK_TEST_BREAK_TARGET} is made not to compile")
  endfunction()
  # Run at the end of the top directory, when every target exists.
  cmake_language(DEFER DIRECTORY ${CMAKE_SOURCE_DIR} CALL _gpu_check_break_target)
endif()
