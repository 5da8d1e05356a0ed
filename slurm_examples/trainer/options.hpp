#pragma once
// train-mlp's command line and its injected faults.
#include <cstdint>
#include <optional>
#include <string>

namespace train_mlp {

struct Fault {
  std::string kind;  // "kill", "stall" or "stall-after" (first attempt only), "slow" (every step from `step` on, every attempt)
  unsigned rank = 0;
  std::uint64_t step = 0;
  double seconds = 0;
};

struct Options {
  std::uint64_t steps = 200, seed = 1, ckpt_every = 20;
  bool memory_tier = false;                  // keep checkpoints in memory too (docs/recovery.md)
  std::string memory_tier_dir;  // a tmpfs on every node; "": checkpoint::default_tier_base()
  unsigned tier_parity = 0;                   // parity groups of this many nodes instead of buddy copies (0: buddies)
  std::uint64_t snapshot_every = 0;          // memory-tier snapshots between directory checkpoints (0: none)
  std::uint64_t ballast_mib = 0;             // extra checkpointed state for recovery benchmarks (ballast.hpp)
  std::string ckpt_dir, out_dir = ".";
  float lr = 3e-3f;
  double watchdog_s = 60;
  double term_grace_s = 2;  // after SIGTERM, the step in progress must end within this
  std::size_t hidden = 64;
  std::string device = "auto";  // auto | cuda | cpu
  std::string dump_params;      // rank 0 writes the final parameters' raw f32 bytes here
  bool check_device = false;    // only say whether a CUDA device is usable (exit 0 / 77 / 1)
  bool shard_optimizer = false;  // ZeRO-1: AdamW's moments sharded across the ranks (cpu engine)
  std::optional<Fault> fault;
  std::uint64_t straggler_every = 50;  // steps between straggler checks (0: never)
  double straggler_threshold = 0.2;    // a straggler computes more than this fraction above the median
  std::string prom_file;               // Prometheus textfile of each node (local rank 0); %n: node name
};

// Fills `options`; returns the exit status when the program should stop now (--help: 0, a bad
// command line: 2, after a message on stderr), nullopt to go on.
std::optional<int> parse_options(int argc, char** argv, Options& options);

// kill:RANK:STEP, stall[-after]:RANK:STEP:SECONDS or slow:RANK:STEP:SECONDS; trainrt::Error otherwise.
Fault parse_fault(const std::string& text);

}  // namespace train_mlp
