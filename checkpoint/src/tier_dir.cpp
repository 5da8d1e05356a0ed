#include "tier_dir.hpp"

#include "trainrt/checkpoint/memory_tier.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "shard_format.hpp"
#include "trainrt/error.hpp"
#include "xxh3.hpp"

namespace trainrt::checkpoint::tier {
namespace {

constexpr const char* kLockName = "lock";
constexpr const char* kStagingName = "staging";

// `name` in `parent` as a directory of this user with mode 0700: created so when missing; an
// existing one of ours with a wider mode is narrowed (it is ours, opened without following);
// one of another user is refused.
Dir private_dir(const Dir& parent, const std::string& name) {
  if (::mkdirat(parent.fd(), name.c_str(), 0700) != 0 && errno != EEXIST)
    throw Error(fmt::format("cannot create directory: {}", std::strerror(errno)), parent.path_of(name));
  std::string why;
  auto d = parent.sub(name, &why);
  if (!d) throw Error(fmt::format("cannot open the memory tier directory: {}", why), parent.path());
  const struct stat st = d->stat();
  if (st.st_uid != ::geteuid())
    throw Error(fmt::format("is owned by uid {}, not by this process (uid {}): the memory tier never uses a directory of "
                            "another user",
                            st.st_uid, ::geteuid()),
                d->path());
  if ((st.st_mode & 077) != 0 && ::fchmod(d->fd(), 0700) != 0)
    throw Error(fmt::format("has mode {:o} and cannot be made 0700: {}", st.st_mode & 07777, std::strerror(errno)), d->path());
  return std::move(*d);
}

std::optional<unsigned> parse_shard_name(const std::string& name) {
  return parity::parse_rank_file(name, "rank_", ".shard", format::kMaxWorldSize);
}

// Unlinks every name in `d` (files, symlinks; a subdirectory stays: unlinkat refuses it).
void empty_dir(const Dir& d) {
  for (const auto& n : d.names()) d.unlink(n);
}

// Removes a node directory unless a live manager holds its lock; "" or why it stayed.
std::string remove_node_dir(const Dir& job, const std::string& name) {
  std::string why;
  auto node = job.sub(name, &why);
  if (!node) {
    job.unlink(name);  // not a directory (a planted symlink or file): the name goes, nothing is followed
    return {};
  }
  if (node->stat().st_uid != ::geteuid()) return fmt::format("{} is not ours: left alone", node->path());
  Fd lock(::openat(node->fd(), kLockName, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (lock && ::flock(lock.get(), LOCK_EX | LOCK_NB) != 0) return fmt::format("{} is in use by a running process", node->path());
  for (const auto& n : node->names()) {
    if (auto sub = node->sub(n); sub && sub->stat().st_uid == ::geteuid()) {
      empty_dir(*sub);
      node->rmdir(n);
    } else {
      node->unlink(n);
    }
  }
  if (!job.rmdir(name)) return fmt::format("{} could not be removed (something not written by trainrt is in it)", node->path());
  return {};
}

std::string user_dir_name() { return fmt::format("trainrt-{}", ::geteuid()); }

}  // namespace

std::string check_name(const std::string& what, const std::string& value) {
  const bool ok = !value.empty() && value.size() <= 64 && value[0] != '.' &&
                  std::all_of(value.begin(), value.end(), [](char c) {
                    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                           c == '_' || c == '-';
                  });
  if (ok) return {};
  return fmt::format("{} '{}' is not 1 to 64 of the characters A-Z a-z 0-9 . _ - (not starting with '.')", what,
                     value.size() > 80 ? value.substr(0, 80) + "..." : value);
}

std::string check_owned(const struct stat& st, bool directory) {
  if (S_ISLNK(st.st_mode)) return "a symbolic link";
  if (S_ISFIFO(st.st_mode)) return "a FIFO";
  if (directory ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode)) return directory ? "not a directory" : "not a regular file";
  if (st.st_uid != ::geteuid()) return fmt::format("owned by uid {}, not {}", st.st_uid, ::geteuid());
  if (st.st_mode & (S_IWGRP | S_IWOTH)) return fmt::format("writable by others (mode {:o})", st.st_mode & 07777);
  return {};
}

NodeDir NodeDir::open(const std::string& base, const std::string& job, const std::string& key, const std::string& node) {
  if (std::string why = check_name("job", job); !why.empty()) throw UsageError(why, "memory tier");
  if (std::string why = check_name("node", node); !why.empty()) throw UsageError(why, "memory tier");
  const Dir root = Dir::open(base);  // the tmpfs itself: the caller's path, followed as given
  const Dir user = private_dir(root, user_dir_name());
  const Dir job_dir = private_dir(user, "job-" + job);
  const Dir key_dir = private_dir(job_dir, "ckpt-" + key);
  NodeDir out;
  out.node_ = private_dir(key_dir, node);
  out.staging_ = private_dir(out.node_, kStagingName);
  // The lock says "a manager of this job runs here": cleaners (tier-clean, the next job) skip a
  // locked node directory, so a job between two steps is the only case they must judge.
  if (::mknodat(out.node_.fd(), kLockName, S_IFREG | 0600, 0) != 0 && errno != EEXIST)
    throw Error(fmt::format("cannot create the lock file: {}", std::strerror(errno)), out.node_.path());
  struct stat st {};
  std::string why;
  out.lock_ = open_own(out.node_, kLockName, st, why, false);
  if (!out.lock_) throw Error(fmt::format("lock file: {}", why), out.node_.path());
  if (::flock(out.lock_.get(), LOCK_SH) != 0)
    throw Error(fmt::format("cannot lock: {}", std::strerror(errno)), out.node_.path_of(kLockName));
  return out;
}

std::optional<parity::Header> read_parity_header(const Dir& d, const std::string& name, std::uint64_t step, unsigned holder_rank,
                                                 unsigned world, std::string& why) {
  struct stat st {};
  Fd fd = open_own(d, name, st, why, false);
  if (!fd) return std::nullopt;
  std::string text(parity::kHeaderBytes, '\0');
  if (::pread(fd.get(), text.data(), text.size(), 0) != static_cast<ssize_t>(text.size())) {
    why = "shorter than a parity header";
    return std::nullopt;
  }
  parity::Header h;
  if (why = parity::parse_header(text, h); !why.empty()) return std::nullopt;
  if (h.step != step || h.members[h.holder] != holder_rank)
    why = fmt::format("the parity of rank {} at step {}, not of rank {} at step {}", h.members[h.holder], h.step, holder_rank, step);
  else if (std::any_of(h.members.begin(), h.members.end(), [&](unsigned r) { return r >= world; }))
    why = fmt::format("a row with a rank beyond the step's {} ranks", world);
  else if (static_cast<std::uint64_t>(st.st_size) != parity::kHeaderBytes + h.block)
    why = fmt::format("{} bytes, its header says {}", st.st_size, parity::kHeaderBytes + h.block);
  else
    return h;
  return std::nullopt;
}

std::vector<StepFiles> NodeDir::inventory(std::vector<std::string>& notes) const {
  std::vector<StepFiles> out;
  for (std::uint64_t step : format::list_steps(node_)) {
    std::string why;
    auto d = node_.sub(format::step_dir_name(step), &why);
    if (!d) {
      notes.push_back(why);
      continue;
    }
    if (why = check_owned(d->stat(), true); !why.empty()) {
      notes.push_back(fmt::format("{}: {}", d->path(), why));
      continue;
    }
    StepFiles s;
    s.step = step;
    // The shard files present (regular, ours) below `world` ranks, ascending.
    auto list_shards = [&](unsigned world) {
      for (const auto& n : d->names()) {
        const auto rank = parse_shard_name(n);
        if (!rank) continue;
        struct stat fst {};
        if (::fstatat(d->fd(), n.c_str(), &fst, AT_SYMLINK_NOFOLLOW) != 0) continue;
        if (why = check_owned(fst, false); !why.empty()) {
          notes.push_back(fmt::format("{} is {} (not used)", d->path_of(n), why));
          continue;
        }
        if (*rank < world) s.ranks.push_back(*rank);
      }
      std::sort(s.ranks.begin(), s.ranks.end());
    };
    struct stat st {};
    Fd mf = open_own(*d, format::kManifestName, st, why, false);
    if (!mf) {
      if (d->exists(format::kManifestName)) {
        notes.push_back(fmt::format("{}: {}", d->path(), why));
        continue;
      }
      // No manifest: uncommitted here, or the job ended before this node wrote it. Its shard files
      // are listed all the same (no manifest hash): when another node holds the step's manifest,
      // restore copies it here and checks these files against it like any others.
      list_shards(format::kMaxWorldSize);
      if (!s.ranks.empty()) out.push_back(std::move(s));
      continue;
    }
    std::string text;
    try {
      text = d->read_small(format::kManifestName, format::kMaxManifestBytes);
    } catch (const Error& e) {
      notes.push_back(e.what());
      continue;
    }
    s.manifest_xxh3 = fmt::format("{:016x}", XXH3_64bits(text.data(), text.size()));
    format::Manifest m;
    if (why = format::read_manifest(*d, step, m); !why.empty()) {
      notes.push_back(fmt::format("{}: {}", d->path(), why));
      continue;
    }
    s.world_size = m.world_size;
    list_shards(m.world_size);
    for (const auto& n : d->names()) {
      const auto holder = parity::parse_file_name(n);
      if (!holder) continue;
      if (auto h = read_parity_header(*d, n, step, *holder, m.world_size, why)) s.parity.push_back(std::move(*h));
      else notes.push_back(fmt::format("{} is {} (not used)", d->path_of(n), why));
    }
    std::sort(s.parity.begin(), s.parity.end(), [](const auto& a, const auto& b) { return a.members[a.holder] < b.members[b.holder]; });
    out.push_back(std::move(s));
  }
  return out;
}

Dir NodeDir::step_dir(std::uint64_t step) const { return private_dir(node_, format::step_dir_name(step)); }

std::optional<Dir> NodeDir::existing_step_dir(std::uint64_t step) const {
  auto d = node_.sub(format::step_dir_name(step));
  if (!d || !check_owned(d->stat(), true).empty()) return std::nullopt;
  return d;
}

void NodeDir::remove_steps_except(std::uint64_t keep, const std::function<void(const std::string&)>& log) const {
  for (std::uint64_t step : format::list_steps(node_)) {
    if (step == keep) continue;
    const std::string name = format::step_dir_name(step);
    auto d = node_.sub(name);
    if (!d || d->stat().st_uid != ::geteuid()) continue;
    d->unlink(format::kManifestName);  // first: a removal cut short leaves an uncommitted step
    empty_dir(*d);
    if (!node_.rmdir(name) && log) log(fmt::format("memory tier: could not remove {}", d->path()));
  }
}

Fd open_own(const Dir& d, const std::string& name, struct stat& st, std::string& why, bool write) {
  struct stat before {};
  if (::fstatat(d.fd(), name.c_str(), &before, AT_SYMLINK_NOFOLLOW) != 0) {
    why = fmt::format("{}: {}", d.path_of(name), std::strerror(errno));
    return Fd();
  }
  if (S_ISLNK(before.st_mode) || !S_ISREG(before.st_mode)) {
    why = fmt::format("{} is {} (refused)", d.path_of(name), S_ISLNK(before.st_mode) ? "a symbolic link" : "not a regular file");
    return Fd();
  }
  if (why = check_owned(before, false); !why.empty()) {
    why = fmt::format("{} is {} (refused)", d.path_of(name), why);
    return Fd();
  }
  Fd fd(::openat(d.fd(), name.c_str(), (write ? O_RDWR : O_RDONLY) | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  if (!fd) {
    why = fmt::format("{}: cannot open: {}", d.path_of(name), describe_open_error(errno));
    return Fd();
  }
  if (::fstat(fd.get(), &st) != 0 || st.st_ino != before.st_ino || st.st_dev != before.st_dev || !S_ISREG(st.st_mode)) {
    why = fmt::format("{} changed while it was opened (refused)", d.path_of(name));
    return Fd();
  }
  return fd;
}

Fd create_own(const Dir& d, const std::string& name) {
  if (::unlinkat(d.fd(), name.c_str(), 0) != 0 && errno != ENOENT)
    throw Error(fmt::format("cannot remove the stale file: {}", std::strerror(errno)), d.path_of(name));
  Fd fd(::openat(d.fd(), name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd) throw Error(fmt::format("cannot create: {}", describe_open_error(errno)), d.path_of(name));
  return fd;
}

bool move(const Dir& from, const std::string& name, const Dir& to, const std::string& new_name, std::string* why) {
  if (::renameat(from.fd(), name.c_str(), to.fd(), new_name.c_str()) == 0) return true;
  if (why) *why = fmt::format("rename {} -> {}: {}", from.path_of(name), to.path_of(new_name), std::strerror(errno));
  return false;
}

std::vector<std::string> clean_finished_jobs(const std::string& base, const std::string& keep,
                                             const std::function<bool(const std::string&)>& finished) {
  std::vector<std::string> out;
  const Dir root = Dir::open(base);
  std::string why;
  auto user = root.sub(user_dir_name(), &why);
  if (!user) return out;  // nothing of ours here
  if (why = check_owned(user->stat(), true); !why.empty()) {
    out.push_back(fmt::format("{}: {}: left alone", user->path(), why));
    return out;
  }
  for (const auto& n : user->names()) {
    if (n.rfind("job-", 0) != 0) continue;
    const std::string job = n.substr(4);
    if (job == keep || !check_name("job", job).empty()) continue;
    if (!finished(job)) {
      out.push_back(fmt::format("job {}: not known to be finished: kept", job));
      continue;
    }
    for (auto& line : remove_job(base, job)) out.push_back(std::move(line));
  }
  return out;
}

std::vector<std::string> remove_job(const std::string& base, const std::string& job) {
  std::vector<std::string> out;
  if (std::string why = check_name("job", job); !why.empty()) throw UsageError(why, "memory tier");
  const Dir root = Dir::open(base);
  std::string why;
  auto user = root.sub(user_dir_name(), &why);
  if (!user || !check_owned(user->stat(), true).empty()) return out;
  const std::string name = "job-" + job;
  auto dir = user->sub(name);
  if (!dir) return out;
  if (dir->stat().st_uid != ::geteuid()) {
    out.push_back(fmt::format("{} is not ours: left alone", dir->path()));
    return out;
  }
  // Cleaners of one job take turns (namespace nodes that share a tmpfs run theirs at once, and a
  // user may run two): another cleaner's lock on a node directory must not read as a live
  // manager's, and the job directory must not be left because each saw the other at work.
  bool turn = false;
  for (int i = 0; i < 3000 && !(turn = ::flock(dir->fd(), LOCK_EX | LOCK_NB) == 0); ++i) ::usleep(10000);
  if (!turn) {
    out.push_back(fmt::format("{}: another tier-clean held it for 30 s: left to it", dir->path()));
    return out;
  }
  if (dir->stat().st_nlink == 0) return out;  // the cleaner before removed it: nothing left to say
  bool kept = false;
  for (const auto& k : dir->names()) {
    auto key = dir->sub(k);
    if (!key || key->stat().st_uid != ::geteuid()) {
      if (!key) dir->unlink(k);  // a planted file or symlink: the name goes, nothing is followed
      else out.push_back(fmt::format("{} is not ours: left alone", key->path())), kept = true;
      continue;
    }
    bool key_kept = false;
    for (const auto& n : key->names())
      if (std::string left = remove_node_dir(*key, n); !left.empty()) {
        out.push_back(left);
        key_kept = kept = true;
      }
    if (!key_kept) dir->rmdir(k);
  }
  if (!kept && user->rmdir(name)) out.push_back(fmt::format("removed {}", dir->path()));
  return out;
}

}  // namespace trainrt::checkpoint::tier

namespace trainrt::checkpoint {

std::vector<std::string> remove_memory_tier(const std::string& base, const std::string& job) {
  return tier::remove_job(base, job);
}

std::vector<std::string> remove_finished_memory_tiers(const std::string& base, const std::string& keep,
                                                      const std::function<bool(const std::string&)>& finished) {
  return tier::clean_finished_jobs(base, keep, finished);
}

}  // namespace trainrt::checkpoint
