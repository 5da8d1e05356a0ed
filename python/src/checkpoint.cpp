// trainrt._trainrt.Manager and verify(): checkpoint::Manager and checkpoint::inspect for Python.
//
// Registered tensors are used in place (the Manager stages and restores their memory directly);
// the binding keeps a reference to each so Python cannot free memory the runtime still points
// at. Element types the runtime has no DType for (uint8, int8, bool, ...) are saved as opaque
// bytes: copied into a blob at save(), back into the tensor after restore().
#include <fmt/format.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <future>
#include <map>
#include <mutex>
#include <optional>

#include <unistd.h>

#include "bindings.hpp"
#include "tensor.hpp"
#include "trainrt/checkpoint/inspect.hpp"
#include "trainrt/checkpoint/manager.hpp"
#include "trainrt/checkpoint/stop_signals.hpp"
#include "world.hpp"

namespace trainrt::py {

namespace {

namespace ckpt = trainrt::checkpoint;

ckpt::Sharding sharding(bool replicated) { return replicated ? ckpt::Sharding::Replicated : ckpt::Sharding::PerRank; }

nb::dict save_result(const ckpt::SaveResult& r) {
  nb::dict d;
  d["step"] = r.step;
  d["stall_seconds"] = r.stall_seconds;
  d["persist_seconds"] = r.persist_seconds;
  d["shard_bytes"] = r.shard_bytes;
  d["already_committed"] = r.already_committed;
  return d;
}

class PyManager final : public World::SessionUser {
 public:
  PyManager(World& world, const std::string& directory, unsigned keep_last, bool verify_before_load, bool verbose)
      : world_(world) {
    if (keep_last < 1) throw UsageError(fmt::format("keep_last={}: keep at least 1 step", keep_last), "checkpoint");
    ckpt::Options o;
    o.directory = directory;
    o.keep_last = keep_last;
    o.verify_before_load = verify_before_load;
    if (verbose) {
      // Called from the writer thread too: plain stderr, never Python.
      const unsigned rank = world.runtime().rank;
      o.log = [rank](const std::string& line) { std::fprintf(stderr, "trainrt [rank %u] %s\n", rank, line.c_str()); };
    }
    {
      nb::gil_scoped_release release;
      manager_ = std::make_unique<ckpt::Manager>(world.session(), std::move(o));
    }
    install_stop_signals();
    world_.add_session_user(this);
  }

  // The world's session exchanges wait here: for the save in flight (its commit uses the session)
  // and rank 0's removal of old steps after it. A save that waits for a dead rank never ends: the
  // exchange refuses instead of waiting with it.
  void wait_session_idle() override {
    if (::getpid() != owner_pid_) return;
    std::lock_guard lock(mutex_);
    refuse_locked();
    manager_->wait_idle();
  }

  ~PyManager() {
    world_.remove_session_user(this);
    if (::getpid() == owner_pid_) adopt_world_failure();  // no other thread holds it now
    if (::getpid() != owner_pid_ || peers_failed_) {
      // A forked child: the writer thread and staging are the parent's. A peer lost during
      // wait(watch_peers=True): the writer thread waits for it and the process is ending.
      (void)manager_.release();
      return;
    }
    nb::gil_scoped_release release;  // waits for a save in flight
    try {
      manager_.reset();
    } catch (...) {
    }
  }

  // `shard`: (global_shape, offsets) of this rank's chunk of a global tensor, or none.
  void register_tensor(const std::string& name, nb::handle tensor, bool replicated,
                       std::optional<std::pair<std::vector<std::int64_t>, std::vector<std::int64_t>>> shard) {
    refuse_after_peer_failure();
    View v = view(tensor, fmt::format("tensor '{}'", name));
    if (v.on_cuda && !kHaveCuda)
      throw UsageError(fmt::format("tensor '{}' is on CUDA device {}, and this trainrt was built without CUDA "
                                   "(rebuild with the CUDA toolkit present, or register a CPU copy)",
                                   name, v.device_id),
                       "checkpoint");
    if (v.on_cuda && !v.dtype)
      throw UsageError(fmt::format("tensor '{}' is a CUDA {} tensor: device tensors must be float32, float64, float16, "
                                   "bfloat16, int32 or int64",
                                   name, v.dtype_name),
                       "checkpoint");
    if (shard && !v.dtype)
      throw UsageError(fmt::format("tensor '{}' is {}: a chunk of a global tensor must be float32, float64, float16, "
                                   "bfloat16, int32 or int64",
                                   name, v.dtype_name),
                       "checkpoint");
    const auto where = v.on_cuda ? ckpt::Location::Device : ckpt::Location::Host;
    if (shard) {
      manager_->register_buffer(name, v.data, v.bytes, *v.dtype, v.shape, ckpt::Shard{shard->first, shard->second}, where);
      arrays_.push_back(std::move(v));
    } else if (v.dtype) {
      manager_->register_buffer(name, v.data, v.bytes, *v.dtype, v.shape, sharding(replicated), where);
      arrays_.push_back(std::move(v));
    } else {
      raw_.push_back(Raw{std::move(v), {}});
      try {
        manager_->register_blob(name, &raw_.back().blob, sharding(replicated));
      } catch (...) {
        raw_.pop_back();
        throw;
      }
    }
  }

