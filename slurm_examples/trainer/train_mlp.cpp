// train-mlp: a small but real data-parallel trainer on the train-runtime stack. An MLP learns a
// fixed teacher function from deterministic synthetic data: every step's global batch is a pure
// function of (seed, step), each rank takes its slice, gradients are averaged with the bucketed
// allreduce, the fused AdamW updates the weights, and the state is checkpointed every K steps. A
// killed run resumes from the last commit and ends bitwise where an uninterrupted run ends.
//
//   srun --mpi=pmix --train-runtime -n 4 train-mlp --steps 200 --ckpt-dir DIR --out DIR [...]
//
// The model and its two engines (cpu: host memory; cuda: device memory, cuBLAS, NCCL) are in
// mlp.hpp; this file is the program a user copies: start the runtime, choose the engine, register
// the state and restore it, then the loop (agree on stopping, inject faults, one training step,
// checkpoint, metrics), then the final checkpoint and the summary.
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <csignal>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <mutex>
#include <optional>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "ballast.hpp"
#include "goodput.hpp"
#include "mlp.hpp"
#include "monitor.hpp"
#include "options.hpp"
#include "recovery.hpp"
#include "reporting.hpp"
#include "trainrt/checkpoint/manager.hpp"
#include "trainrt/error.hpp"
#include "trainrt/kernels/cuda.hpp"
#include "trainrt/runtime/init.hpp"
#include "trainrt/runtime/observability.hpp"
#include "trainrt/checkpoint/stop_signals.hpp"

using namespace trainrt;
using namespace train_mlp;

namespace {

double epoch_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// State registration: the engine's tensors plus the step counter, then the newest checkpoint every
// rank can verify (if any). Returns the last completed step (0 for a fresh start).
std::uint64_t register_and_restore(checkpoint::Manager& ckpt, Engine& engine, std::vector<std::uint8_t>& step_blob,
                                   Ballast& ballast, std::uint64_t seed) {
  engine.register_state(ckpt);
  ballast.register_state(ckpt);
  ckpt.register_blob("step", &step_blob, checkpoint::Sharding::Replicated);
  std::uint64_t done = 0;
  if (ckpt.restore() >= 0) {
    std::memcpy(&done, step_blob.data(), 8);
    engine.state_restored();
  } else {
    ballast.fill(seed);
  }
  return done;
}

class Trainer {
 public:
  Trainer(const Options& o, Runtime& rt, Engine& engine, checkpoint::Manager& ckpt, Reporting& rep, Monitor& monitor)
      : o_(o), rt_(rt), engine_(engine), ckpt_(ckpt), rep_(rep), monitor_(monitor), rank_(rt.rank), world_(rt.size) {}

  std::vector<std::uint8_t> step_blob = std::vector<std::uint8_t>(8, 0);
  std::uint64_t done = 0;
  float loss = 0;
  // Once: after this run's first completed step (false), or at its end when no step was left (true).
  std::function<void(bool)> after_first_step;
  Ballast* ballast = nullptr;

  void loop(const Shapes& shapes) {
    for (std::uint64_t step = done + 1; step <= o_.steps; ++step) {
      // Any error that ended a collective of the step (the sharded optimizer's allgather, the
      // straggler exchange, ...) ends the rank as a failed gradient allreduce does.
      try {
        one_step(step, shapes);
      } catch (const Error& e) {
        if (!e.failure()) throw;
        die_of_failed_collective(step, "a collective", e);
      }
    }
  }

