// The bootstrap's steps at scale, one srun --mpi=pmix per run (benchmarks/scale.sh drives it):
//   scale_bench floor [--reps R]  cold: PMIx_Init + one data-free fence, from main();
//                                 warm: a data-free fence; a fence collecting 8 bytes per rank
//   scale_bench init [--reps R] [--device-placement]
//                                 cold: trainrt::init() to a ready world (host backend up; device
//                                 communicator off, or with --device-placement the GPU agreement
//                                 of a NCCL build), from main();
//                                 warm: the session's barrier, broadcast and allgather of 8 bytes
//                                 (allgather up to 256 ranks); NCCL unique id from one root, from
//                                 ceil(N/256) roots (after one untimed exchange of each);
//                                 a checkpoint save of 64 bytes per rank (its commit agreement is
//                                 the cost; files on --ckpt-dir, tmpfs by default)
//                                 per rank, what init() asked of PMIx (fences with and without
//                                 data, puts, gets of keys on this node and on others) and the
//                                 sockets it opened (the host backend's connections), as the most
//                                 any node leader and any other rank needed ("init_msgs_*")
// --hold S: every rank sleeps S seconds before it exits, so its memory can be read (scale.sh).
// Rank 0 prints "<figure> <ranks> <nodes> <ms>" lines. A cold figure is the slowest rank's time
// from its own main() ("_own") and the time from the last rank entering main() to the last rank
// ready ("_last", CLOCK_REALTIME: every process of the machine shares it), and the CPU time all
// ranks used from main() to ready ("_cpu_sum", getrusage). A warm figure is the
// median over R repetitions of the slowest rank's time for one step, each step after a data-free
// fence. Figures go through PMIx itself (one fence with data at the end), so the reporting never
// depends on the code under test.
#include <fmt/format.h>
#include <pmix.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "trainrt/checkpoint/manager.hpp"
#include "trainrt/error.hpp"
#include "trainrt/runtime/init.hpp"
#include "trainrt/runtime/nccl_communicator.hpp"

namespace {

double wall_ms() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

[[noreturn]] void die(const std::string& what) {
  fmt::print(stderr, "scale_bench: {}\n", what);
  std::exit(1);
}

void check(pmix_status_t rc, const char* what) {
  if (rc != PMIX_SUCCESS) die(fmt::format("{} failed: {}", what, PMIx_Error_string(rc)));
}

struct Pmix {
  pmix_proc_t me{}, all{};
  unsigned size = 0, nodes = 0;

  Pmix() {
    check(PMIx_Init(&me, nullptr, 0), "PMIx_Init");
    PMIX_LOAD_PROCID(&all, me.nspace, PMIX_RANK_WILDCARD);
    size = get_u32(PMIX_JOB_SIZE);
    nodes = get_u32(PMIX_NUM_NODES);
  }
  ~Pmix() { PMIx_Finalize(nullptr, 0); }

  unsigned get_u32(const char* key) {
    pmix_value_t* v = nullptr;
    check(PMIx_Get(&all, key, nullptr, 0, &v), key);
    unsigned out = v->type == PMIX_UINT32 ? v->data.uint32 : v->type == PMIX_UINT16 ? v->data.uint16 : 0;
    PMIX_VALUE_RELEASE(v);
    if (out == 0) die(fmt::format("PMIx key {} is not a positive number", key));
    return out;
  }
  void fence(bool collect) {
    pmix_info_t info;
    PMIX_INFO_LOAD(&info, PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
    check(PMIx_Fence(&all, 1, &info, 1), "PMIx_Fence");
    PMIX_INFO_DESTRUCT(&info);
  }
  void put(const std::string& key, const void* data, std::size_t bytes) {
    pmix_value_t v;
    PMIX_VALUE_CONSTRUCT(&v);
    v.type = PMIX_BYTE_OBJECT;
    v.data.bo.bytes = static_cast<char*>(const_cast<void*>(data));  // PMIx_Put copies
    v.data.bo.size = bytes;
    check(PMIx_Put(PMIX_GLOBAL, key.c_str(), &v), "PMIx_Put");
    check(PMIx_Commit(), "PMIx_Commit");
  }
  std::vector<double> get_doubles(unsigned rank, const std::string& key) {
    pmix_proc_t p;
    PMIX_LOAD_PROCID(&p, me.nspace, rank);
    pmix_value_t* v = nullptr;
    check(PMIx_Get(&p, key.c_str(), nullptr, 0, &v), "PMIx_Get");
    std::vector<double> out(v->data.bo.size / sizeof(double));
    std::memcpy(out.data(), v->data.bo.bytes, out.size() * sizeof(double));
    PMIX_VALUE_RELEASE(v);
    return out;
  }
};

// CPU time (user + system) this process has used, in ms.
double cpu_ms() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto ms = [](const timeval& t) { return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_usec) / 1e3; };
  return ms(u.ru_utime) + ms(u.ru_stime);
}

