// Checkpoint scenarios run as separate processes (under a PMIx server or alone):
//   ckpt_mp cycle DIR N      restore (verify content), then save steps restored+1 .. restored+N
//   ckpt_mp expect-fail DIR  save one step with an injected write failure on one rank: every
//                            rank must get the error, and the previous step must still restore
//   ckpt_mp resave DIR       restore, then save the restored step again with no metadata (what
//                            save_and_exit does after a stop signal): it must be left as it is
//   ckpt_mp save-and-exit DIR  restore, then save_and_exit() of the restored step (exit 75)
// Buffer content is a pure function of (step, rank), so every restore can be verified.
#include <fmt/format.h>

#include <cstring>
#include <vector>

#include "trainrt/bootstrap/session.hpp"
#include "trainrt/checkpoint/manager.hpp"
#include "trainrt/error.hpp"

using namespace trainrt;

namespace {

void fill(std::vector<float>& w, std::vector<std::uint8_t>& blob, std::uint64_t step, unsigned rank) {
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>((step * 31 + rank * 7 + i) % 10007);
  blob.assign(16, 0);
  std::memcpy(blob.data(), &step, 8);
  std::memcpy(blob.data() + 8, &rank, 4);
}

bool matches(const std::vector<float>& w, const std::vector<std::uint8_t>& blob, std::uint64_t step, unsigned rank) {
  std::vector<float> ww(w.size());
  std::vector<std::uint8_t> bb;
  fill(ww, bb, step, rank);
  return ww == w && bb == blob;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    fmt::print(stderr, "usage: ckpt_mp cycle DIR N | expect-fail DIR | resave DIR | save-and-exit DIR\n");
    return 2;
  }
  std::string mode = argv[1], dir = argv[2];
  try {
    auto session = bootstrap::Session::open({std::chrono::seconds(60), true});
    const unsigned rank = session->rank();
    std::vector<float> w((std::size_t{4} << 20) / 4);  // 4 MiB per rank
    std::vector<std::uint8_t> blob;
    checkpoint::Options o;
    o.directory = dir;
    o.keep_last = 2;
    if (std::getenv("CKPT_VERBOSE")) o.log = [rank](const std::string& m) { fmt::print("[{}] {}\n", rank, m); };
    checkpoint::Manager mgr(*session, o);
    mgr.register_buffer("weights", w.data(), w.size() * 4, DType::F32, {static_cast<std::int64_t>(w.size())});
    mgr.register_blob("meta", &blob);
    std::int64_t restored = mgr.restore();
    if (restored >= 0 && !matches(w, blob, static_cast<std::uint64_t>(restored), rank)) {
      fmt::print("rank {}: TORN: restored step {} has wrong content\n", rank, restored);
      return 3;
    }
    fmt::print("rank {}: RESTORED {}\n", rank, restored);
    std::fflush(stdout);
    const std::uint64_t next = static_cast<std::uint64_t>(restored + 1);
    if (mode == "cycle") {
      int n = argc > 3 ? std::atoi(argv[3]) : 1;
      for (int k = 0; k < n; ++k) {
        fill(w, blob, next + k, rank);
        auto r = mgr.save(next + k, {{"saved_by", "cycle"}, {"step", std::to_string(next + k)}}).get();
        fmt::print("rank {}: SAVED {} stall {:.4f} s persist {:.4f} s\n", rank, r.step, r.stall_seconds, r.persist_seconds);
      }
      return 0;
    }
    if (mode == "expect-fail") {
      fill(w, blob, next, rank);
      try {
        mgr.save(next).get();
        fmt::print("rank {}: COMMITTED despite the injected failure\n", rank);
        return 1;
      } catch (const Error& e) {
        fmt::print("rank {}: NO-COMMIT: {}\n", rank, e.what());
      }
      std::int64_t again = mgr.restore();
      bool ok = again == restored && (again < 0 || matches(w, blob, static_cast<std::uint64_t>(again), rank));
      fmt::print("rank {}: {} (restore gives {})\n", rank, ok ? "PREVIOUS-INTACT" : "PREVIOUS-LOST", again);
      return ok ? 0 : 1;
    }
    if (mode == "resave" && restored >= 0) {
      fill(w, blob, 999, rank);  // different state: a rewrite would show in the files
      auto r = mgr.save(static_cast<std::uint64_t>(restored)).get();
      fmt::print("rank {}: {} {}\n", rank, r.already_committed ? "ALREADY-COMMITTED" : "REWROTE", r.step);
      return r.already_committed ? 0 : 1;
    }
    if (mode == "save-and-exit" && restored >= 0) {
      fill(w, blob, 999, rank);
      std::fflush(stdout);
      checkpoint::save_and_exit(mgr, static_cast<std::uint64_t>(restored));
    }
    fmt::print(stderr, "unknown mode '{}' (or nothing to restore)\n", mode);
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
}
