// ckpt-bench: checkpoint costs next to their floors, measured in the same run (A B A B).
//   mpirun -np 2 ckpt-bench DIR [MiB per rank ...]
// stall   : save() blocking time vs memcpy of the same bytes into preallocated memory
// persist : shard bytes / background persist time vs `dd if=/dev/zero bs=16M conv=fsync` of the same
//           size on the same filesystem, every rank at once
// restore : restore() (read + verify every checksum + copy) vs reading the same shard files
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "trainrt/bootstrap/session.hpp"
#include "trainrt/checkpoint/manager.hpp"

using namespace trainrt;
using Clock = std::chrono::steady_clock;

namespace {
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

double read_file_seconds(const std::string& path) {
  auto t = Clock::now();
  int fd = ::open(path.c_str(), O_RDONLY);
  std::vector<char> buf(16 << 20);
  while (::read(fd, buf.data(), buf.size()) > 0) {
  }
  ::close(fd);
  return since(t);
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    fmt::print(stderr, "usage: ckpt-bench DIR [MiB per rank ...]\n");
    return 2;
  }
  std::string base = argv[1];
  std::vector<std::size_t> sizes;
  for (int i = 2; i < argc; ++i) sizes.push_back(std::stoul(argv[i]));
  if (sizes.empty()) sizes = {256, 1024};
  auto session = bootstrap::Session::open({std::chrono::seconds(600), true});
  const unsigned rank = session->rank(), n = session->size();
  auto max_all = [&](double v) {
    double worst = v;
    for (const auto& b : session->allgather({reinterpret_cast<const std::uint8_t*>(&v), sizeof v})) {
      double x;
      std::memcpy(&x, b.data(), sizeof x);
      worst = std::max(worst, x);
    }
    return worst;
  };
  if (rank == 0) fmt::print("# ckpt-bench: {} ranks, directory {}\n", n, base);
  for (std::size_t mib : sizes) {
    const std::size_t bytes = mib << 20;
    std::vector<float> state(bytes / 4), copy(bytes / 4);
    for (std::size_t i = 0; i < state.size(); ++i) state[i] = static_cast<float>(i % 1000) * (rank + 1);
    std::string dir = fmt::format("{}/ckpt-{}", base, mib);
    checkpoint::Options o;
    o.directory = dir;
    o.keep_last = 1;
    checkpoint::Manager mgr(*session, o);
    mgr.register_buffer("state", state.data(), bytes, DType::F32, {static_cast<std::int64_t>(state.size())});
    double stall = 0, floor = 0, persist = 0, dd = 0;
    const int reps = 3;
    for (int r = 0; r < reps; ++r) {
      session->barrier();
      auto t = Clock::now();
      std::memcpy(copy.data(), state.data(), bytes);
      floor += max_all(since(t));
      session->barrier();
      auto result = mgr.save(static_cast<std::uint64_t>(r + 1));
      auto res = result.get();
      stall += max_all(res.stall_seconds);
      persist += max_all(res.persist_seconds);
      session->barrier();
      std::string cmd = fmt::format("dd if=/dev/zero of={}/dd-{}.bin bs=16M count={} conv=fsync status=none", base, rank,
                                    std::max<std::size_t>(1, mib / 16));
      auto td = Clock::now();
      if (std::system(cmd.c_str()) != 0) fmt::print(stderr, "dd failed\n");
      dd += max_all(since(td));
      ::unlink(fmt::format("{}/dd-{}.bin", base, rank).c_str());
    }
    session->barrier();
    auto tr = Clock::now();
    mgr.restore();
    double restore = max_all(since(tr));
    double plain_read = max_all(read_file_seconds(fmt::format("{}/step_{:012}/rank_{:05}.shard", dir, reps, rank)));
    if (rank == 0) {
      double gb = static_cast<double>(bytes) / 1e9;
      fmt::print("{:>5} MiB/rank  stall {:7.1f} ms  memcpy {:7.1f} ms  ratio {:5.2f}x (goal <= 1.2x)\n", mib,
                 stall / reps * 1e3, floor / reps * 1e3, stall / floor);
      fmt::print("{:>5} MiB/rank  persist {:6.2f} GB/s/rank  dd conv=fsync {:6.2f} GB/s/rank  ratio {:5.2f}x (goal >= 0.9x)\n",
                 mib, gb / (persist / reps), gb / (dd / reps), (dd / reps) / (persist / reps));
      fmt::print("{:>5} MiB/rank  restore {:7.1f} ms  plain read {:7.1f} ms  ratio {:5.2f}x of read speed (goal >= 0.8x)\n",
                 mib, restore * 1e3, plain_read * 1e3, plain_read / restore);
    }
    session->barrier();
    if (rank == 0) std::system(fmt::format("rm -rf '{}'", dir).c_str());
  }
  return 0;
}
