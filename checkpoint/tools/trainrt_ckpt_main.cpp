// trainrt-ckpt: look at a checkpoint directory without starting a job.
//   trainrt-ckpt list DIR                  steps, newest first, and what each holds
//   trainrt-ckpt verify DIR [--step N]     read every shard, compare every checksum and every
//                                          sharded tensor's fingerprint
//   trainrt-ckpt export DIR --tensor NAME [--step N] -o FILE.npy
//                                          one sharded tensor as a NumPy array, verified
//   trainrt-ckpt tier-clean --job ID | --finished [--keep ID] [--base DIR]
//                                          remove this user's memory tiers on this node: one job's,
//                                          or those of jobs Slurm says are over
//   trainrt-ckpt tier-base                 the tmpfs the tiers live in by default on this node
// Exit codes: 0 fine; 1 verify found the step it judges damaged or none committed; 2 bad input
// (and any error at all: every exception ends in one line on stderr and exit 2; so does a step the
// answer depends on that this user may not read: a permission error is never "absent").
// Whatever came from a file is escaped before it is printed: in text, control bytes, invalid UTF-8
// and Unicode controls become \xNN (a metadata value cannot print a line of its own); in JSON,
// invalid UTF-8 becomes U+FFFD.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include "trainrt/access_error.hpp"
#include "trainrt/checkpoint/inspect.hpp"
#include "trainrt/checkpoint/memory_tier.hpp"
#include "trainrt/error.hpp"
#include "trainrt/printable.hpp"

