// Flight files written before the recorder had failure fields ("failure", "failure_ranks",
// "waited_s") say what failed only in their reason, in the host backends' words of that time:
// "timed out after 3000 ms waiting for rank(s) 1,3", "rank 2 (pid 77) died", "aborted because rank
// 2 failed", the watchdog's "in flight for 3.0 s", NCCL's "did not complete within N ms". Read
// here once, when such a file is read, into the same fields, so the verdict reads fields only and
// no message the runtime writes today is parsed anywhere.
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <set>

#include "trainrt/number.hpp"
#include "reading.hpp"

namespace trainrt::doctor {
namespace {

// Digits at s[pos...]: the number, and pos moved past them. Bounded to 9 digits.
std::optional<std::uint64_t> number_at(const std::string& s, std::size_t& pos) {
  std::size_t end = pos;
  while (end < s.size() && end - pos < 9 && s[end] >= '0' && s[end] <= '9') ++end;
  if (end == pos) return std::nullopt;
  const auto v = to_number<std::uint64_t>(std::string_view(s).substr(pos, end - pos));
  pos = end;
  return v;
}

std::optional<double> decimal_after(const std::string& s, const std::string& key) {
  const auto at = s.find(key);
  if (at == std::string::npos) return std::nullopt;
  const char* b = s.data() + at + key.size();
  double v = 0;
  auto [p, ec] = std::from_chars(b, s.data() + s.size(), v);
  if (ec != std::errc() || !std::isfinite(v) || v < 0) return std::nullopt;
  return v;
}

}  // namespace

LegacyFailure legacy_failure(const std::string& reason, unsigned max_rank) {
  std::vector<unsigned> named;  // waited for or died
  std::optional<unsigned> because;
  auto keep = [&](std::optional<std::uint64_t> r) {
    if (r && *r < max_rank && named.size() < 64) named.push_back(static_cast<unsigned>(*r));
  };
  if (auto at = reason.find("waiting for rank(s) "); at != std::string::npos) {
    std::size_t pos = at + 20;
    while (named.size() < 64) {
      keep(number_at(reason, pos));
      while (pos < reason.size() && reason[pos] == ' ') ++pos;
      if (pos < reason.size() && reason[pos] == ',') {
        ++pos;
        while (pos < reason.size() && reason[pos] == ' ') ++pos;
        continue;
      }
      break;
    }
  }
  if (auto at = reason.find("because rank "); at != std::string::npos) {
    std::size_t pos = at + 13;
    if (auto r = number_at(reason, pos); r && *r < max_rank) because = static_cast<unsigned>(*r);
  }
  for (std::size_t at = reason.find(" died"); at != std::string::npos && at > 0; at = reason.find(" died", at + 1)) {
    // "... rank 2 (pid 77) died": the last "rank " before " died".
    const auto r = reason.rfind("rank ", at);
    if (r == std::string::npos) break;
    std::size_t pos = r + 5;
    keep(number_at(reason, pos));
  }
  CollectiveFailure f;
  bool timed_out = false;
  for (const char* t : {"timed out", "in flight for", "did not complete", "no step progress"})
    timed_out = timed_out || reason.find(t) != std::string::npos;
  if (timed_out) f.kind = FailureKind::Timeout, f.ranks = named;
  else if (!named.empty()) f.kind = FailureKind::DeadPeer, f.ranks = named;
  else if (because) f.kind = FailureKind::Aborted, f.ranks = {*because};
  else return {};
  if (auto ms = decimal_after(reason, "timed out after ")) f.waited_s = *ms / 1000;
  else if (auto s = decimal_after(reason, "in flight for ")) f.waited_s = *s;
  else if (auto ms2 = decimal_after(reason, "did not complete within ")) f.waited_s = *ms2 / 1000;
  // A "shm:" message of a world across nodes numbers the peers of the reporter's own node.
  return {std::move(f), reason.find("shm: rank ") != std::string::npos};
}

// In a world across nodes the host communicator was shared memory inside each node and Gloo
// between the nodes' leaders, and a "shm:" message numbered the peers of its own node ("shm: rank
// 1: ... waiting for rank(s) 0" from global rank 3 meant global rank 2). The start events' node
// and local_rank give the mapping; without them names are taken as global ranks (one node: the
// same numbers).
void map_node_local(std::map<unsigned, RankData>& ranks, const std::set<unsigned>& node_local) {
  std::map<std::string, std::map<unsigned, unsigned>> by_node;  // node -> local rank -> rank
  std::set<std::string> conflicting;                            // two ranks claim one slot
  for (const auto& [r, rd] : ranks) {
    if (rd.node.empty() || !rd.local_rank) continue;
    auto [it, fresh] = by_node[rd.node].try_emplace(*rd.local_rank, rd.rank);
    if (!fresh && it->second != rd.rank) conflicting.insert(rd.node);
  }
  for (unsigned reporter : node_local) {
    auto found = ranks.find(reporter);
    if (found == ranks.end() || !found->second.failure) continue;
    RankData& rd = found->second;
    if (rd.node.empty() || !rd.local_rank || conflicting.count(rd.node)) continue;
    const auto& slots = by_node.at(rd.node);
    // The first node (or the only one): local and global numbers agree, also for a rank that left
    // no file.
    if (std::all_of(slots.begin(), slots.end(), [](const auto& kv) { return kv.first == kv.second; })) continue;
    std::vector<unsigned> global;
    for (unsigned named : rd.failure->ranks)
      if (auto it = slots.find(named); it != slots.end()) global.push_back(it->second);  // else: cannot be told
    rd.failure->ranks = std::move(global);
  }
}

}  // namespace trainrt::doctor
