#include "trainrt/error.hpp"
#include "trainrt/runtime/communicator.hpp"

namespace trainrt {

void Work::wait() const {
  if (!future_.valid()) return;
  future_.get();
}

bool Work::test() const {
  return !future_.valid() || future_.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
}

bool Work::wait_for(std::chrono::milliseconds timeout) const {
  if (!future_.valid()) return true;
  if (future_.wait_for(timeout) != std::future_status::ready) return false;
  future_.get();
  return true;
}

}  // namespace trainrt
