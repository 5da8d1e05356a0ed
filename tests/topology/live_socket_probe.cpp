// Proves that live topology discovery talks to no other process.
//
//   live_socket_probe library          load_live() in this process under a seccomp filter that
//                                      traps socket(), socketpair() and connect(); exit 1 if any
//                                      was attempted (each is refused with EPERM and named).
//   live_socket_probe exec CMD...      CMD under the same filter (seccomp survives execve; the
//                                      trap's default action kills CMD with SIGSYS); exit 1 if so.
//   live_socket_probe expect-socket CMD...
//                                      the probe's self-test: CMD (lstopo) must be caught; exit 77
//                                      when it opens no socket here (hwloc's gl/opencl plugins
//                                      absent), so the check cannot be shown to work.
//   live_socket_probe x11 CMD...       CMD with DISPLAY=:0 while a listener that never answers
//                                      holds X11 display :0 (abstract and /tmp/.X11-unix/X0
//                                      sockets), as any local user can; exit 1 if CMD has not
//                                      finished within 60 s. Exit 77 if display :0 is taken.
// Exit codes: 0 pass, 1 fail, 77 cannot run here (SKIPPED).
#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <ucontext.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "trainrt/topology/load.hpp"

namespace {

constexpr int kSkip = 77;

#if defined(__x86_64__)
constexpr unsigned kAuditArch = AUDIT_ARCH_X86_64;
#elif defined(__aarch64__)
constexpr unsigned kAuditArch = AUDIT_ARCH_AARCH64;
#else
constexpr unsigned kAuditArch = 0;
#endif

std::atomic<int> g_trapped{0};

void on_sigsys(int, siginfo_t* info, void* ctx) {
  g_trapped.fetch_add(1);
  char msg[96];
  int n = std::snprintf(msg, sizeof msg, "live_socket_probe: trapped syscall %d (socket/socketpair/connect)\n",
                        info->si_syscall);
  if (n > 0) (void)!::write(2, msg, static_cast<std::size_t>(n));
  auto* uc = static_cast<ucontext_t*>(ctx);
#if defined(__x86_64__)
  uc->uc_mcontext.gregs[REG_RAX] = -EPERM;
#elif defined(__aarch64__)
  uc->uc_mcontext.regs[0] = static_cast<unsigned long long>(-EPERM);
#endif
}

// Traps socket, socketpair and connect of this architecture; allows everything else.
bool install_filter() {
  if (kAuditArch == 0) return false;
  sock_filter code[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, kAuditArch, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_socket, 3, 0),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_socketpair, 2, 0),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_connect, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_TRAP),
  };
  sock_fprog prog{static_cast<unsigned short>(sizeof code / sizeof code[0]), code};
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return false;
  return ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == 0;
}

int run_library() {
  struct sigaction sa {};
  sa.sa_sigaction = on_sigsys;
  sa.sa_flags = SA_SIGINFO;
  ::sigaction(SIGSYS, &sa, nullptr);
  if (!install_filter()) {
    std::printf("SKIPPED: cannot install a seccomp filter here (%s)\n", std::strerror(errno));
    return kSkip;
  }
  // The filter must be seen to work, or a pass would prove nothing.
  int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  if (fd >= 0 || g_trapped.load() != 1) {
    std::printf("FAIL: the seccomp filter did not trap a test socket()\n");
    return 1;
  }
  g_trapped = 0;
  try {
    trainrt::topo::Node node = trainrt::topo::load_live();
    std::printf("load_live: %zu cores, %zu GPUs, %zu NICs\n", node.cores.size(), node.gpus.size(), node.nics.size());
  } catch (const std::exception& e) {
    std::printf("FAIL: load_live threw: %s\n", e.what());
    return 1;
  }
  if (int n = g_trapped.load()) {
    std::printf("FAIL: live discovery attempted %d socket/connect call(s)\n", n);
    return 1;
  }
  std::printf("ok: live discovery made no socket, socketpair or connect call\n");
  return 0;
}

