#pragma once
// trainrt.init()'s world: the runtime (bootstrap session + host communicator) of this process.
// Every blocking call releases the GIL; collectives of one world are serialised by a mutex so two
// Python threads cannot interleave halves of two collectives (ranks must still issue them in the
// same order, as in C++).
#include <memory>
#include <mutex>
#include <string>

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

 private:
  std::unique_ptr<Runtime> rt_;
  std::mutex mutex_;
  int owner_pid_ = 0;  // a forked child (a DataLoader worker) must not tear down the parent's runtime
};

}  // namespace trainrt::py
