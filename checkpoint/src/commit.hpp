#pragma once
// The commit point and retention (docs/checkpoint.md "Save"), shared by Manager (commit.cpp) and
// the step writer of frameworks that coordinate their own ranks (step_io.cpp), so both commit
// exactly the same way.
#include <cstdint>
#include <functional>
#include <string>

#include "files.hpp"

namespace trainrt::checkpoint {

using Log = std::function<void(const std::string&)>;

// "" when this process may write into the checkpoint directory `root`, else why not: it must be
// owned by the effective uid and not writable by others (docs/checkpoint.md "Other users").
std::string write_refusal(const Dir& root);

// Writes `manifest` as `dir`'s MANIFEST.json (the commit point: temporary name, fsync, rename),
// points `latest` at the step, and makes both names durable (fsync of `dir`, then of `root`).
// Throws only while the step is not committed (a failed sync takes the commit back).
void commit_manifest(const Dir& root, const Dir& dir, std::uint64_t step, const std::string& manifest, const Log& log);

// Keeps the newest `keep_last` usable steps up to `step` (at least one: `step` itself) and removes
// the rest, uncommitted leftovers of failed saves included; directories of other users are left.
void retire_older_than(const Dir& root, std::uint64_t step, unsigned keep_last, const Log& log);

}  // namespace trainrt::checkpoint
