// trainrt._trainrt.World: init, ranks, in-place allreduce, barrier, byte-blob exchange; and the
// data network's interface rule.
#include "world.hpp"

#include <fmt/format.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include <unistd.h>

#include "bindings.hpp"
#include "tensor.hpp"
#include "trainrt/data_interface.hpp"

namespace trainrt::py {

namespace {

DeviceComm parse_nccl(const std::string& s) {
  if (s == "off") return DeviceComm::Off;
  if (s == "auto") return DeviceComm::Auto;
  if (s == "required") return DeviceComm::Required;
  throw UsageError(fmt::format("nccl='{}': valid values are 'off', 'auto', 'required'", s), "trainrt.init");
}

// The runtime's parse_op, its error a UsageError in Python's terms (op=...).
ReduceOp parse_reduce(const std::string& s) {
  try {
    return parse_op(s);
  } catch (const Error&) {
    throw UsageError(fmt::format("op='{}': valid values are 'sum', 'avg', 'min', 'max'", s), "allreduce");
  }
}

std::span<const std::uint8_t> span_of(const nb::bytes& b) {
  return {reinterpret_cast<const std::uint8_t*>(b.c_str()), b.size()};
}

nb::bytes to_bytes(const bootstrap::Blob& b) { return nb::bytes(reinterpret_cast<const char*>(b.data()), b.size()); }

// An asynchronous allreduce from Python: the runtime's Work plus the tensor it writes into, kept
// alive until the collective is done. Dropped unwaited, it waits in its destructor (GIL released):
// freeing the memory under a running collective is not an option.
class PyWork {
 public:
  PyWork(World& world, Work work, View view) : world_(world), work_(std::move(work)), view_(std::move(view)) {}
  ~PyWork() {
    if (waited_) return;
    nb::gil_scoped_release release;
    try {
      world_.collective([&] { work_.wait(); });
    } catch (const std::exception& e) {
      std::fprintf(stderr, "trainrt: an allreduce_async nobody waited for failed: %s\n", e.what());
    }
  }
  PyWork(const PyWork&) = delete;
  PyWork& operator=(const PyWork&) = delete;

  void wait() {
    {
      nb::gil_scoped_release release;
      waited_ = true;  // even when it throws: the error is reported once, here
      world_.collective([&] { work_.wait(); });
    }
  }
  bool done() const { return work_.test(); }

 private:
  World& world_;  // kept alive by the binding (keep_alive)
  Work work_;
  View view_;
  bool waited_ = false;
};

// The tensor of an allreduce: a CPU tensor of a type the host communicator reduces.
View reducible_view(nb::handle tensor, const std::string& call) {
  View v = view(tensor, call + "'s tensor");
  if (v.on_cuda)
    throw UsageError(fmt::format("{} takes CPU tensors; reduce CUDA tensors with torch.distributed (NCCL)", call), call);
  if (!v.dtype)
    throw UsageError(fmt::format("element type {} is not reducible: use float32, float64, float16, bfloat16, int32 or int64",
                                 v.dtype_name),
                     call);
  return v;
}

}  // namespace

World::World(double timeout_seconds, bool quiet, const std::string& nccl) : owner_pid_(::getpid()) {
  if (!(timeout_seconds >= 1 && timeout_seconds <= 86400 * 7))
    throw UsageError(fmt::format("timeout={} s: give 1 s to 7 days", timeout_seconds), "trainrt.init");
  InitOptions o;
  o.nccl = parse_nccl(nccl);
  o.comm.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(timeout_seconds * 1000));
  o.bootstrap.timeout = std::chrono::seconds(static_cast<std::int64_t>(std::ceil(timeout_seconds)));
  o.bootstrap.quiet = quiet;
  nb::gil_scoped_release release;  // PMIx fences and the communicators' setup wait on peers
  rt_ = init(o);
}

void World::add_session_user(SessionUser* u) {
  std::lock_guard lock(users_mutex_);
  users_.push_back(u);
}

void World::remove_session_user(SessionUser* u) {
  std::lock_guard lock(users_mutex_);
  std::erase(users_, u);
}

void World::wait_session_users_idle() {
  std::lock_guard lock(users_mutex_);
  for (SessionUser* u : users_) u->wait_session_idle();
}

World::~World() {
  if (::getpid() != owner_pid_ || leave_at_exit_) {
    // A forked child: the shared memory, PMIx connection and threads are the parent's. Leave them.
    // Or a thread of this process is inside the session for good (leave_runtime_at_exit).
    (void)rt_.release();
    return;
  }
  nb::gil_scoped_release release;  // tearing down communicators and PMIx may wait on peers
  rt_.reset();
}

