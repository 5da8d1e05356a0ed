#include "trainrt/error.hpp"
#include "trainrt/runtime/communicator.hpp"

namespace trainrt {
namespace {

class FutureState final : public WorkState {
 public:
  explicit FutureState(std::shared_future<void> f) : future_(std::move(f)) {}
  bool ready() override { return future_.wait_for(std::chrono::seconds(0)) == std::future_status::ready; }
  bool wait_for(std::chrono::milliseconds timeout) override {
    if (future_.wait_for(timeout) != std::future_status::ready) return false;
    future_.get();
    return true;
  }

 private:
  std::shared_future<void> future_;
};

}  // namespace

Work::Work(std::shared_future<void> f) : state_(std::make_shared<FutureState>(std::move(f))) {}

void Work::wait() const {
  if (!state_) return;
  while (!state_->wait_for(std::chrono::hours(24))) {
  }
}

bool Work::test() const { return !state_ || state_->ready(); }

bool Work::wait_for(std::chrono::milliseconds timeout) const { return !state_ || state_->wait_for(timeout); }

}  // namespace trainrt
