#include "options.hpp"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <vector>

#include "trainrt/error.hpp"
#include "trainrt/number.hpp"
#include "trainrt/strings.hpp"

namespace train_mlp {

Fault parse_fault(const std::string& text) {
  std::vector<std::string> parts;
  for (auto part : trainrt::split(text, ':')) parts.emplace_back(part);
  const auto rank = parts.size() >= 3 ? trainrt::to_number<unsigned>(parts[1]) : std::nullopt;
  const auto step = parts.size() >= 3 ? trainrt::to_number<std::uint64_t>(parts[2]) : std::nullopt;
  try {
    if (rank && step && parts.size() == 3 && parts[0] == "kill") return {"kill", *rank, *step, 0};
    if (rank && step && parts.size() == 4 && (parts[0] == "stall" || parts[0] == "stall-after" || parts[0] == "slow")) {
      const double seconds = std::stod(parts[3]);
      // A delay is finite and under a day: anything else is a typo, not a test.
      if (seconds >= 0 && seconds < 86400) return {parts[0], *rank, *step, seconds};
    }
  } catch (const std::exception&) {  // std::stod: not a number of seconds
  }
  throw trainrt::Error(
      fmt::format("'{}' is not kill:RANK:STEP, stall:RANK:STEP:SECONDS, stall-after:RANK:STEP:SECONDS or "
                  "slow:RANK:STEP:SECONDS",
                  text),
      "--fault");
}

std::optional<int> parse_options(int argc, char** argv, Options& o) {
  CLI::App app{"train-mlp: data-parallel MLP on deterministic synthetic data, with checkpoints, watchdog, metrics"};
  std::string fault_text;
  app.add_option("--steps", o.steps, "optimizer steps in total (default 200)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--seed", o.seed, "data and initialisation seed (default 1)");
  auto* ckpt = app.add_option("--ckpt-dir", o.ckpt_dir, "checkpoint directory (required)");
  app.add_option("--ckpt-every", o.ckpt_every, "checkpoint every K steps (default 20; 0: never); a save due while the previous one still persists waits for the first step that starts with none in flight");
  app.add_flag("--memory-tier", o.memory_tier,
               "keep every checkpoint in a tmpfs on each node and a buddy copy on another node too; a restart "
               "restores from memory when it can (docs/recovery.md)");
  app.add_option("--memory-tier-dir", o.memory_tier_dir, "the tmpfs for --memory-tier (default /run/trainrt where the node mounts it, else /dev/shm: trainrt-ckpt tier-base)");
  app.add_option("--tier-parity", o.tier_parity,
                 "with --memory-tier: parity over groups of G nodes instead of buddy copies (host memory per node "
                 "1 + 1/(G-1) shards instead of 2; one lost node per group rebuilt; default 0: buddy copies)")
      ->check(CLI::Range(0u, 64u));
  app.add_option("--snapshot-every", o.snapshot_every,
                 "with --memory-tier: a memory-only checkpoint every K steps between the directory's (default 0: none)");
  app.add_option("--ballast-mib", o.ballast_mib,
                 "N MiB of extra state in total, split over the ranks and checkpointed with the model: gigabytes to "
                 "save and restore without slower steps (recovery benchmarks; default 0)");
  app.add_option("--out", o.out_dir, "metrics, trace, flight recorder and summary go here (default .)");
  app.add_option("--lr", o.lr, "AdamW learning rate (default 3e-3)");
  app.add_option("--hidden", o.hidden, "hidden units (default 64; larger makes each step longer)")->check(CLI::Range(1, 1 << 20));
  app.add_option("--device", o.device,
                 "where the model lives: cuda (GPU, NCCL), cpu, or auto (default): cuda when every rank has a GPU of "
                 "its own, else cpu")
      ->check(CLI::IsMember({"auto", "cuda", "cpu"}));
  app.add_option("--watchdog", o.watchdog_s, "seconds a collective or a step may take before the rank dumps and exits (default 60)");
  app.add_option("--term-grace", o.term_grace_s,
                 "seconds the step in progress may take to end after SIGTERM (Slurm ending the step), or 3x the last "
                 "step if longer, before the rank dumps and exits 3: a rank stuck on a peer that is gone leaves now, not "
                 "at KillWait's SIGKILL; restores and checkpoints, the final one included, are not limited (default 2)")
      ->check(CLI::Range(0.1, 3600.0));
  app.add_option("--fault", fault_text,
                 "inject a fault (tests): kill:RANK:STEP (SIGKILL), stall:RANK:STEP:SECONDS (one sleep before the "
                 "step) or stall-after:RANK:STEP:SECONDS (one sleep after the step's update, so the others wait in "
                 "the next step's stop agreement) in the first attempt only; slow:RANK:STEP:SECONDS adds SECONDS of compute to every step from "
                 "STEP on, in every attempt (a straggler)");
  app.add_option("--straggler-every", o.straggler_every,
                 "every N steps the ranks share their compute times and rank 0 logs the stragglers (default 50; 0: never)");
  app.add_option("--straggler-threshold", o.straggler_threshold,
                 "a straggler's compute time per step is more than this fraction above the median (default 0.2: 20%)")
      ->check(CLI::Range(0.0, 100.0));
  app.add_option("--prom-file", o.prom_file,
                 "local rank 0 of each node writes its gauges here in Prometheus text format, atomically, every "
                 "--straggler-every steps and at the end; %n: the node name (e.g. "
                 "/var/lib/prometheus/node-exporter/train-%n.prom)");
  app.add_option("--dump-params", o.dump_params, "rank 0 writes the final parameters (raw f32: w1, b1, w2, b2) to this file");
  app.add_flag("--shard-optimizer", o.shard_optimizer,
               "keep AdamW's moments sharded across the ranks (ZeRO-1: reduce-scatter the gradients, update the owned "
               "slice, allgather the parameters); its checkpoints restore at another world size. cpu engine only");
  app.add_flag("--check-device", o.check_device,
               "only check for a usable CUDA device: exit 0 when there is one, 77 when there is none (or no driver), "
               "1 on any other CUDA error");
  try {
    app.parse(argc, argv);
    if (!o.check_device && ckpt->count() == 0) throw CLI::RequiredError("--ckpt-dir");
    if (!fault_text.empty()) o.fault = parse_fault(fault_text);
    if (o.snapshot_every > 0 && !o.memory_tier) throw CLI::ValidationError("--snapshot-every", "needs --memory-tier");
    if (o.tier_parity > 0 && !o.memory_tier) throw CLI::ValidationError("--tier-parity", "needs --memory-tier");
    if (o.tier_parity == 1)
      throw CLI::ValidationError("--tier-parity", "1: a group needs at least 2 nodes (0 keeps buddy copies)");
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "train-mlp: %s (see --help)\n", e.what());
    return 2;
  } catch (const trainrt::Error& e) {
    std::fprintf(stderr, "train-mlp: %s (see --help)\n", e.what());
    return 2;
  }
  return std::nullopt;
}

}  // namespace train_mlp