// Every rank's samples, combined on rank 0: max over ranks per sample, and sum of sample 0.
std::vector<double> slowest(Pmix& px, const std::vector<double>& mine, double& sum0) {
  px.put("scale.report", mine.data(), mine.size() * sizeof(double));
  px.fence(true);
  std::vector<double> worst(mine.size(), 0.0);
  sum0 = 0;
  if (px.me.rank != 0) return worst;
  for (unsigned r = 0; r < px.size; ++r) {
    auto got = px.get_doubles(r, "scale.report");
    if (got.size() != mine.size()) die(fmt::format("rank {} reported {} samples, rank 0 {}", r, got.size(), mine.size()));
    for (std::size_t i = 0; i < got.size(); ++i) worst[i] = std::max(worst[i], got[i]);
    sum0 += got[0];
  }
  return worst;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// Sockets this process holds (its PMIx client's, its host backend's connections and listeners).
double open_sockets() {
  double n = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    const auto target = std::filesystem::read_symlink(e.path(), ec);
    if (!ec && target.native().starts_with("socket:")) ++n;
  }
  return n;
}

// Reported as one vector, so one max over ranks gives every figure: [cpu, own, main_at, ready_at]
// (the CPU sum is taken of the first), then R warm times per figure, then each count twice (the
// leader's slot and the other ranks' slot, the one that is not this rank's left 0).
struct Samples {
  std::vector<std::string> names;  // warm figures
  std::vector<std::vector<double>> warm;
  std::vector<std::pair<std::string, double>> counts;
  bool leader = false;  // this rank is its node's lowest
  double own = 0, main_at = 0, ready_at = 0, cpu = 0;  // cpu: ms this rank used from main() to ready

  std::vector<double>& figure(const std::string& name) {
    for (std::size_t i = 0; i < names.size(); ++i)
      if (names[i] == name) return warm[i];
    names.push_back(name);
    warm.emplace_back();
    return warm.back();
  }
  void report(Pmix& px, const std::string& cold) {
    std::vector<double> flat = {cpu, own, main_at, ready_at};
    for (const auto& w : warm) flat.insert(flat.end(), w.begin(), w.end());
    for (const auto& [name, n] : counts) {
      flat.push_back(leader ? n : 0);
      flat.push_back(leader ? 0 : n);
    }
    double cpu_sum = 0;
    auto worst = slowest(px, flat, cpu_sum);
    if (px.me.rank != 0) return;
    fmt::print("{}_own {} {} {:.2f}\n", cold, px.size, px.nodes, worst[1]);
    fmt::print("{}_last {} {} {:.2f}\n", cold, px.size, px.nodes, worst[3] - worst[2]);
    fmt::print("{}_cpu_sum {} {} {:.2f}\n", cold, px.size, px.nodes, cpu_sum);
    std::size_t at = 4;
    for (std::size_t i = 0; i < names.size(); ++i) {
      std::vector<double> w(worst.begin() + static_cast<long>(at), worst.begin() + static_cast<long>(at + warm[i].size()));
      at += warm[i].size();
      fmt::print("{} {} {} {:.3f}\n", names[i], px.size, px.nodes, median(w));
    }
    for (const auto& [name, n] : counts) {
      fmt::print("{}_msgs_{}_leader {} {} {:.0f}\n", cold, name, px.size, px.nodes, worst[at++]);
      fmt::print("{}_msgs_{}_other {} {} {:.0f}\n", cold, name, px.size, px.nodes, worst[at++]);
    }
    std::fflush(stdout);
  }
};

template <typename F>
void time_step(Pmix& px, Samples& s, const std::string& name, F&& step) {
  px.fence(false);
  const double t = wall_ms();
  step();
  s.figure(name).push_back(wall_ms() - t);
}

int hold_s = 0;
constexpr unsigned kAllgatherMaxRanks = 256;

int run_floor(double main_at, double cpu_at_main, int reps) {
  Samples s;
  s.main_at = main_at;
  Pmix px;
  px.fence(false);
  s.ready_at = wall_ms();
  s.cpu = cpu_ms() - cpu_at_main;
  s.own = s.ready_at - main_at;
  const std::uint64_t word = px.me.rank;
  for (int i = 0; i < reps; ++i) {
    time_step(px, s, "fence_nodata", [&] { px.fence(false); });
    time_step(px, s, "fence_data8", [&] {
      px.put(fmt::format("scale.w{}", i), &word, sizeof word);
      px.fence(true);
    });
  }
  s.report(px, "floor");
  sleep(static_cast<unsigned>(hold_s));
  return 0;
}

