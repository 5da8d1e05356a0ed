// trainrt._trainrt: the extension module. The exception types live here so every C++ exception is
// translated in one place, by its C++ type alone: trainrt::Error and its kinds map one to one to
// trainrt.Error and its subclasses (an error that ended a collective also carries its failure as
// attributes), any other std::exception to trainrt.Error too (std::bad_alloc stays MemoryError),
// so nothing reaches Python as an unexplained RuntimeError or a crash.
#include <nanobind/nanobind.h>

#include <exception>
#include <new>

#include "bindings.hpp"
#include "trainrt/checkpoint/manager.hpp"

namespace nb = nanobind;

namespace {

PyObject* g_error = nullptr;
PyObject* g_peer = nullptr;
PyObject* g_usage = nullptr;
PyObject* g_checkpoint = nullptr;
PyObject* g_world_size = nullptr;

PyObject* new_exception(const char* name, const char* doc, PyObject* bases) {
  PyObject* t = PyErr_NewExceptionWithDoc(name, doc, bases, nullptr);
  if (!t) throw nb::python_error();
  return t;  // one reference kept for the translator, for the life of the process
}

// Raises `type` with e's message and, when e ended a collective, its failure as attributes:
// kind ("dead_peer", "timeout", ...), ranks (a tuple) and waited_s (None when not known), so
// Python code decides on them and not on the message.
void set_python_error(PyObject* type, const trainrt::Error& e) {
  const auto& f = e.failure();
  if (!f) {
    PyErr_SetString(type, e.what());
    return;
  }
  try {
    nb::object exc = nb::borrow(type)(nb::str(e.what()));
    exc.attr("kind") = nb::str(trainrt::to_string(f->kind));
    nb::list ranks;
    for (unsigned r : f->ranks) ranks.append(r);
    exc.attr("ranks") = nb::tuple(ranks);
    exc.attr("waited_s") = f->waited_s >= 0 ? nb::object(nb::float_(f->waited_s)) : nb::none();
    PyErr_SetObject(type, exc.ptr());
  } catch (const std::exception&) {  // no memory for the attributes: the message still goes
    PyErr_Clear();
    PyErr_SetString(type, e.what());
  }
}

}  // namespace

NB_MODULE(_trainrt, m) {
  m.doc() = "train-runtime bindings; import trainrt, not this module (docs/python.md)";

  g_error = new_exception("trainrt.Error", "Base of every error the train-runtime raises.", PyExc_RuntimeError);
  g_peer = new_exception("trainrt.PeerError",
                         "Another rank or the transport failed (a dead rank, a timeout): restart from a checkpoint. "
                         "Attributes: kind ('transport', 'dead_peer', 'timeout', 'aborted'), ranks (the ranks it "
                         "names), waited_s (None when not known).",
                         g_error);
  nb::object usage_bases = nb::make_tuple(nb::handle(g_error), nb::handle(PyExc_ValueError));
  g_usage = new_exception("trainrt.UsageError",
                          "This program called the API wrongly (a bad op, dtype, layout or argument, ranks that "
                          "called different collectives: then kind 'mismatch' and ranks); also a ValueError.",
                          usage_bases.ptr());
  g_checkpoint = new_exception("trainrt.CheckpointError",
                               "A checkpoint could not be saved, restored or read (I/O, a damaged or foreign step).",
                               g_error);
  g_world_size = new_exception("trainrt.WorldSizeError",
                               "restore() found only steps whose per-rank state needs the world size that saved them: "
                               "run at that size (a trainer exits WORLD_SIZE_EXIT_CODE, 76, so train.sbatch requeues).",
                               g_checkpoint);
  m.attr("Error") = nb::borrow(g_error);
  m.attr("PeerError") = nb::borrow(g_peer);
  m.attr("UsageError") = nb::borrow(g_usage);
  m.attr("CheckpointError") = nb::borrow(g_checkpoint);
  m.attr("WorldSizeError") = nb::borrow(g_world_size);
  m.attr("WORLD_SIZE_EXIT_CODE") = trainrt::kWorldSizeExitCode;

  // Registered first, so tried last: whatever the typed translator below did not take.
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const nb::builtin_exception&) {
      throw;  // nanobind's own (TypeError, ...): its default translator handles them
    } catch (const nb::python_error&) {
      throw;
    } catch (const std::bad_alloc&) {
      throw;  // MemoryError
    } catch (const std::exception& e) {
      PyErr_SetString(g_error, e.what());
    }
  });
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const trainrt::checkpoint::WorldSizeError& e) {
      set_python_error(g_world_size, e);
    } catch (const trainrt::CheckpointError& e) {
      set_python_error(g_checkpoint, e);
    } catch (const trainrt::PeerError& e) {
      set_python_error(g_peer, e);
    } catch (const trainrt::UsageError& e) {
      set_python_error(g_usage, e);
    } catch (const trainrt::Error& e) {
      set_python_error(g_error, e);
    }
  });

  m.attr("has_cuda") = trainrt::py::kHaveCuda;
  m.attr("__version__") = TRAINRT_PY_VERSION;

  trainrt::py::bind_world(m);
  trainrt::py::bind_checkpoint(m);
  trainrt::py::bind_step_io(m);
}
