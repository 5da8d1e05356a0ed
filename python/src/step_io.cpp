// trainrt._trainrt.write_shard / commit_step / discard_shard / StepReader: checkpoint/step_io.hpp
// for Python storage layers that coordinate ranks themselves (trainrt.dcp). Tensors are written
// from and read into the caller's memory (no copy through Python); the GIL is released while
// files are written, synced or read.
#include <fmt/format.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <deque>

#include "bindings.hpp"
#include "tensor.hpp"
#include "trainrt/checkpoint/step_io.hpp"

namespace trainrt::py {

namespace {

namespace ckpt = trainrt::checkpoint;
using Dims = std::vector<std::int64_t>;

nb::dict written(const ckpt::WrittenShard& w) {
  nb::dict d;
  d["rank"] = w.rank;
  d["bytes"] = w.bytes;
  d["header_xxh3"] = w.header_xxh3;
  d["chunks"] = w.chunks;
  return d;
}

ckpt::WrittenShard unwritten(nb::handle d) {
  try {
    return {nb::cast<unsigned>(d["rank"]), nb::cast<std::uint64_t>(d["bytes"]), nb::cast<std::string>(d["header_xxh3"]),
            nb::cast<std::string>(d["chunks"])};
  } catch (const std::exception&) {
    throw UsageError("commit_step: each shard must be the dict write_shard returned (rank, bytes, header_xxh3, chunks)",
                     "checkpoint");
  }
}

// One item of write_shard: (name, tensor or bytes, shard or None, replicated). The objects stay
// referenced by `keep` until the shard is written.
ckpt::Item item(nb::handle t, std::deque<View>& views, std::vector<nb::object>& keep) {
  if (!nb::isinstance<nb::tuple>(t) || nb::len(t) != 4)
    throw UsageError("write_shard: each item is (name, tensor or bytes, (global_shape, offsets) or None, replicated)",
                     "checkpoint");
  ckpt::Item it;
  it.name = nb::cast<std::string>(t[0]);
  nb::handle obj = t[1], shard = t[2];
  it.replicated = nb::cast<bool>(t[3]);
  if (nb::isinstance<nb::bytes>(obj)) {
    nb::bytes b = nb::borrow<nb::bytes>(obj);
    it.data = b.c_str();
    it.bytes = b.size();
    keep.push_back(std::move(b));
  } else {
    View& v = views.emplace_back(view(obj, fmt::format("tensor '{}'", it.name)));
    if (v.on_cuda)
      throw UsageError(fmt::format("tensor '{}' is on CUDA device {}: write_shard takes host memory (copy it to the CPU)",
                                   it.name, v.device_id),
                       "checkpoint");
    it.data = v.data;
    it.bytes = v.bytes;
    it.dtype = v.dtype;  // empty for a type the format has no dtype for: written as opaque bytes
    it.shape = v.shape;
  }
  if (!shard.is_none()) {
    auto [global, offsets] = nb::cast<std::pair<Dims, Dims>>(shard);
    if (!it.dtype)
      throw UsageError(fmt::format("tensor '{}': a chunk of a global tensor must be float32, float64, float16, bfloat16, "
                                   "int32 or int64",
                                   it.name),
                       "checkpoint");
    it.shard = ckpt::Shard{std::move(global), std::move(offsets)};
  }
  return it;
}

nb::dict entry_info(const ckpt::EntryInfo& e) {
  nb::dict d;
  d["name"] = e.name;
  d["kind"] = e.kind;
  d["dtype"] = e.dtype;
  d["shape"] = e.shape;
  d["bytes"] = e.bytes;
  d["replicated"] = e.replicated;
  if (e.shard) {
    d["global_shape"] = e.shard->global_shape;
    d["offsets"] = e.shard->offsets;
  }
  return d;
}

}  // namespace

void bind_step_io(nb::module_& m) {
  m.def(
      "write_shard",
      [](const std::string& directory, std::uint64_t step, unsigned rank, unsigned world_size, nb::list items) {
        std::deque<View> views;  // deque: the items point into views that must not move
        std::vector<nb::object> keep;
        std::vector<ckpt::Item> list;
        for (nb::handle t : items) list.push_back(item(t, views, keep));
        ckpt::WrittenShard w;
        {
          nb::gil_scoped_release release;
          w = ckpt::write_shard(directory, step, rank, world_size, list);
        }
        return written(w);
      },
      nb::arg("directory"), nb::arg("step"), nb::arg("rank"), nb::arg("world_size"), nb::arg("items"));

  m.def(
      "commit_step",
      [](const std::string& directory, std::uint64_t step, unsigned world_size, nb::list shards,
         const ckpt::Metadata& metadata, const std::map<std::string, nb::bytes>& attachments, unsigned keep_last,
         bool verbose, bool retire) {
        std::vector<ckpt::WrittenShard> ws;
        for (nb::handle s : shards) ws.push_back(unwritten(s));
        ckpt::CommitOptions o;
        o.keep_last = keep_last;
        o.retire = retire;
        o.metadata = metadata;
        for (const auto& [name, data] : attachments) o.attachments.push_back({name, std::string(data.c_str(), data.size())});
        if (verbose) o.log = [](const std::string& line) { std::fprintf(stderr, "trainrt %s\n", line.c_str()); };
        nb::gil_scoped_release release;
        ckpt::commit_step(directory, step, world_size, ws, o);
      },
      nb::arg("directory"), nb::arg("step"), nb::arg("world_size"), nb::arg("shards"), nb::arg("metadata"),
      nb::arg("attachments"), nb::arg("keep_last"), nb::arg("verbose") = false, nb::arg("retire") = true);

  m.def(
      "retire_steps",
      [](const std::string& directory, std::uint64_t step, unsigned keep_last, bool verbose) {
        std::function<void(const std::string&)> log;
        if (verbose) log = [](const std::string& line) { std::fprintf(stderr, "trainrt %s\n", line.c_str()); };
        nb::gil_scoped_release release;
        ckpt::retire_steps(directory, step, keep_last, log);
      },
      nb::arg("directory"), nb::arg("step"), nb::arg("keep_last"), nb::arg("verbose") = false);

  m.def(
      "discard_shard",
      [](const std::string& directory, std::uint64_t step, unsigned rank) {
        nb::gil_scoped_release release;
        ckpt::discard_shard(directory, step, rank);
      },
      nb::arg("directory"), nb::arg("step"), nb::arg("rank"));

  nb::class_<ckpt::StepReader>(m, "StepReader", "One committed step, read back verified (checkpoint/step_io.hpp).")
      .def(
          "__init__",
          [](ckpt::StepReader* self, const std::string& directory, std::uint64_t step) {
            nb::gil_scoped_release release;
            new (self) ckpt::StepReader(directory, step);
          },
          nb::arg("directory"), nb::arg("step"))
      .def_prop_ro("step", &ckpt::StepReader::step)
      .def_prop_ro("world_size", &ckpt::StepReader::world_size)
      .def_prop_ro("metadata", [](const ckpt::StepReader& r) { return r.metadata(); })
      .def("check_shards",
           [](ckpt::StepReader& r) {
             nb::gil_scoped_release release;
             return r.check_shards();
           })
      .def("entry",
           [](ckpt::StepReader& r, unsigned rank, const std::string& name) {
             ckpt::EntryInfo e;
             {
               nb::gil_scoped_release release;
               e = r.entry(rank, name);
             }
             return entry_info(e);
           })
      .def("read_into",
           [](ckpt::StepReader& r, unsigned rank, const std::string& name, nb::handle tensor) {
             View v = view(tensor, fmt::format("the destination of entry '{}'", name));
             if (v.on_cuda)
               throw UsageError(fmt::format("read_into: the destination of entry '{}' is on CUDA: read into host memory",
                                            name),
                                "checkpoint");
             nb::gil_scoped_release release;
             r.read(rank, name, v.data, v.bytes);
           })
      .def("read_bytes",
           [](ckpt::StepReader& r, unsigned rank, const std::string& name) {
             std::string data;
             {
               nb::gil_scoped_release release;
               const auto bytes = static_cast<std::size_t>(r.entry(rank, name).bytes);
                 data.resize(bytes);
                 r.read(rank, name, data.data(), bytes);
             }
             return nb::bytes(data.data(), data.size());
           })
      .def("attachment", [](ckpt::StepReader& r, const std::string& name) {
        std::string data;
        {
          nb::gil_scoped_release release;
          data = r.attachment(name);
        }
        return nb::bytes(data.data(), data.size());
      });
}

}  // namespace trainrt::py