void bind_world(nb::module_& m) {
  nb::class_<World>(m, "World", "The runtime of this process (use trainrt.init(), not this class).")
      .def(nb::init<double, bool, const std::string&>(), nb::arg("timeout") = 300.0, nb::arg("quiet") = false,
           nb::arg("nccl") = "off")
      .def_prop_ro("rank", [](World& w) { return w.runtime().rank; })
      .def_prop_ro("world_size", [](World& w) { return w.runtime().size; })
      .def_prop_ro("local_rank", [](World& w) { return w.runtime().local_rank; })
      .def_prop_ro("local_world_size", [](World& w) { return w.runtime().local_size; })
      .def_prop_ro("node_id", [](World& w) { return w.session().node_id(); })
      .def_prop_ro("job_id", [](World& w) { return w.session().job_id(); })
      .def_prop_ro("restart_count", [](World& w) { return w.runtime().restart_count; })
      .def_prop_ro("cuda_device", [](World& w) { return w.runtime().cuda_device; })
      .def_prop_ro("backend", [](World& w) { return w.runtime().host->backend(); })
      .def_prop_ro("device_backend",
                   [](World& w) { return w.runtime().device ? w.runtime().device->backend() : std::string(); })
      .def("describe", [](World& w) { return w.runtime().describe(); })
      .def(
          "allreduce",
          [](World& w, nb::handle tensor, const std::string& op) {
            ReduceOp rop = parse_reduce(op);
            View v = reducible_view(tensor, "allreduce");
            if (v.count == 0) return;  // nothing to reduce; every rank sees the same shape
            nb::gil_scoped_release release;
            std::lock_guard lock(w.collective_mutex());
            w.collective([&] { w.runtime().host->allreduce(v.data, v.data, v.count, *v.dtype, rop); });
          },
          nb::arg("tensor"), nb::arg("op") = "sum")
      .def(
          "allreduce_async",
          [](World& w, nb::handle tensor, const std::string& op) {
            ReduceOp rop = parse_reduce(op);
            View v = reducible_view(tensor, "allreduce_async");
            Work work;  // a zero-size tensor: done at once
            if (v.count != 0) {
              nb::gil_scoped_release release;
              std::lock_guard lock(w.collective_mutex());  // issue order = call order
              work = w.collective([&] { return w.runtime().host->allreduce_async(v.data, v.data, v.count, *v.dtype, rop); });
            }
            return std::make_unique<PyWork>(w, std::move(work), std::move(v));
          },
          nb::arg("tensor"), nb::arg("op") = "sum", nb::keep_alive<0, 1>())  // the world outlives its Work
      .def("barrier",
           [](World& w) {
             nb::gil_scoped_release release;
             std::lock_guard lock(w.collective_mutex());
             w.collective([&] { w.runtime().host->barrier(); });
           })
      .def(
          "broadcast_bytes",
          [](World& w, std::optional<nb::bytes> data, unsigned root) {
            const unsigned size = w.runtime().size;
            if (root >= size)
              throw UsageError(fmt::format("root {} is not a rank of this {}-rank world", root, size), "broadcast_bytes");
            if (w.runtime().rank == root && !data)
              throw UsageError(fmt::format("rank {} is the root and passed no data", root), "broadcast_bytes");
            std::span<const std::uint8_t> mine;
            if (data) mine = span_of(*data);
            bootstrap::Blob out;
            {
              nb::gil_scoped_release release;
              w.wait_session_users_idle();  // before the mutex: a Manager's wait takes them in the other order
              std::lock_guard lock(w.collective_mutex());
              out = w.session().broadcast(mine, root);
            }
            return to_bytes(out);
          },
          nb::arg("data").none(), nb::arg("root") = 0)
      .def(
          "allgather_bytes",
          [](World& w, nb::bytes data) {
            std::vector<bootstrap::Blob> all;
            {
              nb::gil_scoped_release release;
              w.wait_session_users_idle();
              std::lock_guard lock(w.collective_mutex());
              all = w.session().allgather(span_of(data));
            }
            nb::list out;
            for (const auto& b : all) out.append(to_bytes(b));
            return out;
          },
          nb::arg("data"))
      // Not collectives: no mutex, so a lookup waiting for a key never blocks a publish.
      .def(
          "publish_bytes",
          [](World& w, const std::string& key, nb::bytes data) {
            nb::gil_scoped_release release;
            w.session().publish(key, span_of(data));
          },
          nb::arg("key"), nb::arg("data"))
      .def(
          "lookup_bytes",
          [](World& w, unsigned owner, const std::string& key) {
            if (owner >= w.runtime().size)
              throw UsageError(fmt::format("owner {} is not a rank of this {}-rank world", owner, w.runtime().size),
                               "lookup_bytes");
            bootstrap::Blob out;
            {
              nb::gil_scoped_release release;
              out = w.session().lookup(owner, key);
            }
            return to_bytes(out);
          },
          nb::arg("owner"), nb::arg("key"));

  nb::class_<PyWork>(m, "Work", "An allreduce_async in flight: wait() before touching its tensor.")
      .def("wait", &PyWork::wait, "Blocks (GIL released) until done; raises the collective's error.")
      .def("done", &PyWork::done, "True once finished (successfully or not: wait() tells).");

  // For tests and debugging: the address the runtime would read and write for `tensor`.
  m.def("_data_ptr", [](nb::handle tensor) { return reinterpret_cast<std::uintptr_t>(view(tensor, "tensor").data); });

  // The rule itself, not a Python copy of it: trainrt.torch advertises its store on this interface,
  // as the plugin chooses MASTER_ADDR and Gloo binds on it.
  m.def(
      "data_interface",
      [](std::optional<std::map<std::string, std::string>> env, std::optional<std::vector<std::string>> interfaces,
         const std::string& fallback, const std::string& fallback_source) {
        DataInterface d;
        if (!env && !interfaces) {
          d = data_interface_from_environment(fallback, fallback_source);
        } else {
          const auto lookup = [&](std::string_view name) -> std::optional<std::string> {
            if (!env) {
              const char* v = std::getenv(std::string(name).c_str());
              return v ? std::optional<std::string>(v) : std::nullopt;
            }
            auto it = env->find(std::string(name));
            return it == env->end() ? std::nullopt : std::optional<std::string>(it->second);
          };
          d = trainrt::data_interface(lookup, interfaces ? *interfaces : node_interfaces(), fallback, fallback_source);
        }
        return std::make_pair(d.name, d.source);
      },
      nb::arg("env") = nb::none(), nb::arg("interfaces") = nb::none(), nb::arg("fallback") = "",
      nb::arg("fallback_source") = "",
      "(name, source): the data network's interface by the rule of trainrt/data_interface.hpp, from `env` "
      "(default: the process environment) and `interfaces` (default: this node's); name '' when none is named.");
}

}  // namespace trainrt::py
