// The bootstrap's collectives run as separate processes under a PMIx server (mpirun or srun
// --mpi=pmix): allgather, gather to every root, gather_from a few sources, broadcast, and
// ranks_by_node against the ranks' own view of their node. Blob content is a pure function of the
// rank (and sizes differ by rank, empty included), so every rank checks what it received.
// Prints "rank R of N: K checks, F failed, nodes [a,b|c,d]"; exit 0 only when nothing failed.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "trainrt/bootstrap/session.hpp"
#include "trainrt/error.hpp"

using namespace trainrt::bootstrap;

namespace {

unsigned checks = 0, failures = 0;

void check(bool ok, const std::string& what) {
  ++checks;
  if (!ok && failures++ < 20) fmt::print(stderr, "FAIL: {}\n", what);
}

Blob blob_of(unsigned rank, unsigned salt) {
  Blob b(rank % 3 == 1 ? 0 : 1 + (rank * 7 + salt) % 40);
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<std::uint8_t>(rank * 31 + salt * 5 + i);
  return b;
}

}  // namespace

int main() {
  try {
    auto s = Session::open({std::chrono::seconds(60), true});
    const unsigned me = s->rank(), n = s->size();
    auto all = s->allgather(blob_of(me, 1));
    check(all.size() == n, "allgather size");
    for (unsigned r = 0; r < n && r < all.size(); ++r) check(all[r] == blob_of(r, 1), fmt::format("allgather from {}", r));
    for (unsigned root = 0; root < n; ++root) {
      auto got = s->gather(blob_of(me, 2 + root), root);
      if (me != root) {
        check(got.empty(), fmt::format("gather to {}: rank {} received {} blobs", root, me, got.size()));
        continue;
      }
      check(got.size() == n, fmt::format("gather to {}: {} blobs", root, got.size()));
      for (unsigned r = 0; r < n && r < got.size(); ++r)
        check(got[r] == blob_of(r, 2 + root), fmt::format("gather to {}: blob of {}", root, r));
    }
    std::vector<unsigned> sources = {0};
    if (n > 2) sources.push_back(2);
    if (n > 3) sources.push_back(n - 1);
    auto some = s->gather_from(blob_of(me, 90), sources);
    check(some.size() == sources.size(), "gather_from size");
    for (std::size_t i = 0; i < sources.size() && i < some.size(); ++i)
      check(some[i] == blob_of(sources[i], 90), fmt::format("gather_from source {}", sources[i]));
    try {
      s->gather_from(blob_of(me, 91), {1, 0});
      check(false, "gather_from {1, 0} was accepted");
    } catch (const trainrt::Error& e) {
      check(std::string(e.what()).find("source 0") != std::string::npos, fmt::format("unclear error: {}", e.what()));
    }
    // The message counts (docs/scale.md): a broadcast is one fence with data, one put at the root
    // and one get elsewhere; a barrier one data-free fence and nothing else.
    const auto c0 = s->counts();
    check(s->broadcast(blob_of(me, 92), n - 1) == blob_of(n - 1, 92), "broadcast from the last rank");
    const auto c1 = s->counts();
    const bool root = me == n - 1;
    const auto gets = [](const trainrt::bootstrap::SessionCounts& c) { return c.gets_local + c.gets_remote; };
    check(c1.fences_with_data == c0.fences_with_data + 1 && c1.fences == c0.fences && c1.puts == c0.puts + (root ? 1 : 0) &&
              gets(c1) == gets(c0) + (root ? 0 : 1),
          fmt::format("broadcast counted {} fences with data, {} fences, {} puts, {} gets", c1.fences_with_data - c0.fences_with_data,
                      c1.fences - c0.fences, c1.puts - c0.puts, gets(c1) - gets(c0)));
    const bool same_node = std::ranges::count(s->local_peers(), n - 1) > 0;
    check(root || (same_node ? c1.gets_local - c0.gets_local : c1.gets_remote - c0.gets_remote) == 1,
          fmt::format("the root's blob read as {} (the root is {} this node)", same_node ? "remote" : "local",
                      same_node ? "on" : "off"));
    auto nodes = s->ranks_by_node();
    std::vector<unsigned> seen;
    for (const auto& node : nodes) {
      seen.insert(seen.end(), node.begin(), node.end());
      if (std::find(node.begin(), node.end(), me) != node.end())
        check(node == s->local_peers(), fmt::format("my node {} != local peers {}", node, s->local_peers()));
    }
    std::sort(seen.begin(), seen.end());
    std::vector<unsigned> every(n);
    for (unsigned r = 0; r < n; ++r) every[r] = r;
    check(seen == every, fmt::format("ranks_by_node covers {}", seen));
    std::string shape;
    for (const auto& node : nodes) shape += fmt::format("{}{}", shape.empty() ? "" : "|", fmt::join(node, ","));
    // join_gather_from: the ranks outside `sources` join the fence and read nothing.
    const std::vector<unsigned> first_last = n > 1 ? std::vector<unsigned>{0, n - 1} : std::vector<unsigned>{0};
    const bool source = me == 0 || me == n - 1;
    const auto c4 = s->counts();
    if (source) {
      const auto got = s->gather_from(blob_of(me, 93), first_last);
      check(got.size() == first_last.size() && got.front() == blob_of(0, 93) && got.back() == blob_of(n - 1, 93),
            "gather_from beside join_gather_from");
    } else {
      s->join_gather_from(first_last);
      const auto c5 = s->counts();
      check(gets(c5) == gets(c4) && c5.puts == c4.puts && c5.fences_with_data == c4.fences_with_data + 1,
            fmt::format("join_gather_from read {} blobs and put {}", gets(c5) - gets(c4), c5.puts - c4.puts));
    }
    if (source) {
      try {
        s->join_gather_from(first_last);
        check(false, "join_gather_from by a source was accepted");
      } catch (const trainrt::Error& e) {
        check(std::string(e.what()).find("one of the sources") != std::string::npos, fmt::format("unclear error: {}", e.what()));
      }
    }
    // allgather_some: every rank reads only its neighbours' blobs (a list of its own), counted.
    std::vector<unsigned> nbrs = {(me + n - 1) % n, (me + 1) % n};
    std::sort(nbrs.begin(), nbrs.end());
    nbrs.erase(std::unique(nbrs.begin(), nbrs.end()), nbrs.end());
    const auto c6 = s->counts();
    const auto near = s->allgather_some(blob_of(me, 94), nbrs);
    const auto c7 = s->counts();
    check(near.size() == n, fmt::format("allgather_some returned {} blobs for {} ranks", near.size(), n));
    for (unsigned r = 0; r < n && r < near.size(); ++r) {
      const bool wanted = std::binary_search(nbrs.begin(), nbrs.end(), r);
      check(wanted ? near[r] == blob_of(r, 94) : near[r].empty(), fmt::format("allgather_some: the blob of {}", r));
    }
    const std::size_t own = std::ranges::count(nbrs, me);  // one's own blob is no read of a server
    check(gets(c7) - gets(c6) <= nbrs.size() && gets(c7) - gets(c6) + own >= nbrs.size() &&
              c7.fences_with_data == c6.fences_with_data + 1,
          fmt::format("allgather_some read {} blobs for {} wanted", gets(c7) - gets(c6), nbrs.size()));
    try {
      s->gather_some(blob_of(me, 95), first_last, {n > 2 ? 1u : n});
      check(false, "gather_some reading a rank that is not a source was accepted");
    } catch (const trainrt::Error& e) {
      check(std::string(e.what()).find("among the") != std::string::npos, fmt::format("unclear error: {}", e.what()));
    }
    const auto c2 = s->counts();
    s->barrier();
    const auto c3 = s->counts();
    check(c3.fences == c2.fences && c3.fences_with_data == c2.fences_with_data + 1 && c3.puts == c2.puts + 1 &&
              gets(c3) == gets(c2),
          "a barrier was more than one put and one fence with data, or read anything");
    // The barrier holds every rank until the last arrives, on every node. Slurm carries a fence
    // without data on its tree, which is each node on its own when the step has fewer nodes than
    // TreeWidth: such a barrier let the other nodes through at once (tests/slurm/four_nodes.sh).
    const auto late = std::chrono::milliseconds(800);
    const auto before = std::chrono::steady_clock::now();
    if (me == n - 1) std::this_thread::sleep_for(late);
    s->barrier();
    const auto held = std::chrono::steady_clock::now() - before;
    check(held >= late * 3 / 4, fmt::format("the barrier let rank {} through after {} ms, before rank {} arrived ({} ms late)", me,
                                            std::chrono::duration_cast<std::chrono::milliseconds>(held).count(), n - 1, late.count()));
    fmt::print("rank {} of {}: {} checks, {} failed, nodes [{}]\n", me, n, checks, failures, shape);
    return failures ? 1 : 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
}
