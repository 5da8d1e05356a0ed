#pragma once
#include <fmt/format.h>

#include "trainrt/bootstrap/session.hpp"
#include "trainrt/error.hpp"

namespace trainrt::bootstrap {

std::unique_ptr<Session> open_pmix_session(const SessionOptions& options);

}  // namespace trainrt::bootstrap
