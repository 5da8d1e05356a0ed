#include "session_impl.hpp"

namespace trainrt::bootstrap {

std::unique_ptr<Session> open_pmix_session(const SessionOptions&) {
  throw Error("PMIx variables are set, but this build has no PMIx support (install libpmix-dev and rebuild)",
              "bootstrap");
}

}  // namespace trainrt::bootstrap