  void register_blob(const std::string& name, bool replicated) {
    refuse_after_peer_failure();
    if (blobs_.count(name)) throw UsageError(fmt::format("'{}' is registered twice", name), "checkpoint");
    auto& b = blobs_[name];
    try {
      manager_->register_blob(name, &b, sharding(replicated));
    } catch (...) {
      blobs_.erase(name);
      throw;
    }
  }
  void set_blob(const std::string& name, nb::bytes data) {
    auto& b = blob(name);
    b.assign(reinterpret_cast<const std::uint8_t*>(data.c_str()), reinterpret_cast<const std::uint8_t*>(data.c_str()) + data.size());
  }
  nb::bytes get_blob(const std::string& name) {
    auto& b = blob(name);
    return nb::bytes(reinterpret_cast<const char*>(b.data()), b.size());
  }

  void save(std::uint64_t step, const ckpt::Metadata& metadata) {
    refuse_after_peer_failure();
    nb::gil_scoped_release release;
    std::lock_guard lock(mutex_);
    refuse_collective_locked();  // again: another thread's wait may have failed while this one waited
    // An earlier save still in flight: its outcome first (an error of it surfaces here).
    if (pending_) finish_pending();
    stage_raw();
    pending_ = manager_->save(step, metadata);
  }

  // The last save()'s outcome once it is committed on every rank (None when none is pending),
  // without waiting for old steps' removal as wait() does: what save() needs of its predecessor.
  nb::object finish() { return settle(false); }
  nb::object wait() { return settle(true); }

  // wait(), made by every rank at once (ckpt::wait_with_peers): a rank that died raises its
  // PeerError here at once, where the commit's own agreement waits until the session's timeout.
  nb::object wait_watching_peers() {
    refuse_after_peer_failure();
    std::optional<ckpt::SaveResult> r;
    {
      nb::gil_scoped_release release;
      std::lock_guard lock(mutex_);
      refuse_collective_locked();
      try {
        std::lock_guard collective(world_.collective_mutex());
        // Through the world: its PeerError then also stops every other Manager of this world.
        world_.collective(
            [&] { ckpt::wait_with_peers(pending_.value_or(std::shared_future<ckpt::SaveResult>{}), *world_.runtime().host); });
      } catch (const Error& e) {
        // The save in flight waits for the dead rank: nothing may wait for it again (the
        // destructor, or a later call, would until the session's timeout or Slurm's SIGKILL).
        if (e.failure()) abandon_pending();
        throw;
      }
      if (pending_) r = finish_pending();
      manager_->wait_idle();
    }
    if (!r) return nb::none();
    return save_result(*r);
  }

  bool peers_failed() {
    if (std::unique_lock lock(mutex_, std::try_to_lock); lock.owns_lock()) adopt_world_failure();
    return peers_failed_;
  }

  // Whether the last save() is committed (or failed) on every rank, without blocking: a thread
  // that holds the manager (a wait() in progress) means not yet.
  bool save_done() {
    std::unique_lock lock(mutex_, std::try_to_lock);
    if (!lock.owns_lock()) return false;
    return !pending_ || pending_->wait_for(std::chrono::seconds(0)) == std::future_status::ready;
  }

  std::int64_t restore() {
    refuse_after_peer_failure();
    nb::gil_scoped_release release;
    std::lock_guard lock(mutex_);
    refuse_collective_locked();
    if (pending_) finish_pending();
    // The report last_restore reads, kept when the restore ends, returned or thrown.
    struct KeepReport {
      PyManager& m;
      ~KeepReport() {
        try {
          std::lock_guard report_lock(m.report_mutex_);
          m.last_report_ = m.manager_->last_restore();
        } catch (...) {  // out of memory for the copy: the previous report stays
        }
      }
    } keep{*this};
    std::int64_t step = manager_->restore();
    if (step >= 0) unstage_raw();
    return step;
  }

  ckpt::Metadata restored_metadata() const { return manager_->restored_metadata(); }

