#pragma once
// The single-process fixture of the checkpoint tests: a directory, three registered entries
// (a float buffer, a double buffer, a blob) whose contents are a pure function of the step.
#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "thread_world.hpp"
#include "trainrt/checkpoint/manager.hpp"
#include "trainrt/error.hpp"

namespace trainrt::testing {

namespace fs = std::filesystem;


inline void fill_state(std::vector<float>& w, std::vector<double>& d, std::vector<std::uint8_t>& blob, std::uint64_t step) {
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(step * 1000 + i % 997);
  for (std::size_t i = 0; i < d.size(); ++i) d[i] = step + i * 0.5;
  blob.assign(step % 13 + 1, static_cast<std::uint8_t>(step));
}

// Saves `step` from an n-rank world of threads, each rank holding the state of fill_state(step).
inline void save_in_world(const std::string& dir, unsigned n, checkpoint::Sharding sharding, std::uint64_t step) {
  ThreadWorld world(n);
  std::vector<std::thread> ranks;
  std::atomic<int> failures{0};
  for (unsigned r = 0; r < n; ++r)
    ranks.emplace_back([&, r] {
      try {
        ThreadSession session(world, r);
        std::vector<float> w(100000);
        std::vector<double> d(7);
        std::vector<std::uint8_t> blob;
        fill_state(w, d, blob, step);
        checkpoint::Options o;
        o.directory = dir;
        checkpoint::Manager m(session, o);
        m.register_buffer("w", w.data(), w.size() * 4, DType::F32, {100, 1000}, sharding);
        m.register_buffer("d", d.data(), d.size() * 8, DType::F64, {7}, sharding);
        m.register_blob("rng", &blob, sharding);
        m.save(step).get();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %u: %s\n", r, e.what());  // Catch2 macros are not thread-safe
        ++failures;
      }
    });
  for (auto& t : ranks) t.join();
  REQUIRE(failures == 0);
}

struct Fixture {
  std::string dir = (fs::temp_directory_path() / fmt::format("trainrt-ckpt-{}-{}", ::getpid(), counter++)).string();
  std::unique_ptr<bootstrap::Session> session = bootstrap::Session::single_process();
  std::vector<float> w = std::vector<float>(100000);
  std::vector<double> d = std::vector<double>(7);
  std::vector<std::uint8_t> blob;
  std::vector<std::string> log;
  std::unique_ptr<checkpoint::Manager> mgr;
  static inline int counter = 0;

  Fixture() {
    fs::remove_all(dir);
    open();
  }
  ~Fixture() {
    mgr.reset();  // its writer may still be removing old steps
    fs::remove_all(dir);
  }

  void open(checkpoint::Sharding sharding = checkpoint::Sharding::PerRank, bool verify_before_load = false) {
    mgr.reset();
    checkpoint::Options o;
    o.directory = dir;
    o.keep_last = 2;
    o.verify_before_load = verify_before_load;
    o.log = [this](const std::string& m) { log.push_back(m); };
    mgr = std::make_unique<checkpoint::Manager>(*session, o);
    mgr->register_buffer("w", w.data(), w.size() * 4, DType::F32, {100, 1000}, sharding);
    mgr->register_buffer("d", d.data(), d.size() * 8, DType::F64, {7}, sharding);
    mgr->register_blob("rng", &blob, sharding);
  }
  void set(std::uint64_t step) { fill_state(w, d, blob, step); }
  bool holds(std::uint64_t step) {
    auto w0 = w;
    auto d0 = d;
    auto b0 = blob;
    set(step);
    bool same = w0 == w && d0 == d && b0 == blob;
    w = w0, d = d0, blob = b0;
    return same;
  }
  void save(std::uint64_t step) {
    set(step);
    mgr->save(step).get();
  }
  std::string shard(std::uint64_t step) const { return dir + fmt::format("/step_{:012}/rank_00000.shard", step); }
  std::string manifest(std::uint64_t step) const { return dir + fmt::format("/step_{:012}/MANIFEST.json", step); }
  bool logged(const std::string& what) const {
    for (const auto& l : log)
      if (l.find(what) != std::string::npos) return true;
    return false;
  }
};

}  // namespace trainrt::testing
