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

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "goodput.hpp"
#include "mlp.hpp"
#include "monitor.hpp"
#include "options.hpp"
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

// --device: cpu never opens NCCL; cuda requires it (every rank a GPU of its own); auto lets init
// decide the same way on every rank (it allgathers each rank's GPU) and falls back to the host.
InitOptions init_options(const Options& o) {
  InitOptions io;
  if (o.device == "cpu" || (o.device == "auto" && !cuda_engine_built()))
    io.nccl = DeviceComm::Off;
  else
    io.nccl = o.device == "cuda" ? DeviceComm::Required : DeviceComm::Auto;
  io.comm.timeout = std::chrono::milliseconds(static_cast<long>(o.watchdog_s * 1000));
  return io;
}

std::unique_ptr<Engine> make_engine(Runtime& rt, const Options& o, const Shapes& shapes) {
  const bool cuda = o.device == "cuda" || (o.device == "auto" && rt.device && cuda_engine_built());
  if (o.shard_optimizer && cuda) throw Error("the sharded optimizer runs on the cpu engine: add --device cpu", "--shard-optimizer");
  if (o.shard_optimizer) return make_sharded_cpu_engine(rt, shapes, o.seed);
  return cuda ? make_cuda_engine(rt, shapes, o.seed) : make_cpu_engine(rt, shapes, o.seed);
}

// --check-device: the kernels' own test of a usable GPU (no device or no driver: 77; anything else
// that fails, a driver older than the runtime say, is an error).
int check_device() {
  if (!cuda_engine_built()) {
    fmt::print("train-mlp: built without the cuda engine: no GPU path\n");
    return 77;
  }
  if (!kernels::cuda::device_available()) {
    fmt::print("train-mlp: no CUDA device\n");
    return 77;
  }
  fmt::print("train-mlp: a CUDA device is usable\n");
  return 0;
}

// Where one rank's run reports: metrics, trace, flight recorder and the watchdog around them.
struct Reporting {
  std::string metrics_path, flight_path;
  bool first_attempt;  // a rerun (its metrics file already exists) never injects the fault again
  FlightRecorder recorder;
  Watchdog watchdog;
  MetricsWriter metrics;
  TraceWriter trace;
  Reporting(const Options& o, unsigned rank)
      : metrics_path(fmt::format("{}/metrics_rank{}.jsonl", o.out_dir, rank)),
        flight_path(fmt::format("{}/flight_rank{}.json", o.out_dir, rank)),
        first_attempt(!std::filesystem::exists(metrics_path)),
        // The collective timeout fires first and names the ranks that never arrived; the watchdog
        // (2 s later) catches hangs outside collectives.
        watchdog(recorder, rank, std::chrono::milliseconds(static_cast<long>(o.watchdog_s * 1000) + 2000), flight_path),
        metrics(metrics_path),
        trace(fmt::format("{}/trace_rank{}.json", o.out_dir, rank), rank) {}
};