  // One training step and what follows it: the checkpoint if due, the metrics, the monitor.
  // After SIGTERM the step's agreement, compute and collectives get the termination grace (a rank
  // stuck there on a peer that is gone leaves then); its checkpoint does not.
  void one_step(std::uint64_t step, const Shapes& shapes) {
    rep_.watchdog.heartbeat();
    rep_.watchdog.guard_termination(true);
    stop_if_any_rank_was_signalled();
    inject_fault(step);
    const double t0 = rep_.trace.now();
    slow_fault(step);
    make_batch(shapes, o_.seed, step, rank_, batch_);
    const float local_loss = engine_.forward_backward(batch_);
    const double t_comm = rep_.trace.now();
    average(step, local_loss, shapes.parameter_count() * 4);
    const double comm_s = rep_.trace.now() - t_comm;
    engine_.optimizer_step(o_.lr, step);
    stall_after_fault(step);
    if (ballast) ballast->step(step);
    done = step;
    const double step_s = rep_.trace.now() - t0;
    rep_.watchdog.guard_termination(false);
    // A step three times longer than the last one is no longer just a slow step.
    rep_.watchdog.set_termination_grace(std::chrono::milliseconds(static_cast<long>(1000 * std::max(o_.term_grace_s, 3 * step_s))));
    rep_.trace.event(fmt::format("step {}", step), "step", t0, step_s);
    rep_.trace.event("allreduce", "comm", t_comm, comm_s);
    const auto [stall, persist] = checkpoint_if_due(step);
    report_step(step, shapes, step_s, comm_s, stall, persist);
    if (after_first_step) std::exchange(after_first_step, nullptr)(false);
    rep_.watchdog.guard_termination(true);
    const bool check = monitor_.checks_at(step);  // every --straggler-every steps, a collective
    if (check) rep_.recorder.begin_unnumbered("allgather(step times)");
    monitor_.after_step(step, step_s - comm_s);
    if (check) rep_.recorder.end_unnumbered();
    rep_.watchdog.guard_termination(false);
  }

  // The directory holds `step` already (restored from it): the end needs no save of it again.
  void directory_holds(std::uint64_t step) { disk_saved_step_ = step; }

  // The last checkpoint (unless the last step just got one) and the run's end in the metrics.
  void finish() {
    // Every rank takes part, whether or not its own checkpoint is still in flight: one rank may
    // have collected a result another has not yet.
    wait_for_persist_with_peers(pending_);
    if (pending_.valid()) finish_pending();
    // The directory gets the last step unless a save of it completed in this run: a rerun that
    // restored its last step from the memory tier (killed while that step's save persisted) would
    // otherwise end with the step nowhere once the job's tier is removed. A step the directory
    // already holds is not written again.
    if (o_.ckpt_every > 0 && (disk_saved_step_ != done || disk_deferred_)) {
      std::memcpy(step_blob.data(), &done, 8);
      auto last = ckpt_.save(done, metadata());
      wait_for_persist_with_peers(last);
      last.get();
    }
    ckpt_.wait_idle();  // old steps removed before the summary is printed
    monitor_.finish(done);
    rep_.metrics.write(fmt::format(R"({{"event":"end","wall":{:.6f},"step":{}}})", epoch_now(), done));
  }

 private:
  // Signals reach ranks at different moments: agree (max) so every rank stops after the same step.
  // The same exchange says whether any rank's previous checkpoint is still persisting: a snapshot
  // or a save due then is deferred, by every rank alike. Training never waits for a persist
  // mid-run: that wait would stall it, and when a peer has died it would last until Slurm's
  // KillWait SIGKILL (the persist's agreement waits on the dead peer), where the next collective
  // fails at once.
  void stop_if_any_rank_was_signalled() {
    const std::int32_t mine[2] = {should_stop() ? 1 : 0,
                                  pending_.valid() && pending_.wait_for(std::chrono::seconds(0)) != std::future_status::ready};
    std::int32_t any[2] = {0, 0};
    // Unnumbered, so that collective #N stays step N's gradients; the dump still says a rank
    // stuck here arrived (a peer that stalled after its update leaves the others waiting here).
    rep_.recorder.begin_unnumbered("allreduce(stop agreement)");
    try {
      rt_.host->allreduce(mine, any, 2, DType::I32, ReduceOp::Max);
    } catch (const Error& e) {
      die_of_failed_collective(done + 1, "agreeing on stopping", e);
    }
    rep_.recorder.end_unnumbered();
    checkpoint_busy_ = any[1] != 0;
    const std::int32_t stop_any = any[0];
    if (!stop_any) return;
    rep_.watchdog.guard_termination(false);  // the final checkpoint has all of KillWait
    if (rank_ == 0) fmt::print("train-mlp: stop signal at step {}: final checkpoint, exit {}\n", done, kRequeueExitCode);
    finish_pending();
    std::memcpy(step_blob.data(), &done, 8);
    save_and_exit(ckpt_, done, metadata());  // the loss too: a rerun with no step left reports it
  }

