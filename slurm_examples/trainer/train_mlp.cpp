// train-mlp: a small but real data-parallel trainer on the train-runtime stack. An MLP learns a
// fixed teacher function from deterministic synthetic data: every step's global batch is a pure
// function of (seed, step), each rank takes its slice, gradients are averaged with the bucketed
// allreduce, AdamW (the CPU twin of the fused kernel) updates the weights, and the state is
// checkpointed every K steps. A killed run resumes from the last commit and ends bitwise where an
// uninterrupted run ends.
//
//   srun --mpi=pmix --train-runtime -n 4 train-mlp --steps 200 --ckpt-dir DIR --out DIR [...]
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <ctime>
#include <cstring>
#include <filesystem>
#include <optional>
#include <thread>
#include <vector>

#include "goodput.hpp"
#include "trainrt/checkpoint/manager.hpp"
#include "trainrt/error.hpp"
#include "trainrt/strings.hpp"
#include "trainrt/kernels/cpu.hpp"
#include "trainrt/runtime/bucketer.hpp"
#include "trainrt/runtime/init.hpp"
#include "trainrt/runtime/observability.hpp"

using namespace trainrt;
using Clock = std::chrono::steady_clock;

namespace {

constexpr std::size_t kIn = 32, kRowsPerRank = 64;
std::size_t kHidden = 64;  // --hidden

double epoch_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Uniform in [-1, 1) from a counter: the data and the initial weights.
float uniform(std::uint64_t seed, std::uint64_t a, std::uint64_t b) {
  std::uint64_t h = seed * 0x9E3779B97F4A7C15ull ^ (a + 1) * 0xBF58476D1CE4E5B9ull ^ (b + 7) * 0x94D049BB133111EBull;
  h ^= h >> 31;
  h *= 0xD6E8FEB86659FD93ull;
  h ^= h >> 32;
  return static_cast<float>(static_cast<double>(h >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

struct Model {
  std::vector<float> w1 = std::vector<float>(kIn * kHidden), b1 = std::vector<float>(kHidden),
                     w2 = std::vector<float>(kHidden), b2 = std::vector<float>(1);
  std::vector<std::vector<float>*> tensors() { return {&w1, &b1, &w2, &b2}; }
};

struct Fault {
  std::string kind;  // "kill" or "stall"
  unsigned rank = 0;
  std::uint64_t step = 0;
  double seconds = 0;
};

Fault parse_fault(const std::string& text) {
  Fault f;
  std::vector<std::string> parts;
  for (auto part : split(text, ':')) parts.emplace_back(part);
  try {
    if (parts.size() == 3 && parts[0] == "kill") return {"kill", static_cast<unsigned>(std::stoul(parts[1])), std::stoull(parts[2]), 0};
    if (parts.size() == 4 && parts[0] == "stall")
      return {"stall", static_cast<unsigned>(std::stoul(parts[1])), std::stoull(parts[2]), std::stod(parts[3])};
  } catch (const std::exception&) {
  }
  throw Error(fmt::format("'{}' is not kill:RANK:STEP or stall:RANK:STEP:SECONDS", text), "--fault");
}

}  // namespace

int main(int argc, char** argv) {
  const double run_start = epoch_now();
  CLI::App app{"train-mlp: data-parallel MLP on deterministic synthetic data, with checkpoints, watchdog, metrics"};
  std::uint64_t steps = 200, seed = 1, every = 20;
  std::string ckpt_dir, out_dir = ".", fault_text;
  float lr = 3e-3f;
  double watchdog_s = 60;
  app.add_option("--steps", steps, "optimizer steps in total (default 200)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--seed", seed, "data and initialisation seed (default 1)");
  app.add_option("--ckpt-dir", ckpt_dir, "checkpoint directory (required)")->required();
  app.add_option("--ckpt-every", every, "checkpoint every K steps (default 20; 0: never)");
  app.add_option("--out", out_dir, "metrics, trace, flight recorder and summary go here (default .)");
  app.add_option("--lr", lr, "AdamW learning rate (default 3e-3)");
  app.add_option("--hidden", kHidden, "hidden units (default 64; larger makes each step longer)")->check(CLI::Range(1, 1 << 20));
  app.add_option("--watchdog", watchdog_s, "seconds a collective or a step may take before the rank dumps and exits (default 60)");
  app.add_option("--fault", fault_text, "inject kill:RANK:STEP or stall:RANK:STEP:SECONDS in the first attempt (tests)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "train-mlp: %s (see --help)\n", e.what());
    return 2;
  }
  try {
    std::optional<Fault> fault;
    if (!fault_text.empty()) fault = parse_fault(fault_text);
    std::filesystem::create_directories(out_dir);
    checkpoint::install_stop_signals();

    InitOptions io;
    io.nccl = DeviceComm::Off;  // the MLP runs on the CPU; the GPU path is the same calls on device buffers
    io.comm.timeout = std::chrono::milliseconds(static_cast<long>(watchdog_s * 1000));
    auto rt = trainrt::init(io);
    const unsigned rank = rt->rank, world = rt->size;
    if (rank == 0) fmt::print("train-mlp: {}\n", rt->describe());

    // A rerun (its metrics file already exists) never injects the fault again.
    const std::string metrics_path = fmt::format("{}/metrics_rank{}.jsonl", out_dir, rank);
    const bool first_attempt = !std::filesystem::exists(metrics_path);
    FlightRecorder recorder;
    const std::string flight_path = fmt::format("{}/flight_rank{}.json", out_dir, rank);
    // The collective timeout fires first and names the ranks that never arrived; the watchdog
    // (2 s later) catches hangs outside collectives.
    Watchdog watchdog(recorder, rank, std::chrono::milliseconds(static_cast<long>(watchdog_s * 1000) + 2000), flight_path);
    MetricsWriter metrics(metrics_path);
    TraceWriter trace(fmt::format("{}/trace_rank{}.json", out_dir, rank), rank);

    Model model, m, v;
    for (std::size_t i = 0; i < model.w1.size(); ++i) model.w1[i] = uniform(seed, 1, i) * 0.3f;
    for (std::size_t i = 0; i < model.w2.size(); ++i) model.w2[i] = uniform(seed, 2, i) * 0.3f;
    std::vector<std::uint8_t> step_blob(8, 0);

    checkpoint::Options co;
    co.directory = ckpt_dir;
    co.keep_last = 2;
    co.log = [rank](const std::string& msg) {
      if (rank == 0) fmt::print("{}\n", msg);
    };
    checkpoint::Manager ckpt(*rt->session, co);
    auto reg = [&](const char* prefix, Model& mm) {
      const char* names[] = {"w1", "b1", "w2", "b2"};
      auto ts = mm.tensors();
      for (std::size_t i = 0; i < ts.size(); ++i)
        ckpt.register_buffer(fmt::format("{}.{}", prefix, names[i]), ts[i]->data(), ts[i]->size() * 4, DType::F32,
                             {static_cast<std::int64_t>(ts[i]->size())}, checkpoint::Sharding::Replicated);
    };
    reg("param", model);
    reg("adam_m", m);
    reg("adam_v", v);
    ckpt.register_blob("step", &step_blob, checkpoint::Sharding::Replicated);
    std::int64_t restored = ckpt.restore();
    std::uint64_t done = 0;
    if (restored >= 0) std::memcpy(&done, step_blob.data(), 8);
    trace.event("startup+restore", "startup", 0, trace.now());
    metrics.write(fmt::format(R"({{"event":"start","wall":{:.6f},"restored_step":{},"world":{},"restart_count":{}}})",
                              run_start, done, world, rt->restart_count));
    if (rank == 0)
      fmt::print("train-mlp: {} ranks, {} rows per rank, starting after step {} (restart {}{})\n", world, kRowsPerRank,
                 done, rt->restart_count,
                 ckpt.restored_metadata().count("loss") ? ", loss then " + ckpt.restored_metadata().at("loss") : "");

    Model g;
    std::vector<kernels::TensorRef> grad_refs;
    for (auto* t : g.tensors()) grad_refs.push_back({t->data(), t->size()});
    GradientBucketer bucketer(*rt->host, grad_refs, DType::F32, 8 << 10);
    std::vector<kernels::TensorRef> p_refs, m_refs, v_refs;
    std::vector<kernels::ConstTensorRef> g_refs;
    for (std::size_t i = 0; i < 4; ++i) {
      p_refs.push_back({model.tensors()[i]->data(), model.tensors()[i]->size()});
      m_refs.push_back({m.tensors()[i]->data(), m.tensors()[i]->size()});
      v_refs.push_back({v.tensors()[i]->data(), v.tensors()[i]->size()});
      g_refs.push_back({g.tensors()[i]->data(), g.tensors()[i]->size()});
    }

    std::vector<float> x(kRowsPerRank * kIn), y(kRowsPerRank), h(kRowsPerRank * kHidden), dy(kRowsPerRank), dh(kHidden);
    std::shared_future<checkpoint::SaveResult> pending;
    float loss = 0;
    for (std::uint64_t step = done + 1; step <= steps; ++step) {
      watchdog.heartbeat();
      // Signals reach ranks at different moments: agree (max) so every rank stops after the same step.
      std::int32_t stop_here = checkpoint::should_stop() ? 1 : 0, stop_any = 0;
      rt->host->allreduce(&stop_here, &stop_any, 1, DType::I32, ReduceOp::Max);
      if (stop_any) {
        if (rank == 0) fmt::print("train-mlp: stop signal at step {}: final checkpoint, exit {}\n", done,
                                  checkpoint::kRequeueExitCode);
        if (pending.valid()) pending.get();
        std::memcpy(step_blob.data(), &done, 8);
        checkpoint::save_and_exit(ckpt, done);
      }
      // Faults fire in the first attempt only, so the rerun that resumes gets past them.
      if (fault && first_attempt && fault->rank == rank && fault->step == step) {
        if (fault->kind == "kill") {
          fmt::print(stderr, "train-mlp: rank {} kills itself at step {} (--fault)\n", rank, step);
          std::fflush(nullptr);
          ::raise(SIGKILL);
        }
        fmt::print(stderr, "train-mlp: rank {} stalls {} s at step {} (--fault)\n", rank, fault->seconds, step);
        std::this_thread::sleep_for(std::chrono::duration<double>(fault->seconds));
      }
      const double t0 = trace.now();
      // Data: global rows [rank*64, rank*64+64) of step `step`'s batch.
      for (std::size_t r = 0; r < kRowsPerRank; ++r) {
        const std::uint64_t row = step * 1000003ull + rank * kRowsPerRank + r;
        float target = 0;
        for (std::size_t j = 0; j < kIn; ++j) {
          x[r * kIn + j] = uniform(seed + 99, row, j);
          target += std::sin(x[r * kIn + j] * static_cast<float>(j + 1)) * 0.1f;
        }
        y[r] = target;
      }
      // Forward and backward, by hand.
      for (auto* t : g.tensors()) std::fill(t->begin(), t->end(), 0.f);
      float local_loss = 0;
      for (std::size_t r = 0; r < kRowsPerRank; ++r) {
        float out = model.b2[0];
        for (std::size_t k = 0; k < kHidden; ++k) {
          float a = model.b1[k];
          for (std::size_t j = 0; j < kIn; ++j) a += x[r * kIn + j] * model.w1[j * kHidden + k];
          h[r * kHidden + k] = a > 0 ? a : 0;
          out += h[r * kHidden + k] * model.w2[k];
        }
        const float err = out - y[r];
        local_loss += err * err;
        dy[r] = 2.f * err / static_cast<float>(kRowsPerRank);
        g.b2[0] += dy[r];
        for (std::size_t k = 0; k < kHidden; ++k) {
          g.w2[k] += h[r * kHidden + k] * dy[r];
          dh[k] = h[r * kHidden + k] > 0 ? dy[r] * model.w2[k] : 0.f;
          g.b1[k] += dh[k];
          for (std::size_t j = 0; j < kIn; ++j) g.w1[j * kHidden + k] += x[r * kIn + j] * dh[k];
        }
      }
      const double t_comm = trace.now();
      const std::uint64_t seq = recorder.begin("allreduce(grads)", (kIn * kHidden + 2 * kHidden + 1) * 4);
      try {
        bucketer.allreduce(ReduceOp::Avg);
        float loss_sum = local_loss / kRowsPerRank;
        rt->host->allreduce(&loss_sum, &loss, 1, DType::F32, ReduceOp::Avg);
      } catch (const Error& e) {
        recorder.dump(flight_path, rank, fmt::format("step {}: {}", step, e.what()));
        std::fprintf(stderr, "train-mlp: rank %u: collective #%llu of step %llu failed: %s; flight recorder in %s\n", rank,
                     static_cast<unsigned long long>(seq), static_cast<unsigned long long>(step), e.what(), flight_path.c_str());
        std::fflush(nullptr);
        std::_Exit(3);
      }
      recorder.end(seq);
      const double comm_s = trace.now() - t_comm;
      kernels::AdamWConfig cfg;
      cfg.lr = lr;
      cfg.step = static_cast<int>(step);
      kernels::cpu::adamw_f32(p_refs.data(), g_refs.data(), m_refs.data(), v_refs.data(), 4, cfg);
      done = step;
      const double step_s = trace.now() - t0;
      trace.event(fmt::format("step {}", step), "step", t0, step_s);
      trace.event("allreduce", "comm", t_comm, comm_s);
      double stall = 0, persist = -1;
      if (pending.valid() && pending.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
        auto r = pending.get();
        persist = r.persist_seconds;
        pending = {};
      }
      if (every > 0 && step % every == 0) {
        std::memcpy(step_blob.data(), &done, 8);
        if (pending.valid()) persist = pending.get().persist_seconds;  // one in flight at a time
        const double ts = trace.now();
        pending = ckpt.save(step, {{"loss", fmt::format("{:.6f}", loss)}, {"world_size", std::to_string(world)}});
        stall = trace.now() - ts;
        trace.event(fmt::format("checkpoint {} stall", step), "checkpoint", ts, stall);
      }
      const double bytes = (kIn * kHidden + 2 * kHidden + 1) * 4.0;
      metrics.write(fmt::format(
          R"({{"event":"step","step":{},"wall":{:.6f},"step_s":{:.6f},"samples_per_s":{:.1f},"allreduce_s":{:.6f},"allreduce_busbw_gbs":{:.4f},"ckpt_stall_s":{:.6f},"ckpt_persist_s":{},"loss":{:.6g}}})",
          step, epoch_now(), step_s, kRowsPerRank * world / step_s, comm_s,
          world > 1 ? bytes / comm_s * 2.0 * (world - 1) / world / 1e9 : 0.0, stall,
          persist < 0 ? std::string("null") : fmt::format("{:.6f}", persist), loss));
      if (rank == 0 && (step % 20 == 0 || step == steps))
        fmt::print("step {:5}  loss {:.5f}  {:.0f} samples/s  allreduce {:.1f} us\n", step, loss,
                   kRowsPerRank * world / step_s, comm_s * 1e6);
    }
    if (pending.valid()) pending.get();
    if (every > 0 && done % every != 0) {
      std::memcpy(step_blob.data(), &done, 8);
      ckpt.save(done).get();
    }
    ckpt.wait_idle();  // old steps removed before the summary is printed
    std::uint64_t digest = 0;
    for (auto* t : model.tensors()) digest = digest * 31 + kernels::cpu::checksum(t->data(), t->size() * 4);
    metrics.write(fmt::format(R"({{"event":"end","wall":{:.6f},"step":{}}})", epoch_now(), done));
    if (rank == 0) {
      fmt::print("FINAL step {} loss {:.6f} params {:016x}\n", done, loss, digest);
      auto summary = summarize_goodput(fmt::format("{}/metrics_rank0.jsonl", out_dir));
      fmt::print("{}", summary.text);
      write_goodput_files(summary, out_dir);
      fmt::print("trace: {}/trace_rank*.json (chrome://tracing, ui.perfetto.dev)  metrics: {}/metrics_rank*.jsonl\n", out_dir, out_dir);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train-mlp: error: %s\n", e.what());
    return 1;
  }
}