// State registration: the engine's tensors plus the step counter, then the newest checkpoint every
// rank can verify (if any). Returns the last completed step (0 for a fresh start).
std::uint64_t register_and_restore(checkpoint::Manager& ckpt, Engine& engine, std::vector<std::uint8_t>& step_blob) {
  engine.register_state(ckpt);
  ckpt.register_blob("step", &step_blob, checkpoint::Sharding::Replicated);
  std::uint64_t done = 0;
  if (ckpt.restore() >= 0) {
    std::memcpy(&done, step_blob.data(), 8);
    engine.state_restored();
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

  void loop(const Shapes& shapes) {
    for (std::uint64_t step = done + 1; step <= o_.steps; ++step) {
      rep_.watchdog.heartbeat();
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
      done = step;
      const double step_s = rep_.trace.now() - t0;
      rep_.trace.event(fmt::format("step {}", step), "step", t0, step_s);
      rep_.trace.event("allreduce", "comm", t_comm, comm_s);
      const auto [stall, persist] = checkpoint_if_due(step);
      report_step(step, shapes, step_s, comm_s, stall, persist);
      monitor_.after_step(step, step_s - comm_s);
    }
  }

  // The last checkpoint (unless the last step just got one) and the run's end in the metrics.
  void finish() {
    if (pending_.valid()) pending_.get();
    if (o_.ckpt_every > 0 && done % o_.ckpt_every != 0) {
      std::memcpy(step_blob.data(), &done, 8);
      ckpt_.save(done).get();
    }
    ckpt_.wait_idle();  // old steps removed before the summary is printed
    monitor_.finish(done);
    rep_.metrics.write(fmt::format(R"({{"event":"end","wall":{:.6f},"step":{}}})", epoch_now(), done));
  }

 private:
  // Signals reach ranks at different moments: agree (max) so every rank stops after the same step.
  void stop_if_any_rank_was_signalled() {
    std::int32_t stop_here = should_stop() ? 1 : 0, stop_any = 0;
    rt_.host->allreduce(&stop_here, &stop_any, 1, DType::I32, ReduceOp::Max);
    if (!stop_any) return;
    if (rank_ == 0) fmt::print("train-mlp: stop signal at step {}: final checkpoint, exit {}\n", done, kRequeueExitCode);
    if (pending_.valid()) pending_.get();
    std::memcpy(step_blob.data(), &done, 8);
    save_and_exit(ckpt_, done);
  }

  // Faults fire in the first attempt only, so the rerun that resumes gets past them.
  void inject_fault(std::uint64_t step) {
    const auto& f = o_.fault;
    if (!f || f->kind == "slow" || !rep_.first_attempt || f->rank != rank_ || f->step != step) return;
    if (f->kind == "kill") {
      fmt::print(stderr, "train-mlp: rank {} kills itself at step {} (--fault)\n", rank_, step);
      std::fflush(nullptr);
      ::raise(SIGKILL);
    }
    fmt::print(stderr, "train-mlp: rank {} stalls {} s at step {} (--fault)\n", rank_, f->seconds, step);
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
      rep_.recorder.dump(rep_.flight_path, rank_, fmt::format("step {}: {}", step, e.what()), e.failure());
      std::fprintf(stderr, "train-mlp: rank %u: collective #%llu of step %llu failed: %s; flight recorder in %s\n", rank_,
                   static_cast<unsigned long long>(seq), static_cast<unsigned long long>(step), e.what(),
                   rep_.flight_path.c_str());
      std::fflush(nullptr);
      std::_Exit(3);
    }
    rep_.recorder.end(seq);
  }

  // Every K steps: stage a save (the stall) and let it persist in the background, one at a time.
  // Returns (stall seconds, persist seconds of a save that finished meanwhile, -1 if none).
  std::pair<double, double> checkpoint_if_due(std::uint64_t step) {
    double stall = 0, persist = -1;
    if (pending_.valid() && pending_.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
      persist = pending_.get().persist_seconds;
      pending_ = {};
    }
    if (o_.ckpt_every > 0 && step % o_.ckpt_every == 0) {
      std::memcpy(step_blob.data(), &done, 8);
      // Waiting here for the previous save to persist stalls training too: it counts in the stall,
      // as Manager::save() counts its own wait for a save still in flight.
      const double ts = rep_.trace.now();
      if (pending_.valid()) persist = pending_.get().persist_seconds;
      pending_ = ckpt_.save(step, {{"loss", fmt::format("{:.6f}", loss)}, {"world_size", std::to_string(world_)},
                                   {"device", engine_.describe()}});
      stall = rep_.trace.now() - ts;
      rep_.trace.event(fmt::format("checkpoint {} stall", step), "checkpoint", ts, stall);
    }
    return {stall, persist};
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
  const unsigned rank = rt->rank;
  if (rank == 0) fmt::print("train-mlp: {}\n", rt->describe());
  Shapes shapes;
  shapes.hidden = o.hidden;
  auto engine = make_engine(*rt, o, shapes);
  Reporting rep(o, rank);

  checkpoint::Options co;
  co.directory = o.ckpt_dir;
  co.keep_last = 2;
  co.host = rt->host.get();  // a restore at another world size moves sharded state through it
  co.log = [rank](const std::string& msg) {
    if (rank == 0) fmt::print("{}\n", msg);
  };
  checkpoint::Manager ckpt(*rt->session, co);
  Monitor monitor(o, *rt, rep.metrics, rep.metrics_path);
  monitor.share_nodes();
  Trainer trainer(o, *rt, *engine, ckpt, rep, monitor);
  trainer.done = register_and_restore(ckpt, *engine, trainer.step_blob);
  rep.trace.event("startup+restore", "startup", 0, rep.trace.now());
  // rank, local_rank and node: trainrt-doctor names culprits by node and maps the shared-memory
  // backend's node-local rank numbers to global ones (docs/doctor.md).
  rep.metrics.write(fmt::format(
      R"({{"event":"start","wall":{:.6f},"restored_step":{},"world":{},"restart_count":{},"device":"{}","rank":{},"local_rank":{},"node":{}}})",
      run_start, trainer.done, rt->size, rt->restart_count,
      engine->describe().substr(0, engine->describe().find(' ')),  // cpu | cuda
      rank, rt->local_rank, nlohmann::json(monitor.node()).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)));
  if (rank == 0)
    fmt::print("train-mlp: {} ranks, {} rows per rank, device {}, starting after step {} (restart {}{})\n", rt->size,
               shapes.rows, engine->describe(), trainer.done, rt->restart_count,
               ckpt.restored_metadata().count("loss") ? ", loss then " + ckpt.restored_metadata().at("loss") : "");

  trainer.loop(shapes);
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
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train-mlp: error: %s\n", e.what());
    return 1;
  }
}
