// TEST HOOK of scripts/gpu-check.sh (--test-break-target): force-included into one target's C++
// sources by test_hook.cmake, so that target fails to build on purpose. Never part of a real build.
#error "gpu-check test hook: this target is broken on purpose (--test-break-target)"