  // The last restore()'s report as a dict (trainrt.checkpoint.Manager.last_restore): the copy
  // restore() kept, under its own lock, so a wait() or restore() on another thread never blocks it.
  nb::dict last_restore() {
    ckpt::RestoreReport r;
    {
      std::lock_guard report_lock(report_mutex_);
      r = last_report_;
    }
    nb::list phases;
    for (const auto& p : r.phases) {
      nb::dict d;
      d["phase"] = p.name;
      d["step"] = p.step < 0 ? nb::none() : nb::int_(p.step);
      d["seconds"] = p.seconds;
      phases.append(d);
    }
    nb::dict d;
    d["step"] = r.step < 0 ? nb::none() : nb::int_(r.step);
    d["source"] = r.source.empty() ? nb::none() : nb::str(r.source.c_str());
    d["seconds"] = r.seconds;
    d["phases"] = phases;
    d["fallbacks"] = r.fallbacks;
    d["local_copies"] = r.local_copies;
    d["moved_copies"] = r.moved_copies;
    d["job_moved_copies"] = r.job_moved_copies;
    d["job_moved_bytes"] = r.job_moved_bytes;
    d["job_rebuilt_shards"] = r.job_rebuilt_shards;
    return d;
  }
  std::string directory() const { return manager_->directory(); }

  [[noreturn]] void save_and_exit(std::uint64_t step, const ckpt::Metadata& metadata) {
    refuse_after_peer_failure();
    nb::gil_scoped_release release;
    mutex_.lock();  // never unlocked once the save starts: the process exits
    try {
      refuse_collective_locked();
    } catch (...) {
      mutex_.unlock();
      throw;
    }
    try {
      if (pending_) finish_pending();
      stage_raw();
    } catch (const std::exception& e) {
      // save_and_exit never returns: the failure goes where the runtime's own report goes.
      std::fprintf(stderr, "trainrt: final checkpoint of step %llu failed: %s\n", static_cast<unsigned long long>(step),
                   e.what());
      std::fflush(nullptr);
      std::_Exit(1);
    }
    trainrt::save_and_exit(*manager_, step, metadata);
  }

 private:
  struct Raw {
    View view;
    std::vector<std::uint8_t> blob;
  };

  std::vector<std::uint8_t>& blob(const std::string& name) {
    auto it = blobs_.find(name);
    if (it == blobs_.end()) throw UsageError(fmt::format("no blob '{}' is registered", name), "checkpoint");
    return it->second;
  }

  void refuse_after_peer_failure() const {
    if (peers_failed_)
      throw Error("a rank failed while this Manager's save was in flight (seen by wait(watch_peers=True) or a "
                  "collective of the world): the save waits for it; end the process",
                  "checkpoint");
  }
  void refuse_locked() {
    adopt_world_failure();
    refuse_after_peer_failure();
  }
  // For the calls that need every rank (save, restore, save_and_exit, wait(watch_peers=True)):
  // after a PeerError of the world's collectives none of them can complete.
  void refuse_collective_locked() {
    refuse_locked();
    if (world_.peer_failed())
      throw Error("a rank of the world failed (one of its collectives raised PeerError): no save or restore can "
                  "agree without it; end the process",
                  "checkpoint");
  }

  // The world's own collectives saw a rank fail while a save is still in flight: that save's
  // commit waits for the rank too, so this Manager is done as after wait(watch_peers=True)'s
  // PeerError. A save already finished is left to be collected as usual. Needs mutex_ (or no
  // other thread).
  void adopt_world_failure() {
    if (peers_failed_ || !world_.peer_failed() || !pending_ || !pending_->valid() ||
        pending_->wait_for(std::chrono::seconds(0)) == std::future_status::ready)
      return;
    abandon_pending();
  }

  // The save in flight waits for a dead rank: this Manager is done, nothing waits for that save
  // again, and since its writer thread is inside the world's PMIx session (the commit's fence),
  // the process's end must not finalize or free that session under it.
  void abandon_pending() {
    peers_failed_ = true;
    pending_.reset();
    world_.leave_runtime_at_exit();
  }

  // finish() and wait(): the pending save's result (None when there is none); wait() also waits
  // until the Manager's writer is idle.
  nb::object settle(bool until_idle) {
    refuse_after_peer_failure();
    std::optional<ckpt::SaveResult> r;
    {
      nb::gil_scoped_release release;
      std::lock_guard lock(mutex_);
      refuse_locked();
      if (pending_) r = finish_pending();
      if (until_idle) manager_->wait_idle();
    }
    if (!r) return nb::none();
    return save_result(*r);
  }

  ckpt::SaveResult finish_pending() {
    auto f = std::move(*pending_);
    pending_.reset();
    return f.get();
  }

  // Opaque-byte tensors: their current contents into their blobs (save() copies blobs as they are).
  void stage_raw() {
    for (auto& r : raw_) r.blob.assign(static_cast<const std::uint8_t*>(r.view.data),
                                       static_cast<const std::uint8_t*>(r.view.data) + r.view.bytes);
  }
  void unstage_raw() {
    for (auto& r : raw_) {
      if (r.blob.size() != r.view.bytes)
        throw CheckpointError(fmt::format("the checkpoint holds {} bytes for a {}-byte {} tensor (shape changed?)",
                                          r.blob.size(), r.view.bytes, r.view.dtype_name),
                              "checkpoint");
      std::memcpy(r.view.data, r.blob.data(), r.blob.size());
    }
  }

