#pragma once
// The exceptions every train-runtime library throws. C ABIs (SPANK callbacks, the Python binding)
// catch them and turn them into an error code plus a logged message, or into the Python exception
// of the same name, chosen by the C++ type alone.
//
// trainrt::Error is the base: catching it catches everything we throw. Its kinds let a program
// decide without parsing messages:
//   UsageError      - this program called an API wrongly (a bad argument, a call in the wrong
//                     state, ranks that issued mismatched collectives). Restarting repeats it:
//                     report it as a bug.
//   PeerError       - another rank or the transport failed (a rank died, a timeout, a lost
//                     connection, an NCCL asynchronous error). The job can restart from its last
//                     checkpoint. It says what failed and which ranks (CollectiveFailure).
//   CheckpointError - a checkpoint could not be written or used: a step not committed, damaged
//                     files, no usable step after the registered buffers were overwritten, a
//                     directory that cannot be read.
// Anything else (a failed allocation, a missing library, a device error) stays a plain Error.
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace trainrt {

// What ended a collective, as data: trainers, the flight recorder and trainrt-doctor decide on
// these fields, so a message can be reworded without changing what anyone concludes from it.
enum class FailureKind : std::uint8_t {
  Transport,  // the connection or the transport failed, and it does not say which rank
  DeadPeer,   // `ranks` died
  Timeout,    // this rank gave up after `waited_s` waiting for `ranks` (empty: not known which)
  Aborted,    // the communicator was aborted: because `ranks` failed first, or on this rank (empty)
  Mismatch,   // `ranks` issued another collective than this rank (a UsageError: a program bug)
};

struct CollectiveFailure {
  FailureKind kind = FailureKind::Transport;
  std::vector<unsigned> ranks;  // ranks of the communicator that threw, as the kind says
  double waited_s = -1;         // Timeout: how long this rank waited; -1 when not known
};

// The names the flight recorder writes: "transport", "dead_peer", "timeout", "aborted", "mismatch".
constexpr const char* to_string(FailureKind k) {
  switch (k) {
    case FailureKind::Transport: return "transport";
    case FailureKind::DeadPeer: return "dead_peer";
    case FailureKind::Timeout: return "timeout";
    case FailureKind::Aborted: return "aborted";
    case FailureKind::Mismatch: return "mismatch";
  }
  return "transport";
}

constexpr std::optional<FailureKind> parse_failure_kind(std::string_view name) {
  for (FailureKind k : {FailureKind::Transport, FailureKind::DeadPeer, FailureKind::Timeout, FailureKind::Aborted,
                        FailureKind::Mismatch})
    if (name == to_string(k)) return k;
  return std::nullopt;
}

class Error : public std::runtime_error {
 public:
  // `context` names the input at fault (a file, an option, a rank) so the message can be acted on.
  explicit Error(std::string what, std::string context = {})
      : std::runtime_error(context.empty() ? what : context + ": " + what), what_(std::move(what)) {}
  Error(CollectiveFailure failure, std::string what, std::string context = {})
      : Error(std::move(what), std::move(context)) {
    failure_ = std::move(failure);
  }
  // The message without its context prefix, for callers that add their own.
  const std::string& bare_what() const noexcept { return what_; }
  // Set when this error ended a collective (every PeerError; a UsageError for mismatched calls).
  const std::optional<CollectiveFailure>& failure() const noexcept { return failure_; }

 private:
  std::string what_;
  std::optional<CollectiveFailure> failure_;
};

class PeerError : public Error {
 public:
  // A transport failure that names no rank: what is known when the transport does not say more.
  explicit PeerError(std::string what, std::string context = {})
      : Error(CollectiveFailure{}, std::move(what), std::move(context)) {}
  PeerError(CollectiveFailure failure, std::string what, std::string context = {})
      : Error(std::move(failure), std::move(what), std::move(context)) {}
  FailureKind kind() const noexcept { return failure()->kind; }
  const std::vector<unsigned>& ranks() const noexcept { return failure()->ranks; }
};

class UsageError : public Error {
 public:
  using Error::Error;
};

class CheckpointError : public Error {
 public:
  using Error::Error;
};

}  // namespace trainrt
