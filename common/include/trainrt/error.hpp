#pragma once
// The one exception type every train-runtime library throws. C ABIs (SPANK callbacks, C APIs)
// catch it and turn it into an error code plus a logged message.
#include <stdexcept>
#include <string>

namespace trainrt {

class Error : public std::runtime_error {
 public:
  // `context` names the input at fault (a file, an option, a rank) so the message can be acted on.
  explicit Error(std::string what, std::string context = {})
      : std::runtime_error(context.empty() ? what : context + ": " + what),
        what_(std::move(what)),
        context_(std::move(context)) {}
  const std::string& bare_what() const noexcept { return what_; }
  const std::string& context() const noexcept { return context_; }

 private:
  std::string what_;
  std::string context_;
};

}  // namespace trainrt