  // Faults fire in the first attempt only, so the rerun that resumes gets past them.
  void inject_fault(std::uint64_t step) {
    const auto& f = o_.fault;
    if (!f || f->kind == "slow" || f->kind == "stall-after" || !rep_.first_attempt || f->rank != rank_ || f->step != step)
      return;
    if (f->kind == "kill") {
      fmt::print(stderr, "train-mlp: rank {} kills itself at step {} (--fault)\n", rank_, step);
      std::fflush(nullptr);
      ::raise(SIGKILL);
    }
    fmt::print(stderr, "train-mlp: rank {} stalls {} s at step {} (--fault)\n", rank_, f->seconds, step);
    std::this_thread::sleep_for(std::chrono::duration<double>(f->seconds));
  }

  void stall_after_fault(std::uint64_t step) {
    const auto& f = o_.fault;
    if (!f || f->kind != "stall-after" || !rep_.first_attempt || f->rank != rank_ || f->step != step) return;
    fmt::print(stderr, "train-mlp: rank {} stalls {} s after step {}'s update (--fault)\n", rank_, f->seconds, step);
    std::this_thread::sleep_for(std::chrono::duration<double>(f->seconds));
  }

  // "slow" makes a straggler of its rank, as a slow GPU or a throttled CPU would: extra time inside
  // the step, before the allreduce (where the others then wait for it), every step from its step on.
  void slow_fault(std::uint64_t step) {
    const auto& f = o_.fault;
    if (f && f->kind == "slow" && f->rank == rank_ && step >= f->step)
      std::this_thread::sleep_for(std::chrono::duration<double>(f->seconds));
  }

  // Gradients averaged by the engine's bucketer, the loss over the host communicator. A failed
  // collective ends this rank at once (exit 3) with the flight recorder naming the step.
  void average(std::uint64_t step, float local_loss, std::size_t grad_bytes) {
    const std::uint64_t seq = rep_.recorder.begin("allreduce(grads)", grad_bytes);
    try {
      engine_.allreduce_gradients();
      rt_.host->allreduce(&local_loss, &loss, 1, DType::F32, ReduceOp::Avg);
    } catch (const Error& e) {
      die_of_failed_collective(step, fmt::format("collective #{}", seq), e);
    }
    rep_.recorder.end(seq);
  }

  // A failed collective ends this rank at once (exit 3), the flight recorder naming the step. No
  // destructor runs: the checkpoint manager's would wait for a persist whose agreement a dead peer
  // never joins, until Slurm's KillWait SIGKILL.
  [[noreturn]] void die_of_failed_collective(std::uint64_t step, const std::string& what, const Error& e) {
    rep_.recorder.dump(rep_.flight_path, rank_, fmt::format("step {}: {}", step, e.what()), e.failure());
    std::fprintf(stderr, "train-mlp: rank %u: %s of step %llu failed: %s; flight recorder in %s\n", rank_, what.c_str(),
                 static_cast<unsigned long long>(step), e.what(), rep_.flight_path.c_str());
    std::fflush(nullptr);
    std::_Exit(3);
  }