// Runs argv under the filter; returns the raw wait status, or -1 when the filter cannot be set.
int run_filtered(char** argv) {
  int ready[2];
  if (::pipe2(ready, O_CLOEXEC) != 0) return -1;
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(ready[0]);
    char ok = install_filter() ? 1 : 0;
    (void)!::write(ready[1], &ok, 1);
    if (!ok) ::_exit(kSkip);
    ::execvp(argv[0], argv);
    ::_exit(127);
  }
  ::close(ready[1]);
  char ok = 0;
  if (::read(ready[0], &ok, 1) != 1) ok = 0;
  ::close(ready[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return ok ? status : -1;
}

int run_exec(char** argv, bool expect_socket) {
  int status = run_filtered(argv);
  if (status == -1) {
    std::printf("SKIPPED: cannot install a seccomp filter here\n");
    return kSkip;
  }
  const bool caught = WIFSIGNALED(status) && WTERMSIG(status) == SIGSYS;
  if (expect_socket) {
    if (caught) {
      std::printf("ok: the probe catches %s opening a socket\n", argv[0]);
      return 0;
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 127) {
      std::printf("SKIPPED: %s is not installed\n", argv[0]);
      return kSkip;
    }
    std::printf("SKIPPED: %s opened no socket here (hwloc's gl/opencl plugins, libhwloc-plugins, absent?)\n",
                argv[0]);
    return kSkip;
  }
  if (caught) {
    std::printf("FAIL: %s made a socket, socketpair or connect call (killed by SIGSYS)\n", argv[0]);
    return 1;
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::printf("FAIL: %s ended with status 0x%x\n", argv[0], status);
    return 1;
  }
  std::printf("ok: %s made no socket, socketpair or connect call\n", argv[0]);
  return 0;
}

// A listening socket at `addr` (abstract when path[0] == '\0'), or -1.
int listen_at(const sockaddr_un& addr, socklen_t len) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&addr), len) != 0 || ::listen(fd, 64) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

int run_x11(char** argv) {
  const char* dir = "/tmp/.X11-unix";
  const char* path = "/tmp/.X11-unix/X0";
  bool made_dir = ::mkdir(dir, 01777) == 0;
  if (made_dir) ::chmod(dir, 01777);

  sockaddr_un abs{};
  abs.sun_family = AF_UNIX;
  std::memcpy(abs.sun_path + 1, path, std::strlen(path));  // Xlib tries the abstract name first
  int abs_fd = listen_at(abs, static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + std::strlen(path)));

  sockaddr_un fs{};
  fs.sun_family = AF_UNIX;
  std::strncpy(fs.sun_path, path, sizeof fs.sun_path - 1);
  int fs_fd = listen_at(fs, sizeof fs);
  if (abs_fd < 0) {  // Xlib tries the abstract name first: a real X server answers there
    if (fs_fd >= 0) {
      ::close(fs_fd);
      ::unlink(path);
    }
    if (made_dir) ::rmdir(dir);
    std::printf("SKIPPED: X11 display :0 is taken on this machine; cannot stand in for a silent listener\n");
    return kSkip;
  }
  std::printf("silent listener on display :0 (%s%s)\n", abs_fd >= 0 ? "abstract " : "", fs_fd >= 0 ? path : "");

  pid_t pid = ::fork();
  if (pid == 0) {
    ::setenv("DISPLAY", ":0", 1);
    ::execvp(argv[0], argv);
    ::_exit(127);
  }
  int status = 0;
  bool done = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      done = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (!done) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
  }
  if (abs_fd >= 0) ::close(abs_fd);
  if (fs_fd >= 0) {
    ::close(fs_fd);
    ::unlink(path);
  }
  if (made_dir) ::rmdir(dir);
  if (!done) {
    std::printf("FAIL: %s hung for 60 s while display :0 never answered\n", argv[0]);
    return 1;
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::printf("FAIL: %s ended with status 0x%x\n", argv[0], status);
    return 1;
  }
  std::printf("ok: %s finished while display :0 never answered\n", argv[0]);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "library" && argc == 2) return run_library();
  if (mode == "exec" && argc > 2) return run_exec(argv + 2, false);
  if (mode == "expect-socket" && argc > 2) return run_exec(argv + 2, true);
  if (mode == "x11" && argc > 2) return run_x11(argv + 2);
  std::fprintf(stderr, "usage: live_socket_probe library | exec CMD... | expect-socket CMD... | x11 CMD...\n");
  return 2;
}
