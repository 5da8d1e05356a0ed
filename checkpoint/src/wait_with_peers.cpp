#include <chrono>
#include <cstdint>

#include "trainrt/checkpoint/manager.hpp"
#include "trainrt/runtime/communicator.hpp"

namespace trainrt::checkpoint {

void wait_with_peers(const std::shared_future<SaveResult>& save, Communicator& peers,
                     const std::function<bool()>& each_round) {
  for (;;) {
    bool done = !save.valid() || save.wait_for(std::chrono::milliseconds(100)) == std::future_status::ready;
    if (each_round && each_round()) done = true;
    const std::int32_t mine = done ? 1 : 0;
    std::int32_t all = 0;
    peers.allreduce(&mine, &all, 1, DType::I32, ReduceOp::Min);
    if (all == 1) return;
  }
}

}  // namespace trainrt::checkpoint