  // Every K steps: stage a save (the stall) and let it persist in the background, one at a time.
  // Returns (stall seconds, persist seconds of a save that finished meanwhile, -1 if none).
  std::pair<double, double> checkpoint_if_due(std::uint64_t step) {
    double stall = 0, persist = -1;
    if (pending_.valid() && pending_.wait_for(std::chrono::seconds(0)) == std::future_status::ready) persist = finish_pending();
    bool to_disk = (o_.ckpt_every > 0 && step % o_.ckpt_every == 0) || disk_deferred_;
    bool to_memory = !to_disk && o_.snapshot_every > 0 && (step % o_.snapshot_every == 0 || snapshot_deferred_);
    // Deferred, not skipped: after a long persist (a save of gigabytes) the next snapshot comes at
    // once, not up to --snapshot-every steps later, so a fault then loses fewer steps.
    if (to_memory && checkpoint_busy_) {
      if (rank_ == 0 && !snapshot_deferred_)
        fmt::print("train-mlp: snapshot {} deferred: the previous checkpoint is still persisting\n", step);
      snapshot_deferred_ = true;
      to_memory = false;
    }
    if (to_disk && checkpoint_busy_) {  // saved at the first step that starts with no persist in flight
      if (rank_ == 0 && !disk_deferred_)
        fmt::print("train-mlp: checkpoint {} deferred: the previous checkpoint is still persisting\n", step);
      disk_deferred_ = true;
      to_disk = false;
    }
    if (to_disk) disk_deferred_ = false;
    if (to_disk || to_memory) snapshot_deferred_ = false;  // a save lands in the memory tier too
    if (to_disk || to_memory) {
      std::memcpy(step_blob.data(), &done, 8);
      // Every rank's previous checkpoint had persisted at this step's start (else the save was
      // deferred above): this only takes its result.
      const double ts = rep_.trace.now();
      if (pending_.valid()) {
        wait_for_persist(pending_);
        persist = finish_pending();
      }
      pending_ = to_disk ? ckpt_.save(step, metadata()) : ckpt_.snapshot(step, metadata());
      if (to_disk) disk_saved_step_ = step;  // a directory save that fails ends the run
      pending_snapshot_ = to_memory;
      stall = rep_.trace.now() - ts;
      rep_.trace.event(fmt::format("checkpoint {} stall", step), "checkpoint", ts, stall);
    }
    return {stall, persist};
  }

  checkpoint::Metadata metadata() const {
    return {{"loss", fmt::format("{:.6f}", loss)}, {"world_size", std::to_string(world_)}, {"device", engine_.describe()}};
  }

  void report_step(std::uint64_t step, const Shapes& s, double step_s, double comm_s, double stall, double persist) {
    const double bytes = s.parameter_count() * 4.0;
    const double samples_per_s = s.rows * world_ / step_s;
    const double busbw = world_ > 1 ? bytes / comm_s * 2.0 * (world_ - 1) / world_ / 1e9 : 0.0;
    rep_.metrics.write(fmt::format(
        R"({{"event":"step","step":{},"wall":{:.6f},"step_s":{:.6f},"samples_per_s":{:.1f},"allreduce_s":{:.6f},"allreduce_busbw_gbs":{:.4f},"ckpt_stall_s":{:.6f},"ckpt_persist_s":{},"loss":{:.6g}}})",
        step, epoch_now(), step_s, samples_per_s, comm_s, busbw, stall,
        persist < 0 ? std::string("null") : fmt::format("{:.6f}", persist), loss));
    monitor_.record_step(step_s, comm_s, samples_per_s, busbw, stall, persist);
    if (rank_ == 0 && (step % 20 == 0 || step == o_.steps))
      fmt::print("step {:5}  loss {:.5f}  {:.0f} samples/s  allreduce {:.1f} us\n", step, loss, samples_per_s, comm_s * 1e6);
  }

  const Options& o_;
  Runtime& rt_;
  Engine& engine_;
  checkpoint::Manager& ckpt_;
  Reporting& rep_;
  Monitor& monitor_;
  unsigned rank_, world_;
  Batch batch_;
  std::shared_future<checkpoint::SaveResult> pending_;
  bool pending_snapshot_ = false;  // pending_ is a memory-tier snapshot
  bool checkpoint_busy_ = false;   // some rank's previous checkpoint was persisting at this step's start
  bool disk_deferred_ = false;     // a save was due while a checkpoint persisted: it is taken at the next free step
  bool snapshot_deferred_ = false;  // the same for a snapshot
  std::uint64_t disk_saved_step_ = ~std::uint64_t{0};  // the last step saved to the directory in this run

  // The save in flight, waited for: its persist seconds. A snapshot that did not reach the memory
  // tier is said and training goes on (older steps are where they were); a failed directory save
  // ends the run as it always did.
  // Waiting for a checkpoint to persist (the last one, after the last step) is no hang however
  // long it takes at this state size (seconds per GiB, more than a tight --watchdog): the progress
  // watchdog hears from this wait, for at most 10 minutes; a persist stuck longer is the
  // watchdog's again.
  void wait_for_persist(const std::shared_future<checkpoint::SaveResult>& f) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::minutes(10);
    while (f.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready && std::chrono::steady_clock::now() < until)
      rep_.watchdog.heartbeat();
  }

