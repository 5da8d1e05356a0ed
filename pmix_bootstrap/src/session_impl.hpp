#pragma once
#include <fmt/format.h>

#include "trainrt/bootstrap/session.hpp"
#include "trainrt/error.hpp"

namespace trainrt::bootstrap {

std::unique_ptr<Session> open_pmix_session(const SessionOptions& options);
// gather_from's sources must be ascending ranks of the world: an Error naming the first that is not.
void check_sources(const std::vector<unsigned>& sources, unsigned size);
// join_gather_from's caller must not be one of the (valid) sources: it would put nothing they read.
void check_joiner(const std::vector<unsigned>& sources, unsigned size, unsigned rank);
// gather_some's reads must be ascending and each one of the (valid) sources.
void check_reads(const std::vector<unsigned>& sources, const std::vector<unsigned>& reads, unsigned size);

}  // namespace trainrt::bootstrap
