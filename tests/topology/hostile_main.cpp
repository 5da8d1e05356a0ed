// Runs the hostile-input tests under the limits a real process meets, so that a recursion or an
// allocation a file controls fails the test instead of passing on a big machine: the default
// 8 MiB stack (CI runners and shells may raise it) and 1 GiB of address space.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <sys/resource.h>

#include <cstdio>

namespace {

bool lower(int resource, rlim_t value, const char* name) {
  rlimit r{};
  if (::getrlimit(resource, &r) != 0) return false;
  if (r.rlim_cur != RLIM_INFINITY && r.rlim_cur <= value) return true;
  r.rlim_cur = value;
  if (::setrlimit(resource, &r) != 0) {
    std::fprintf(stderr, "cannot lower %s\n", name);
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (!lower(RLIMIT_STACK, rlim_t{8} << 20, "RLIMIT_STACK") || !lower(RLIMIT_AS, rlim_t{1} << 30, "RLIMIT_AS"))
    return 1;
  return Catch::Session().run(argc, argv);
}