  // The same after the last step, where no training collective would notice a peer that died:
  // checkpoint::wait_with_peers agrees every 100 ms through the host backend, so a dead peer ends
  // the rank at once (exit 3) as in a step, not at Slurm's KillWait.
  void wait_for_persist_with_peers(const std::shared_future<checkpoint::SaveResult>& f) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::minutes(10);
    rep_.recorder.begin_unnumbered("allreduce(final checkpoint persisted)");
    try {
      checkpoint::wait_with_peers(f, *rt_.host, [&] {
        rep_.watchdog.heartbeat();
        return std::chrono::steady_clock::now() >= until;  // past 10 minutes: done, as every rank
      });
    } catch (const Error& e) {
      die_of_failed_collective(done, "the agreement that the last checkpoint persisted", e);
    }
    rep_.recorder.end_unnumbered();
    if (f.valid()) wait_for_persist(f);  // the clock ran out on some rank: as before, the watchdog's again
  }

  // The checkpoint in flight, if any, finished: its persist (or snapshot) seconds; 0 when none was.
  double finish_pending() {
    auto f = std::exchange(pending_, {});
    if (!f.valid()) return 0;
    if (!pending_snapshot_) return f.get().persist_seconds;
    try {
      return f.get().memory_seconds;
    } catch (const Error& e) {
      if (rank_ == 0) fmt::print(stderr, "train-mlp: {}\n", e.what());
      return -1;
    }
  }
};

void dump_params(const std::string& path, HostParams& params) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  for (auto* t : params.tensors()) f.write(reinterpret_cast<const char*>(t->data()), static_cast<std::streamsize>(t->size() * 4));
  if (!f.flush()) throw Error("cannot write the parameters", path);
}

