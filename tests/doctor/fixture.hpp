#pragma once
// Crafted run folders for the doctor's tests: what the trainer writes (metrics_rank<R>.jsonl,
// flight_rank<R>.json), healthy or damaged on purpose.
#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "../common/temp_dir.hpp"
#include "trainrt/doctor/doctor.hpp"

namespace trainrt::testing {

namespace fs = std::filesystem;

// A run folder of its own for each test, removed after it.
class RunDir {
 public:
  void write(const std::string& name, const std::string& text) const {
    std::ofstream(path / name, std::ios::binary | std::ios::trunc) << text;
  }
  void append(const std::string& name, const std::string& text) const {
    std::ofstream(path / name, std::ios::binary | std::ios::app) << text;
  }

 private:
  TempDir dir_{"doctor-test-"};

 public:
  const fs::path path = dir_.path();
};

// One attempt's metrics: a start event, `steps` step lines (compute + comm seconds each), an end.
inline std::string metrics(unsigned rank, const std::string& node, unsigned world, unsigned steps, double compute,
                           double comm, bool end = true, double start_wall = 1000, unsigned first_step = 1) {
  std::string s = fmt::format(
      R"({{"event":"start","wall":{:.6f},"restored_step":{},"world":{},"restart_count":0,"device":"cpu","node":"{}","rank":{}}})"
      "\n",
      start_wall, first_step - 1, world, node, rank);
  double wall = start_wall;
  for (unsigned i = 0; i < steps; ++i) {
    wall += compute + comm;
    s += fmt::format(
        R"({{"event":"step","step":{},"wall":{:.6f},"step_s":{:.6f},"samples_per_s":100.0,"allreduce_s":{:.6f},"allreduce_busbw_gbs":1.0,"ckpt_stall_s":0.000000,"ckpt_persist_s":null,"loss":0.5}})"
        "\n",
        first_step + i, wall, compute + comm, comm);
  }
  if (end) s += fmt::format(R"({{"event":"end","wall":{:.6f},"step":{}}})" "\n", wall, first_step + steps - 1);
  return s;
}

// A flight recorder as FlightRecorder::dump writes it: ops 1..last_completed done, then the one in
// flight (if any).
inline std::string flight(unsigned rank, std::uint64_t last_completed, std::optional<std::uint64_t> in_flight,
                          const std::string& reason, const std::string& op = "allreduce(grads)",
                          std::uint64_t bytes = 4096) {
  std::string ops;
  const std::uint64_t first = last_completed > 10 ? last_completed - 10 : 1;
  for (std::uint64_t s = first; s <= last_completed; ++s)
    ops += fmt::format(R"({}{{"seq":{},"op":"{}","bytes":{},"start_s":{}.0,"end_s":{}.5}})", ops.empty() ? "" : ",", s, op,
                       bytes, s, s);
  if (in_flight)
    ops += fmt::format(R"({}{{"seq":{},"op":"{}","bytes":{},"start_s":{}.0,"end_s":null}})", ops.empty() ? "" : ",",
                       *in_flight, op, bytes, *in_flight);
  return fmt::format(R"({{"rank":{},"reason":"{}","last_completed":{},"in_flight":{},"ops":[{}]}})" "\n", rank, reason,
                     last_completed, in_flight ? std::to_string(*in_flight) : "null", ops);
}

// The message shm_communicator throws when peers do not arrive (see shm_communicator.cpp).
inline std::string timeout_reason(unsigned rank, std::uint64_t step, const std::string& missing) {
  return fmt::format("step {}: shm: rank {}: allreduce #{} (arrive) timed out after 10000 ms waiting for rank(s) {}", step,
                     rank, step, missing);
}

// Whether one of the verdict's notes says `part`.
inline bool has_note(const trainrt::doctor::Verdict& v, const std::string& part) {
  for (const auto& n : v.notes)
    if (n.find(part) != std::string::npos) return true;
  return false;
}

}  // namespace trainrt::testing