  World& world_;  // kept alive by the binding (keep_alive)
  std::atomic<bool> peers_failed_{false};  // wait_watching_peers() saw a rank fail (read outside mutex_)
  std::unique_ptr<ckpt::Manager> manager_;
  int owner_pid_ = ::getpid();
  std::vector<View> arrays_;                               // keeps registered tensors alive
  std::deque<Raw> raw_;                                    // deque: blob addresses stay put
  std::map<std::string, std::vector<std::uint8_t>> blobs_;  // Python-managed blobs
  std::optional<std::shared_future<ckpt::SaveResult>> pending_;
  // save/wait/restore from two Python threads (the GIL is released in them) take turns.
  std::mutex mutex_;
  std::mutex report_mutex_;         // last_report_ only; never held while waiting on anything
  ckpt::RestoreReport last_report_;  // of the last restore(), for last_restore
};

nb::dict step_report(const ckpt::StepReport& s) {
  nb::dict d;
  d["step"] = s.step;
  d["committed"] = s.committed;
  d["intact"] = s.intact();
  d["data_checked"] = s.data_checked;
  d["world_size"] = s.world_size;
  d["bytes"] = s.bytes();
  d["metadata"] = s.metadata;
  d["problems"] = s.problems();
  nb::list entries;
  for (const auto& sh : s.shards)
    for (const auto& e : sh.entries) {
      nb::dict ed;
      ed["rank"] = sh.rank;
      ed["name"] = e.name;
      ed["kind"] = e.kind;
      ed["dtype"] = e.dtype;
      ed["shape"] = e.shape;
      ed["bytes"] = e.bytes;
      ed["replicated"] = e.replicated;
      ed["problem"] = e.problem;
      entries.append(ed);
    }
  d["entries"] = entries;
  return d;
}

}  // namespace

void bind_checkpoint(nb::module_& m) {
  // Weak references: a test sees the native Manager go (and not wait) after a peer failure.
  nb::class_<PyManager>(m, "Manager", "Use trainrt.checkpoint.Manager.", nb::is_weak_referenceable())
      .def(nb::init<World&, const std::string&, unsigned, bool, bool>(), nb::arg("world"), nb::arg("directory"),
           nb::arg("keep_last") = 2, nb::arg("verify_before_load") = false, nb::arg("verbose") = false,
           nb::keep_alive<1, 2>())  // the world outlives its managers
      .def("register_tensor", &PyManager::register_tensor, nb::arg("name"), nb::arg("tensor"), nb::arg("replicated") = false,
           nb::arg("shard").none() = nb::none())
      .def("register_blob", &PyManager::register_blob, nb::arg("name"), nb::arg("replicated") = false)
      .def("set_blob", &PyManager::set_blob)
      .def("get_blob", &PyManager::get_blob)
      .def("save", &PyManager::save, nb::arg("step"), nb::arg("metadata"))
      .def("wait", &PyManager::wait)
      .def("wait_watching_peers", &PyManager::wait_watching_peers)
      .def("save_done", &PyManager::save_done)
      .def_prop_ro("peers_failed", &PyManager::peers_failed)
      .def("finish", &PyManager::finish)
      .def("restore", &PyManager::restore)
      .def_prop_ro("restored_metadata", &PyManager::restored_metadata)
      .def_prop_ro("last_restore", &PyManager::last_restore)
      .def_prop_ro("directory", &PyManager::directory)
      .def("save_and_exit", &PyManager::save_and_exit, nb::arg("step"), nb::arg("metadata"));

  m.def("stop_requested", [] { return should_stop(); });
  m.def("stop_signal", [] { return stop_signal(); });
  m.def("install_stop_signals", [] { install_stop_signals(); });

  // Every step of `directory` (or only `step`), newest first, each as a dict; data checksums read.
  m.def(
      "inspect",
      [](const std::string& directory, std::optional<std::uint64_t> step) {
        std::vector<ckpt::StepReport> steps;
        {
          nb::gil_scoped_release release;
          ckpt::InspectOptions o;
          o.step = step;
          steps = ckpt::inspect(directory, o);
        }
        nb::list out;
        for (const auto& s : steps) out.append(step_report(s));
        return out;
      },
      nb::arg("directory"), nb::arg("step").none() = nb::none());
  m.def("latest_step", [](const std::string& directory) {
    nb::gil_scoped_release release;
    return ckpt::latest_step(directory);
  });
}

}  // namespace trainrt::py