int train(const Options& o) {
  const double run_start = epoch_now();
  if (o.device == "cuda" && !cuda_engine_built())
    throw Error("this train-mlp was built without CUDA and cuBLAS: use --device cpu or auto", "--device cuda");
  std::filesystem::create_directories(o.out_dir);
  install_stop_signals();
  auto rt = trainrt::init(init_options(o));
  RecoveryTimes times;
  times.process_start = run_start;
  times.init_done = epoch_now();
  const unsigned rank = rt->rank;
  if (rank == 0) fmt::print("train-mlp: {}\n", rt->describe());
  Shapes shapes;
  shapes.hidden = o.hidden;
  auto engine = make_engine(*rt, o, shapes);
  Reporting rep(o, rank);
  std::optional<StartupBeat> starting(std::in_place, rep.watchdog);

  checkpoint::Options co;
  co.directory = o.ckpt_dir;
  co.keep_last = 2;
  co.host = rt->host.get();  // a restore at another world size moves sharded state through it
  co.log = [rank](const std::string& msg) {
    // Rank 0 speaks for the job (fallbacks are agreed, so it has them all); a rank whose memory
    // tier is off says why itself.
    if (rank == 0 || msg.find("memory tier: off") != std::string::npos)
      fmt::print("{}\n", msg);
  };
  co.memory_tier.enabled = o.memory_tier;
  co.memory_tier.base = o.memory_tier_dir;
  co.memory_tier.parity_group = o.tier_parity;
  checkpoint::Manager ckpt(*rt->session, co);
  Monitor monitor(o, *rt, rep.metrics, rep.metrics_path);
  monitor.share_nodes();
  Trainer trainer(o, *rt, *engine, ckpt, rep, monitor);
  Ballast ballast(o.ballast_mib, rank, rt->size);
  trainer.ballast = &ballast;
  trainer.done = register_and_restore(ckpt, *engine, trainer.step_blob, ballast, o.seed);
  // Ranks leave start-up together, through the bootstrap session (its own long timeout): filling
  // or restoring a GiB of state and mapping the memory tier take each rank a different few seconds,
  // and a rank still at it is no hung peer for the first step's collectives (--watchdog 2 failed
  // every start at 1 GiB per rank: "allreduce #3 timed out after 2000 ms").
  rt->session->barrier();
  times.restore_done = epoch_now();
  starting.reset();
  // The loss the restored step ended with: what FINAL reports when no step is left to train.
  if (auto it = ckpt.restored_metadata().find("loss"); it != ckpt.restored_metadata().end()) {
    float restored_loss = 0;
    const auto& text = it->second;
    if (std::from_chars(text.data(), text.data() + text.size(), restored_loss).ec == std::errc{}) trainer.loss = restored_loss;
  }
  const auto& restored = ckpt.last_restore();
  times.restored_step = restored.step;
  times.source = restored.source;
  if (restored.source == "disk" && restored.step >= 0) trainer.directory_holds(static_cast<std::uint64_t>(restored.step));
  times.moved_copies = restored.job_moved_copies;
  times.restore_phases = restored.phases;
  for (const auto& f : restored.fallbacks) times.fallbacks += (times.fallbacks.empty() ? "" : "; ") + f;
  // A step after a failure: the batch script's times and ours make one recovery line, after the
  // first step (that is when the job is training again).
  if (auto script = script_times_from_env(); script && rank == 0)
    trainer.after_first_step = [&rep, script = *script, &times](bool no_step_left) {
      rep.metrics.write(recovery_event(script, times, epoch_now(), no_step_left));
    };
  rep.trace.event("startup+restore", "startup", 0, rep.trace.now());
  // rank, local_rank and node: trainrt-doctor names culprits by node and maps the shared-memory
  // backend's node-local rank numbers to global ones (docs/doctor.md).
  rep.metrics.write(fmt::format(
      R"({{"event":"start","wall":{:.6f},"init_wall":{:.6f},"restore_wall":{:.6f},"restore_source":"{}","restored_step":{},"world":{},"restart_count":{},"device":"{}","rank":{},"local_rank":{},"node":{},"pid":{}}})",
      run_start, times.init_done, times.restore_done, times.source, trainer.done, rt->size, rt->restart_count,
      engine->describe().substr(0, engine->describe().find(' ')),  // cpu | cuda
      rank, rt->local_rank, nlohmann::json(monitor.node()).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
      static_cast<long>(::getpid())));
  if (rank == 0)
    fmt::print("train-mlp: {} ranks, {} rows per rank, device {}, starting after step {} (restart {}{})\n", rt->size,
               shapes.rows, engine->describe(), trainer.done, rt->restart_count,
               ckpt.restored_metadata().count("loss") ? ", loss then " + ckpt.restored_metadata().at("loss") : "");

  trainer.loop(shapes);
  // A failure after the last step (the run's end) leaves the rerun nothing to train: its recovery
  // ends here, and the operator still gets its phases.
  if (trainer.after_first_step) std::exchange(trainer.after_first_step, nullptr)(true);
  trainer.finish();

  HostParams params = engine->download_params();
  const std::uint64_t digest = params_digest(params);
  if (rank == 0) {
    if (!o.dump_params.empty()) dump_params(o.dump_params, params);
    fmt::print("FINAL step {} loss {:.6f} params {:016x}\n", trainer.done, trainer.loss, digest);
    auto summary = summarize_goodput(fmt::format("{}/metrics_rank0.jsonl", o.out_dir));
    fmt::print("{}", summary.text);
    write_goodput_files(summary, o.out_dir);
    fmt::print("trace: {}/trace_rank*.json (chrome://tracing, ui.perfetto.dev)  metrics: {}/metrics_rank*.jsonl\n", o.out_dir,
               o.out_dir);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (auto rc = parse_options(argc, argv, o)) return *rc;
  try {
    return o.check_device ? check_device() : train(o);
  } catch (const checkpoint::WorldSizeError& e) {
    // Not this node's fault, nor one a rerun at this size can mend: train.sbatch requeues for it.
    std::fprintf(stderr, "train-mlp: error: %s\n", e.what());
    return checkpoint::kWorldSizeExitCode;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train-mlp: error: %s\n", e.what());
    return 1;
  }
}
