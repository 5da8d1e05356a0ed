#include <algorithm>
#include <map>
#include <numeric>

#include "session_impl.hpp"

namespace trainrt::bootstrap {
namespace {

class SingleSession final : public Session {
 public:
  unsigned rank() const override { return 0; }
  unsigned size() const override { return 1; }
  unsigned local_rank() const override { return 0; }
  unsigned local_size() const override { return 1; }
  unsigned node_id() const override { return 0; }
  std::vector<unsigned> local_peers() const override { return {0}; }
  std::vector<std::vector<unsigned>> ranks_by_node() override { return {{0}}; }
  std::string job_id() const override { return "single"; }
  bool is_single_process() const override { return true; }
  std::vector<Blob> allgather(std::span<const std::uint8_t> mine) override { return {Blob(mine.begin(), mine.end())}; }
  Blob broadcast(std::span<const std::uint8_t> data, unsigned root) override {
    if (root != 0) throw Error(fmt::format("broadcast root {} outside a world of 1", root), "bootstrap");
    return Blob(data.begin(), data.end());
  }
  void barrier() override {}
  void publish(const std::string& key, std::span<const std::uint8_t> data) override {
    published_[key] = Blob(data.begin(), data.end());
  }
  Blob lookup(unsigned owner, const std::string& key) override {
    auto it = published_.find(key);
    if (owner != 0 || it == published_.end())
      throw Error(fmt::format("rank {} never published '{}'", owner, key), "bootstrap");
    return it->second;
  }

 private:
  std::map<std::string, Blob> published_;
};

}  // namespace

std::unique_ptr<Session> Session::single_process() { return std::make_unique<SingleSession>(); }

// The generic forms, over allgather; PmixSession reads only what the caller needs.
std::vector<Blob> Session::gather(std::span<const std::uint8_t> mine, unsigned root) {
  if (root >= size()) throw Error(fmt::format("gather root {} outside a world of {}", root, size()), "bootstrap");
  auto all = allgather(mine);
  return rank() == root ? all : std::vector<Blob>{};
}

std::vector<Blob> Session::gather_from(std::span<const std::uint8_t> mine, const std::vector<unsigned>& sources) {
  check_sources(sources, size());
  const bool source = std::binary_search(sources.begin(), sources.end(), rank());
  auto all = allgather(source ? mine : std::span<const std::uint8_t>{});
  std::vector<Blob> out;
  for (unsigned r : sources) out.push_back(std::move(all[r]));
  return out;
}

void Session::join_gather_from(const std::vector<unsigned>& sources) {
  check_joiner(sources, size(), rank());
  gather_from({}, sources);
}

std::vector<Blob> Session::gather_some(std::span<const std::uint8_t> mine, const std::vector<unsigned>& sources,
                                       const std::vector<unsigned>& reads) {
  check_reads(sources, reads, size());
  auto blobs = gather_from(mine, sources);
  std::vector<Blob> out;
  for (unsigned r : reads) out.push_back(std::move(blobs[std::lower_bound(sources.begin(), sources.end(), r) - sources.begin()]));
  return out;
}

// Every rank a source; PmixSession's gather_some reads only `reads`.
std::vector<Blob> Session::allgather_some(std::span<const std::uint8_t> mine, const std::vector<unsigned>& reads) {
  std::vector<unsigned> everyone(size());
  std::iota(everyone.begin(), everyone.end(), 0u);
  auto blobs = gather_some(mine, everyone, reads);
  std::vector<Blob> all(size());
  for (std::size_t i = 0; i < reads.size(); ++i) all[reads[i]] = std::move(blobs[i]);
  return all;
}

void check_reads(const std::vector<unsigned>& sources, const std::vector<unsigned>& reads, unsigned size) {
  check_sources(sources, size);
  for (std::size_t i = 0; i < reads.size(); ++i)
    if ((i > 0 && reads[i] <= reads[i - 1]) || !std::binary_search(sources.begin(), sources.end(), reads[i]))
      throw Error(fmt::format("gather_some: read {} (position {}) is not an ascending rank among the {} sources",
                              reads[i], i, sources.size()),
                  "bootstrap");
}

void check_sources(const std::vector<unsigned>& sources, unsigned size) {
  for (std::size_t i = 0; i < sources.size(); ++i)
    if (sources[i] >= size || (i > 0 && sources[i] <= sources[i - 1]))
      throw Error(fmt::format("gather_from: source {} (position {}) is not an ascending rank of a world of {}",
                              sources[i], i, size),
                  "bootstrap");
}

void check_joiner(const std::vector<unsigned>& sources, unsigned size, unsigned rank) {
  check_sources(sources, size);
  if (std::binary_search(sources.begin(), sources.end(), rank))
    throw Error(fmt::format("join_gather_from: rank {} is one of the sources: it must call gather_from", rank),
                "bootstrap");
}

Blob exchange_unique_id(Session& session, const Blob& id_on_root, unsigned root) {
  Blob id = session.broadcast(id_on_root, root);
  if (id.empty()) throw Error(fmt::format("rank {} sent an empty unique id", root), "bootstrap");
  return id;
}

}  // namespace trainrt::bootstrap
