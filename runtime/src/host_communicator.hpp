#pragma once
// The base of every host backend (shared memory, Gloo, hierarchical): it owns the progress thread
// and the one failure policy of communicator.hpp, so the backends fail alike.
//  - A collective's body runs under guarded(): a trainrt::Error keeps its type (PeerError,
//    UsageError, Error); anything else becomes a trainrt::Error. Backends translate their
//    transport's exceptions to PeerError where the transport failed.
//  - The first failure poisons the communicator: later calls throw the same type, naming it and
//    carrying its CollectiveFailure, and on_failure() runs once so the backend can tell its peers
//    (shm: a flag they poll).

#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "progress_thread.hpp"
#include "trainrt/error.hpp"
#include "trainrt/runtime/communicator.hpp"

namespace trainrt {

class HostCommunicator : public Communicator {
 public:
  void abort(const std::string& why) noexcept override {
    try {
      fail(Failure::Peer, "aborted: " + why, CollectiveFailure{FailureKind::Aborted, {}});
    } catch (...) {  // no memory for the message: fail all the same
      fail(Failure::Peer, "aborted", CollectiveFailure{FailureKind::Aborted, {}});
    }
  }

 protected:
  explicit HostCommunicator(std::string name) : name_(std::move(name)) {}
  // Derived classes call stop_progress() first in their destructors: queued work uses their state.
  ~HostCommunicator() override { progress_.stop(); }
  void stop_progress() noexcept { progress_.stop(); }

  // Runs `body` as one collective: now on this thread (Blocking) or on the progress thread.
  template <typename F>
  Work submit(Mode mode, F body) {
    return progress_.run([this, body = std::move(body)]() mutable { guarded(body); }, mode);
  }

  // Runs once, after the first failure (on the failing collective's thread or abort()'s).
  virtual void on_failure() noexcept {}

  bool failed() const {
    std::lock_guard lock(mutex_);
    return kind_ != Failure::None;
  }

 private:
  enum class Failure { None, Peer, Usage, Other };

  template <typename F>
  void guarded(F& body) {
    throw_if_failed();
    try {
      body();
    } catch (const PeerError& e) {
      fail(Failure::Peer, e.what(), e.failure());
      throw;
    } catch (const UsageError& e) {
      fail(Failure::Usage, e.what(), e.failure());
      throw;
    } catch (const Error& e) {
      fail(Failure::Other, e.what(), e.failure());
      throw;
    } catch (const std::exception& e) {
      fail(Failure::Other, e.what(), std::nullopt);
      throw Error(e.what(), name_);
    }
  }

  void throw_if_failed() const {
    std::unique_lock lock(mutex_);
    if (kind_ == Failure::None) return;
    const std::string what = "communicator unusable after an earlier failure: " + first_;
    const Failure kind = kind_;
    const std::optional<CollectiveFailure> failure = first_failure_;
    lock.unlock();
    if (kind == Failure::Peer) throw PeerError(failure.value_or(CollectiveFailure{}), what, name_);
    if (kind == Failure::Usage && failure) throw UsageError(*failure, what, name_);
    if (kind == Failure::Usage) throw UsageError(what, name_);
    if (failure) throw Error(*failure, what, name_);
    throw Error(what, name_);
  }

  void fail(Failure kind, const std::string& what, const std::optional<CollectiveFailure>& failure) noexcept {
    {
      std::lock_guard lock(mutex_);
      if (kind_ != Failure::None) return;
      kind_ = kind;
      try {
        first_ = what;
        first_failure_ = failure;
      } catch (...) {  // the kind alone still poisons the communicator
      }
    }
    on_failure();
  }

  std::string name_;
  mutable std::mutex mutex_;
  Failure kind_ = Failure::None;
  std::string first_;
  std::optional<CollectiveFailure> first_failure_;
  ProgressThread progress_;
};

}  // namespace trainrt