namespace {

using namespace trainrt::checkpoint;
using json = nlohmann::json;
constexpr int kDamaged = 1, kBadInput = 2;

// Printable text for one value read from a file (a backslash doubled): trainrt/printable.hpp.
std::string printable(std::string_view s) { return trainrt::printable_line(s, trainrt::Backslash::doubled); }

// A step this user was refused (or whose disk failed) is neither absent nor damaged: the answer
// cannot be given, so it is an error (exit 2) naming it. list asks about every step; verify about
// the newest committed one, so a refusal there or in a newer step counts, an older one does not.
void refuse_unreadable(const std::vector<StepReport>& reports, bool verify, const std::string& dir) {
  for (const auto& r : reports) {  // newest first
    for (const auto& p : r.problems())
      if (trainrt::reports_access_error(p)) throw trainrt::Error(fmt::format("cannot tell: step {}: {}", r.step, p), dir);
    if (verify && r.committed) return;
  }
}

std::string human_bytes(std::uint64_t b) {
  if (b >= (1ull << 30)) return fmt::format("{:.2f} GiB", static_cast<double>(b) / (1ull << 30));
  if (b >= (1ull << 20)) return fmt::format("{:.1f} MiB", static_cast<double>(b) / (1ull << 20));
  if (b >= (1ull << 10)) return fmt::format("{:.1f} KiB", static_cast<double>(b) / (1ull << 10));
  return fmt::format("{} B", b);
}

std::string state_of(const StepReport& r) {
  if (!r.committed) return "uncommitted";
  if (!r.data_checked) return r.problems().empty() ? "committed" : "DAMAGED";
  return r.intact() ? "intact" : "DAMAGED";
}

json to_json(const StepReport& r, std::optional<std::uint64_t> latest) {
  json shards = json::array();
  for (const auto& s : r.shards) {
    json entries = json::array();
    for (const auto& e : s.entries)
      entries.push_back({{"name", e.name}, {"kind", e.kind}, {"dtype", e.dtype}, {"shape", e.shape},
                         {"bytes", e.bytes}, {"replicated", e.replicated}, {"problem", e.problem}});
    shards.push_back({{"rank", s.rank}, {"file", s.file}, {"bytes", s.bytes}, {"problem", s.problem}, {"entries", entries}});
  }
  json tensors = json::array();
  for (const auto& t : r.tensors)
    tensors.push_back({{"name", t.name}, {"dtype", t.dtype}, {"global_shape", t.global_shape}, {"chunks", t.chunks},
                       {"bytes", t.bytes}, {"problem", t.problem}});
  return {{"step", r.step},       {"state", state_of(r)},        {"latest", latest && *latest == r.step},
          {"world_size", r.world_size}, {"bytes", r.bytes()},     {"metadata", r.metadata},
          {"problems", r.problems()},   {"data_checked", r.data_checked}, {"shards", shards},
          {"tensors", tensors}};
}

void print_table(const std::vector<StepReport>& reports, std::optional<std::uint64_t> latest) {
  fmt::print("{:>14}  {:<12} {:>5} {:>11}  {}\n", "step", "state", "ranks", "size", "metadata");
  for (const auto& r : reports) {
    std::string meta;
    for (const auto& [k, v] : r.metadata) meta += fmt::format("{}{}={}", meta.empty() ? "" : " ", printable(k), printable(v));
    fmt::print("{:>14}  {:<12} {:>5} {:>11}  {}{}\n", r.step, state_of(r), r.committed ? fmt::format("{}", r.world_size) : "-",
               human_bytes(r.bytes()), meta, latest && *latest == r.step ? "  <- latest" : "");
    for (const auto& t : r.tensors)
      fmt::print("{:>14}  tensor {} {} {} in {} chunks ({})\n", "", printable(t.name), printable(t.dtype),
                 fmt::format("[{}]", fmt::join(t.global_shape, ", ")), t.chunks, human_bytes(t.bytes));
    for (const auto& p : r.problems()) fmt::print("{:>14}  {}\n", "", printable(p));
  }
}

// Whether Slurm says job `id` is over: `scontrol show job -o ID` reports a final state, or no
// longer knows the job. Anything else (running, pending, requeued, a controller that does not
// answer, an id that is not Slurm's) is not proof, and the tier stays.
bool slurm_job_finished(const std::string& id) {
  if (id.empty() || id.size() > 32 || id.find_first_not_of("0123456789_") != std::string::npos) return false;
  int out[2];
  if (::pipe(out) != 0) return false;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  posix_spawn_file_actions_adddup2(&actions, out[1], 2);
  posix_spawn_file_actions_addclose(&actions, out[0]);
  std::string a0 = "scontrol", a1 = "show", a2 = "job", a3 = "-o", a4 = id;
  char* args[] = {a0.data(), a1.data(), a2.data(), a3.data(), a4.data(), nullptr};
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, "scontrol", &actions, nullptr, args, environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(out[1]);
  std::string text;
  char buf[4096];
  ssize_t n;
  while (rc == 0 && (n = ::read(out[0], buf, sizeof buf)) > 0 && text.size() < (64u << 10)) text.append(buf, static_cast<std::size_t>(n));
  ::close(out[0]);
  int status = 0;
  if (rc != 0 || ::waitpid(pid, &status, 0) != pid) return false;
  if (text.find("Invalid job id specified") != std::string::npos) return true;  // purged: long over
  static const char* const kOver[] = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
                                      "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"};
  const auto at = text.find("JobState=");
  if (at == std::string::npos) return false;
  const std::string state = text.substr(at + 9, text.find(' ', at) - at - 9);
  return std::find(std::begin(kOver), std::end(kOver), state) != std::end(kOver);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "trainrt-ckpt: inspect train-runtime checkpoints without a job.\n"
      "Exit codes: 0 fine; 1 (verify) the judged step is damaged or no step is committed; 2 bad input.",
      "trainrt-ckpt"};
  app.require_subcommand(1);
  std::string dir;
  bool as_json = false;
  std::optional<std::uint64_t> step;
  auto* list = app.add_subcommand("list", "steps, newest first: state, ranks, size, metadata (reads headers only)");
  list->add_option("DIR", dir, "checkpoint directory")->required();
  list->add_flag("--json", as_json, "one JSON document instead of the table");
  auto* verify = app.add_subcommand(
      "verify",
      "read every shard of every committed step (or --step N) and compare every checksum; exit 0 when the\n"
      "newest committed step (or N) is intact, the one a restore would pick first");
  verify->add_option("DIR", dir, "checkpoint directory")->required();
  verify->add_option("--step", step, "only this step");
  verify->add_flag("--json", as_json, "one JSON document instead of the table");
  std::string tensor, output;
  auto* exporter = app.add_subcommand(
      "export",
      "write one sharded tensor as a NumPy array (.npy; bf16 as its raw bits, '<u2'), assembled from the chunks of\n"
      "any world size; every chunk's checksum and the tensor's fingerprint are checked first, and FILE appears\n"
      "only when all held (never over an existing file)");
  exporter->add_option("DIR", dir, "checkpoint directory")->required();
  exporter->add_option("--tensor", tensor, "the sharded tensor's name (trainrt-ckpt list shows them)")->required();
  exporter->add_option("--step", step, "this step (default: the newest committed step that holds the tensor)");
  exporter->add_option("-o,--output", output, "the .npy file to create")->required();
  const std::string here = default_tier_base();
  std::string base = here, job, keep;
  bool finished = false;
  auto* tier_clean = app.add_subcommand(
      "tier-clean",
      "remove this user's memory tiers (docs/checkpoint.md \"Memory tier\") on this node: --job ID's, or with\n"
      "--finished those of every job `scontrol show job` says is over; never another user's, never one a\n"
      "running process holds");
  tier_clean->add_option("--base", base,
                         fmt::format("the tmpfs the tiers live in (default {} where a tmpfs of root's is mounted there, else {}; "
                                     "here: {})",
                                     kHugePageTierBase, kFallbackTierBase, here));
  auto* tier_base = app.add_subcommand(
      "tier-base", "print the tmpfs this node's memory tiers live in by default, and why not the huge-page one if not");
  auto* job_opt = tier_clean->add_option("--job", job, "remove this job's tier");
  tier_clean->add_flag("--finished", finished, "remove the tiers of jobs Slurm says are over")->excludes(job_opt);
  tier_clean->add_option("--keep", keep, "with --finished: never this job's (the running one)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    fmt::print(stderr, "trainrt-ckpt: {} (see --help)\n", printable(e.what()));
    return kBadInput;
  }
  try {
    if (tier_base->parsed()) {
      fmt::print("{}\n", here);
      if (std::string why = tier_base_problem(kHugePageTierBase); !why.empty()) fmt::print(stderr, "trainrt-ckpt: {}\n", printable(why));
      return 0;
    }
    if (tier_clean->parsed()) {
      if (job.empty() && !finished) throw trainrt::UsageError("give --job ID or --finished", "tier-clean");
      const auto lines = finished ? remove_finished_memory_tiers(base, keep, slurm_job_finished) : remove_memory_tier(base, job);
      for (const auto& l : lines) fmt::print("{}\n", printable(l));
      return 0;
    }
    if (exporter->parsed()) {
      const auto used = export_tensor(dir, tensor, step, output, [](const std::string& m) {
        fmt::print(stderr, "trainrt-ckpt: {}\n", printable(m));
      });
      fmt::print("exported tensor {} of step {} to {}\n", printable(tensor), used, printable(output));
      return 0;
    }
    InspectOptions options;
    options.check_data = verify->parsed();
    options.step = step;
    if (!as_json) options.progress = [](const std::string& m) { fmt::print(stderr, "trainrt-ckpt: {}\n", printable(m)); };
    if (options.check_data) {  // headers first: a refused step ends it before any progress line
      InspectOptions headers = options;
      headers.check_data = false;
      headers.progress = nullptr;
      refuse_unreadable(inspect(dir, headers), true, dir);
    }
    const auto reports = inspect(dir, options);
    refuse_unreadable(reports, verify->parsed(), dir);
    const auto latest = latest_step(dir);
    if (step && reports.empty()) {
      fmt::print(stderr, "trainrt-ckpt: {} has no step {}\n", printable(dir), *step);
      return kBadInput;
    }
    if (as_json) {
      json all = json::array();
      for (const auto& r : reports) all.push_back(to_json(r, latest));
      const json doc{{"directory", dir}, {"latest", latest ? json(*latest) : json()}, {"steps", all}};
      fmt::print("{}\n", doc.dump(2, ' ', false, json::error_handler_t::replace));
    } else {
      print_table(reports, latest);
    }
    if (!verify->parsed()) return 0;
    // The verdict is about the step a restore would take first: the newest committed one.
    for (const auto& r : reports) {
      if (!r.committed) continue;
      if (!as_json) {
        fmt::print("{}: step {} is {}\n", r.intact() ? "OK" : "DAMAGED", r.step, r.intact() ? "intact" : "damaged");
        if (!r.intact()) {
          auto good = std::find_if(reports.begin(), reports.end(), [](const StepReport& x) { return x.intact(); });
          if (good != reports.end()) fmt::print("a restore would fall back to step {}\n", good->step);
          else fmt::print("no intact step to fall back to\n");
        }
      }
      return r.intact() ? 0 : kDamaged;
    }
    if (!as_json) fmt::print("DAMAGED: no committed step in {}\n", printable(dir));
    return kDamaged;
  } catch (const std::exception& e) {  // trainrt::Error, bad_alloc, a failed write to stdout, ...
    std::fflush(stdout);
    fmt::print(stderr, "trainrt-ckpt: {}\n", printable(e.what()));
    return kBadInput;
  } catch (...) {
    std::fflush(stdout);
    std::fputs("trainrt-ckpt: unexpected error\n", stderr);
    return kBadInput;
  }
}