int run_init(double main_at, double cpu_at_main, int reps, const std::string& ckpt_root, bool device_placement) {
  Samples s;
  s.main_at = main_at;
  trainrt::InitOptions io;
  // --device-placement: a NCCL build's init also agrees on every rank's GPU (without GPUs here it
  // ends in "device collectives off"): the agreement a GPU job pays before NCCL's own init.
  io.nccl = device_placement ? trainrt::DeviceComm::Auto : trainrt::DeviceComm::Off;
  io.bootstrap.quiet = true;
  const double sockets_before = open_sockets();
  auto rt = trainrt::init(io);
  s.ready_at = wall_ms();
  s.cpu = cpu_ms() - cpu_at_main;
  s.own = s.ready_at - main_at;
  {
    const auto c = rt->session->counts();
    const auto peers = rt->session->local_peers();
    s.leader = !peers.empty() && peers.front() == rt->session->rank();
    s.counts = {{"fences", static_cast<double>(c.fences)},       {"fences_data", static_cast<double>(c.fences_with_data)},
                {"puts", static_cast<double>(c.puts)},           {"gets_remote", static_cast<double>(c.gets_remote)},
                {"gets_local", static_cast<double>(c.gets_local)}, {"sockets", open_sockets() - sockets_before}};
  }
  Pmix px;  // PMIx_Init again: the same process, a second reference
  auto& session = *rt->session;
  const bool nccl = trainrt::nccl_built();
  const std::string dir = fmt::format("{}/scale-ckpt-{}", ckpt_root, session.job_id());
  std::vector<float> w(16, static_cast<float>(rt->rank));
  {
    trainrt::checkpoint::Options o;
    o.directory = dir;
    o.keep_last = 1;
    if (rt->rank == 0) std::filesystem::create_directories(dir);
    px.fence(false);
    trainrt::checkpoint::Manager mgr(session, o);
    mgr.register_buffer("w", w.data(), w.size() * sizeof(float), trainrt::DType::F32, {16});
    const std::vector<std::uint8_t> eight(8, 1);
    // NCCL's one-time set-up (library, interfaces) on the roots stays out of the distribution's
    // figures: on an oversubscribed machine a root starved of CPU turned it into ~50 s at 2,048 ranks.
    if (nccl) {
      trainrt::exchange_nccl_unique_ids(session, 0);
      trainrt::exchange_nccl_unique_ids(session, 256);
    }
    for (int i = 0; i < reps; ++i) {
      time_step(px, s, "session_barrier", [&] { session.barrier(); });
      time_step(px, s, "session_bcast8", [&] { session.broadcast(eight, 0); });
      // N reads per rank, N^2 in all: 79 s for one at 2,048 ranks on 2 cores. Shown where it is cheap.
      if (session.size() <= kAllgatherMaxRanks)
        time_step(px, s, "session_allgather8", [&] { session.allgather(eight); });
      if (nccl) {
        time_step(px, s, "uid_1root", [&] { trainrt::exchange_nccl_unique_ids(session, 0); });
        time_step(px, s, "uid_roots256", [&] { trainrt::exchange_nccl_unique_ids(session, 256); });
      }
      time_step(px, s, "ckpt_commit", [&] { mgr.save(static_cast<std::uint64_t>(i)).get(); });
    }
  }
  px.fence(false);
  if (rt->rank == 0) std::filesystem::remove_all(dir);
  s.report(px, "init");
  sleep(static_cast<unsigned>(hold_s));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const double main_at = wall_ms(), cpu_at_main = cpu_ms();
  std::string mode = argc > 1 ? argv[1] : "";
  int reps = 5;
  std::string ckpt_root = "/dev/shm";
  bool device_placement = false;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--reps" && i + 1 < argc) {
      reps = std::atoi(argv[++i]);
      if (reps < 1 || reps > 1000) die(fmt::format("--reps '{}' is not a number from 1 to 1000", argv[i]));
    } else if (a == "--hold" && i + 1 < argc) {
      hold_s = std::atoi(argv[++i]);
      if (hold_s < 1 || hold_s > 600) die(fmt::format("--hold '{}' is not a number of seconds from 1 to 600", argv[i]));
    } else if (a == "--ckpt-dir" && i + 1 < argc) {
      ckpt_root = argv[++i];
    } else if (a == "--device-placement") {
      device_placement = true;
    } else {
      die(fmt::format("unknown argument '{}'; usage: scale_bench floor|init [--reps R] [--ckpt-dir DIR] [--hold S] [--device-placement]", a));
    }
  }
  try {
    if (mode == "floor") return run_floor(main_at, cpu_at_main, reps);
    if (mode == "init") return run_init(main_at, cpu_at_main, reps, ckpt_root, device_placement);
  } catch (const std::exception& e) {
    die(e.what());
  }
  die(fmt::format("mode '{}'; valid: floor, init", mode));
}
