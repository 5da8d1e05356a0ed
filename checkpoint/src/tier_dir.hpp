#pragma once
// The memory tier's files on one node (docs/checkpoint.md "Memory tier"):
//   <base>/trainrt-<uid>/                 mode 0700, owned by the user (refused otherwise)
//   <base>/trainrt-<uid>/job-<job>/       one job's tier: removed when the job ends
//   .../job-<job>/ckpt-<key>/             one checkpoint directory's as this job uses it (two
//                                         trainings of one job never see each other's state): the
//                                         key is a token kept in the directory (memory-tier-id)
//   .../ckpt-<key>/<node>/                one node's; a shared lock file held by every manager
//        staging/rank_<r>.shard           a rank's file while a save writes it: not a step
//        step_<N>/MANIFEST.json           a tier step: the manifest the checkpoint directory gets
//        step_<N>/rank_<r>.shard          the node's own ranks' shards and the buddy copies it keeps
//        step_<N>/parity_<r>.xor          with parity groups instead of buddies: rank r's parity block
// Every level is created 0700 and opened without following a symlink; a directory of another
// user, or one others may write, is refused (never followed, never written into). A file counts
// only when it is a regular file of this user that nobody else may write: a symlink, FIFO,
// device or another user's file planted there is left alone and reported.
#include <sys/stat.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "files.hpp"
#include "parity.hpp"
#include "trainrt/fd.hpp"

namespace trainrt::checkpoint::tier {

// One step as a node's tier holds it.
struct StepFiles {
  std::uint64_t step = 0;
  std::string manifest_xxh3;   // of MANIFEST.json's bytes: nodes must agree on it ("": no manifest here)
  unsigned world_size = 0;     // as the manifest says (0 without one)
  std::vector<unsigned> ranks;  // whose shard files are present (regular, ours), ascending
  std::vector<parity::Header> parity;  // the parity files present (headers read and checked), by holder rank
};

// A job or node name as a single path component: 1-64 of [A-Za-z0-9._-], not starting with '.'.
// "" or why not (naming the value).
std::string check_name(const std::string& what, const std::string& value);

// "" when `st` is usable as a tier object of this user, else why not ("owned by uid 0", ...).
std::string check_owned(const struct stat& st, bool directory);

class NodeDir {
 public:
  // Opens (creating where missing, 0700) base/trainrt-<uid>/job-<job>/ckpt-<key>/<node> and takes
  // a shared lock on its lock file for this object's life. Throws Error naming the path and the
  // reason (UsageError for a job or node that is not a file name).
  static NodeDir open(const std::string& base, const std::string& job, const std::string& key, const std::string& node);

  const Dir& dir() const { return node_; }
  const Dir& staging() const { return staging_; }
  const std::string& path() const { return node_.path(); }

  // The tier steps of this node with a usable manifest, newest first; `notes` gets one line per
  // thing skipped (a planted symlink, a file of another user, an unreadable manifest).
  std::vector<StepFiles> inventory(std::vector<std::string>& notes) const;
  // A step directory, created 0700 when missing (another rank of the node may have made it).
  Dir step_dir(std::uint64_t step) const;
  std::optional<Dir> existing_step_dir(std::uint64_t step) const;
  // Removes every step directory except `keep` (their files first; never recursing, never
  // following): older tier steps once a newer one is committed.
  void remove_steps_except(std::uint64_t keep, const std::function<void(const std::string&)>& log) const;

 private:
  Dir node_, staging_;
  Fd lock_;
};

// The header of parity file `name` in step directory `d` (of `step`, `world` ranks), checked against
// its name, step, world and size; nullopt with `why` filled when it is not usable.
std::optional<parity::Header> read_parity_header(const Dir& d, const std::string& name, std::uint64_t step, unsigned holder_rank,
                                                 unsigned world, std::string& why);
// A regular file of this user in `d` opened read-write, or Fd() with `why` filled.
Fd open_own(const Dir& d, const std::string& name, struct stat& st, std::string& why, bool write);
// Creates `name` in `d` exclusively (0600) after unlinking whatever had the name (a planted
// symlink is removed, never followed). Throws Error.
Fd create_own(const Dir& d, const std::string& name);
// rename(2) of a name from one directory to another, both held open; false with `why`.
bool move(const Dir& from, const std::string& name, const Dir& to, const std::string& new_name, std::string* why = nullptr);

// Removes job directories of this user under base/trainrt-<uid> for which `finished(job)` says
// the job is over, skipping `keep` and any whose node directories are locked by a live manager.
// Returns one line per job removed or left.
std::vector<std::string> clean_finished_jobs(const std::string& base, const std::string& keep,
                                             const std::function<bool(const std::string&)>& finished);
// Removes one job's directory (every node directory in it that no live manager holds).
std::vector<std::string> remove_job(const std::string& base, const std::string& job);

}  // namespace trainrt::checkpoint::tier
