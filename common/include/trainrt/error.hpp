#pragma once
// The exceptions every train-runtime library throws. C ABIs (SPANK callbacks, C APIs) catch them
// and turn them into an error code plus a logged message.
//
// trainrt::Error is the base: catching it catches everything we throw. Collectives throw one of
// two kinds, so a trainer can decide without parsing messages:
//   PeerError  - another rank or the transport failed (a rank died, a timeout, a lost connection,
//                an NCCL asynchronous error). The job can restart from its last checkpoint.
//   UsageError - this program called the API wrongly (ranks issued mismatched collectives, a bad
//                dtype, root or pointer). Restarting repeats it: report it as a bug.
// Anything else (a failed allocation, a missing library) stays a plain trainrt::Error.
#include <stdexcept>
#include <string>

namespace trainrt {

class Error : public std::runtime_error {
 public:
  // `context` names the input at fault (a file, an option, a rank) so the message can be acted on.
  explicit Error(std::string what, std::string context = {})
      : std::runtime_error(context.empty() ? what : context + ": " + what), what_(std::move(what)) {}
  // The message without its context prefix, for callers that add their own.
  const std::string& bare_what() const noexcept { return what_; }

 private:
  std::string what_;
};

class PeerError : public Error {
 public:
  using Error::Error;
};

class UsageError : public Error {
 public:
  using Error::Error;
};

}  // namespace trainrt
