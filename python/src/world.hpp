#pragma once
// trainrt.init()'s world: the runtime (bootstrap session + host communicator) of this process.
// Every blocking call releases the GIL; collectives of one world are serialised by a mutex so two
// Python threads cannot interleave halves of two collectives (ranks must still issue them in the
// same order, as in C++).
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "trainrt/error.hpp"
#include "trainrt/runtime/init.hpp"

namespace trainrt::py {

class World {
 public:
  // nccl: "off" (the default: PyTorch brings its own NCCL), "auto" or "required".
  World(double timeout_seconds, bool quiet, const std::string& nccl);
  ~World();
  World(const World&) = delete;
  World& operator=(const World&) = delete;

  Runtime& runtime() { return *rt_; }
  bootstrap::Session& session() { return *rt_->session; }
  std::mutex& collective_mutex() { return mutex_; }

  // A thread of this process (a checkpoint save that waits for a rank that died) is inside the
  // session for good: at destruction the runtime is left as it is, as in a forked child, instead
  // of finalizing PMIx and freeing the session (and the mutex that thread holds) under it. The
  // process is ending; the launcher cleans up a client that leaves without finalizing.
  void leave_runtime_at_exit() { leave_at_exit_ = true; }

  // Runs one of the world's host collectives; a PeerError from it (a rank died, timed out or
  // aborted) is remembered: a checkpoint save in flight then cannot commit either, and the
  // Manager must not wait for it at close or exit.
  template <typename F>
  decltype(auto) collective(F&& f) {
    try {
      return f();
    } catch (const PeerError&) {
      peer_failed_ = true;
      throw;
    }
  }
  bool peer_failed() const { return peer_failed_; }

  // What runs session collectives in a thread of its own (a checkpoint Manager's commit). The
  // world's own session exchanges (broadcast_bytes, allgather_bytes) first wait until every such
  // user is idle: two threads of one rank taking turns in the session in another order than on
  // another rank would pair one rank's commit with the other's exchange. Called without the GIL.
  class SessionUser {
   public:
    virtual void wait_session_idle() = 0;

   protected:
    ~SessionUser() = default;
  };
  void add_session_user(SessionUser* u);
  void remove_session_user(SessionUser* u);
  void wait_session_users_idle();

 private:
  std::mutex users_mutex_;  // held while a user is waited for: its removal (its destructor) waits
  std::vector<SessionUser*> users_;
  std::unique_ptr<Runtime> rt_;
  std::mutex mutex_;
  int owner_pid_ = 0;  // a forked child (a DataLoader worker) must not tear down the parent's runtime
  std::atomic<bool> leave_at_exit_{false};
  std::atomic<bool> peer_failed_{false};
};

}  // namespace trainrt::py
