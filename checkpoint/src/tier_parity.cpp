// The memory tier's parity groups (parity.hpp): at a save every rank sends each of its blocks to
// the member whose parity holds it, and XORs the blocks it receives into its own parity file; at a
// restore a node that lacks a shard nobody holds rebuilds it from the row's parities and the other
// members' shards. The rebuilt file is then loaded like any other: every checksum, the
// fingerprints. A parity block is checked against its header's XXH3 before it is sent.
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "buddy.hpp"
#include "layout.hpp"
#include "manager_impl.hpp"
#include "parity.hpp"
#include "trainrt/error.hpp"
#include "xxh3.hpp"

namespace trainrt::checkpoint {

static_assert(parity::kMaxRanks == format::kMaxWorldSize);

namespace {

// A file of `bytes` mapped read-write, to XOR pieces into; unmapped on destruction.
class XorTarget {
 public:
  XorTarget() = default;
  XorTarget(Fd fd, std::uint64_t bytes) : fd_(std::move(fd)), bytes_(bytes) {
    // A page tmpfs could not give would be a SIGBUS inside an XOR; here it is an error, and the
    // step is not protected.
    map_ = map_tier_pages(fd_.get(), bytes, "memory tier parity");
  }
  XorTarget(XorTarget&& o) noexcept
      : fd_(std::move(o.fd_)), bytes_(std::exchange(o.bytes_, 0)), map_(std::exchange(o.map_, nullptr)) {}
  XorTarget& operator=(XorTarget&& o) noexcept {
    if (this != &o) {
      unmap();
      fd_ = std::move(o.fd_);
      bytes_ = std::exchange(o.bytes_, 0);
      map_ = std::exchange(o.map_, nullptr);
    }
    return *this;
  }
  ~XorTarget() { unmap(); }
  explicit operator bool() const { return map_ != nullptr; }
  std::byte* data() const { return map_; }
  std::uint64_t size() const { return bytes_; }
  // XOR of n bytes at `at`, clipped to the mapping (what lies past it is padding).
  void xor_at(std::uint64_t at, const std::byte* src, std::size_t n) {
    if (at >= bytes_) return;
    parity::xor_into(map_ + at, src, static_cast<std::size_t>(std::min<std::uint64_t>(n, bytes_ - at)));
  }
  void unmap() {
    if (map_) ::munmap(map_, bytes_);
    map_ = nullptr;
  }
  int fd() const { return fd_.get(); }

 private:
  Fd fd_;
  std::uint64_t bytes_ = 0;
  std::byte* map_ = nullptr;
};

// n bytes at `at` of a file whose first `size` bytes count (zeros past them), into dst.
std::string read_padded(int fd, std::uint64_t base, std::uint64_t size, std::uint64_t at, std::byte* dst, std::size_t n) {
  std::memset(dst, 0, n);
  if (at >= size) return {};
  return pread_all(fd, dst, static_cast<std::size_t>(std::min<std::uint64_t>(n, size - at)), base + at);
}

constexpr std::uint64_t kCheckPiece = std::uint64_t{4} << 20;  // bytes read at a time to check a parity block

}  // namespace

std::string Manager::Impl::persist_parity(std::uint64_t step, const std::vector<unsigned>& node_of,
                                          const std::vector<format::ShardRecord>& shards) {
  const unsigned rank = session.rank();
  const auto rows = parity::rows(node_of, opts.memory_tier.parity_group);
  std::vector<buddy::Transfer> transfers;
  std::vector<std::uint64_t> source_offset;  // per transfer: where in the sender's file its block starts
  std::uint64_t my_block = 0;
  const parity::Row* mine = nullptr;
  for (const auto& row : rows) {
    const unsigned g = static_cast<unsigned>(row.members.size());
    if (std::find(row.members.begin(), row.members.end(), rank) != row.members.end()) mine = &row;
    if (g < 2) continue;
    std::uint64_t largest = 0;
    for (unsigned r : row.members) largest = std::max(largest, shards[r].bytes);
    const std::uint64_t block = parity::block_bytes(largest, g);
    if (mine == &row) my_block = block;
    for (unsigned i = 0; i < g; ++i)
      for (unsigned j = 0; j < g; ++j)
        if (i != j) {
          transfers.push_back({row.members[i], row.members[j], block});
          source_offset.push_back(parity::block_of(i, j, g) * block);
        }
  }
  std::string why;
  if (!mine || mine->members.size() < 2)
    why = fmt::format("rank {} has no parity partner (its node's position is not on another node of its group)", rank);
  const std::string name = parity::file_name(rank);
  XorTarget target;
  std::optional<Dir> d;
  if (why.empty()) {
    try {
      d = tier.dir->step_dir(step);
      // This rank's previous parity goes first: a node never holds two generations of it.
      for (const auto& s : format::list_steps(tier.dir->dir()))
        if (auto old = tier.dir->existing_step_dir(s)) old->unlink(name);
      target = XorTarget(tier::create_own(*d, name + ".tmp"), parity::kHeaderBytes + my_block);
    } catch (const std::exception& e) {
      why = e.what();
    }
  }
  const std::uint64_t my_bytes = shards[rank].bytes;
  try {
    const auto moved = buddy::move(
        transfer_comm(), transfers, opts.transfer_bytes,
        [&](std::size_t i, std::uint64_t at, std::byte* dst, std::size_t n) {
          return read_padded(staging.fd(), source_offset[i], my_bytes > source_offset[i] ? my_bytes - source_offset[i] : 0, at,
                             dst, n);
        },
        [&](std::size_t, std::uint64_t at, const std::byte* src, std::size_t n) {
          if (!target) return std::string("no parity file to write into");
          target.xor_at(parity::kHeaderBytes + at, src, n);
          return std::string();
        });
    if (why.empty()) why = moved.why;
  } catch (const std::exception& e) {
    if (why.empty()) why = e.what();
  }
  if (!why.empty()) return why;
  try {
    parity::Header h;
    h.step = step;
    h.members = mine->members;
    h.holder = static_cast<unsigned>(std::find(h.members.begin(), h.members.end(), rank) - h.members.begin());
    h.block = my_block;
    h.xxh3 = layout::hex(XXH3_64bits(target.data() + parity::kHeaderBytes, static_cast<std::size_t>(my_block)));
    const std::string head = parity::header_text(h);
    std::memcpy(target.data(), head.data(), head.size());
    target.unmap();
    if (!tier::move(*d, name + ".tmp", *d, name, &why)) return why;
  } catch (const std::exception& e) {
    return e.what();
  }
  return {};
}

std::optional<ParityRebuild> plan_parity_rebuild(unsigned shard, const std::vector<std::optional<tier::StepFiles>>& held,
                                                 const std::function<bool(unsigned, unsigned)>& has,
                                                 const format::Manifest& manifest, std::string& why) {
  const unsigned nodes = static_cast<unsigned>(held.size());
  // A parity file of `holder_rank` in this row, on some node: its node.
  auto parity_node = [&](const parity::Header& row, unsigned holder_rank) -> std::optional<std::pair<unsigned, std::string>> {
    for (unsigned x = 0; x < nodes; ++x) {
      if (!held[x]) continue;
      for (const auto& p : held[x]->parity)
        if (p.members == row.members && p.block == row.block && p.members[p.holder] == holder_rank)
          return std::make_pair(x, p.xxh3);
    }
    return std::nullopt;
  };
  for (unsigned x = 0; x < nodes; ++x) {
    if (!held[x]) continue;
    for (const auto& row : held[x]->parity) {
      const auto at = std::find(row.members.begin(), row.members.end(), shard);
      if (at == row.members.end()) continue;
      const unsigned g = static_cast<unsigned>(row.members.size()), i = static_cast<unsigned>(at - row.members.begin());
      std::uint64_t largest = 0;
      for (unsigned r : row.members)
        largest = std::max(largest, r < manifest.shards.size() ? manifest.shards[r].bytes : 0);
      if (parity::block_bytes(largest, g) != row.block) {
        why = fmt::format("the parity of rank {} has blocks of {} bytes, the manifest's shards make {}", row.members[row.holder],
                          row.block, parity::block_bytes(largest, g));
        continue;
      }
      ParityRebuild plan;
      plan.shard = shard;
      plan.bytes = manifest.shards[shard].bytes;
      plan.block = row.block;
      plan.blocks = g - 1;
      std::string lacking;
      for (unsigned b = 0; b + 1 < g && lacking.empty(); ++b) {
        const unsigned j = parity::holder_of(i, b, g);
        const auto pn = parity_node(row, row.members[j]);
        if (!pn) lacking = fmt::format("the parity of rank {}", row.members[j]);
        else plan.inputs.push_back({pn->first, parity::file_name(row.members[j]), parity::kHeaderBytes, row.block, b, pn->second});
        for (unsigned m = 0; m < g && lacking.empty(); ++m) {
          if (m == i || m == j) continue;
          const unsigned r = row.members[m];
          std::optional<unsigned> y;
          for (unsigned k = 0; k < nodes && !y; ++k)
            if (held[k] && has(k, r)) y = k;
          if (!y) lacking = fmt::format("rank {}'s shard", r);
          else {
            const std::uint64_t off = parity::block_of(m, j, g) * row.block;
            plan.inputs.push_back({*y, format::shard_name(r), off, manifest.shards[r].bytes > off ? manifest.shards[r].bytes - off : 0, b, ""});
          }
        }
      }
      if (lacking.empty()) return plan;
      why = fmt::format("rebuilding rank {}'s shard from parity needs {}, which no node holds", shard, lacking);
    }
  }
  if (why.empty()) why = "no parity covers it";  // tier_restore.cpp's kNoParity
  return std::nullopt;
}

std::string Manager::Impl::run_parity_rebuilds(std::uint64_t step, const Holdings& h, const std::vector<ParityRebuild>& plans) {
  const unsigned rank = session.rank(), world = session.size();
  struct Source {
    Fd fd;
    std::uint64_t offset = 0, size = 0;
  };
  std::vector<buddy::Transfer> transfers;
  std::vector<Source> sources;      // per transfer (opened on its sender only)
  std::vector<std::size_t> plan_of;  // per transfer
  std::vector<unsigned> block_of;    // per transfer: the rebuilt block it goes into
  std::vector<XorTarget> targets(plans.size());
  std::string why;
  std::optional<Dir> d;
  try {
    d = tier.dir->existing_step_dir(step);
    if (!d) why = "its directory is gone";
  } catch (const std::exception& e) {
    why = e.what();
  }
  // An input's file opened on this rank (its sender, or the receiver when it lies on its own node),
  // a parity block checked against its header's XXH3 first: a bad one names itself.
  auto open_input = [&](const ParityRebuild::Input& in, Source& src) {
    struct stat st {};
    std::string e;
    src.fd = tier::open_own(*d, in.name, st, e, false);
    src.offset = in.offset;
    src.size = in.size;
    if (src.fd && !in.xxh3.empty()) {
      // In pieces: a block can be gigabytes.
      std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state(XXH3_createState(), XXH3_freeState);
      std::vector<std::byte> piece(static_cast<std::size_t>(std::min<std::uint64_t>(in.size, kCheckPiece)));
      if (!state) e = "out of memory for a hash state";
      else XXH3_64bits_reset(state.get());
      for (std::uint64_t at = 0; e.empty() && at < in.size; at += piece.size()) {
        const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(piece.size(), in.size - at));
        e = read_padded(src.fd.get(), in.offset, in.size, at, piece.data(), n);
        if (e.empty()) XXH3_64bits_update(state.get(), piece.data(), n);
      }
      if (e.empty() && layout::hex(XXH3_64bits_digest(state.get())) != in.xxh3)
        e = fmt::format("{} fails its checksum", d->path_of(in.name));
    }
    if (!e.empty()) src.fd.reset();
    if (!e.empty() && why.empty()) why = e;
  };
  // The transfers first, alike on every rank (no I/O, nothing this rank alone could fail on);
  // inputs on the receiver's own node are read there, not sent.
  std::vector<const ParityRebuild::Input*> input_of;  // per transfer
  std::vector<std::pair<std::size_t, const ParityRebuild::Input*>> locals;  // this rank's: (plan, input)
  for (std::size_t p = 0; p < plans.size(); ++p) {
    for (std::size_t k = 0; k < plans[p].inputs.size(); ++k) {
      const auto& in = plans[p].inputs[k];
      if (in.node == h.node_of[plans[p].receiver]) {
        if (plans[p].receiver == rank) locals.emplace_back(p, &in);
        continue;
      }
      std::vector<unsigned> senders;
      for (unsigned r = 0; r < world; ++r)
        if (h.node_of[r] == in.node) senders.push_back(r);
      transfers.push_back({senders[k % senders.size()], plans[p].receiver, plans[p].block});
      plan_of.push_back(p);
      block_of.push_back(in.block);
      input_of.push_back(&in);
    }
  }
  sources.resize(transfers.size());
  // This rank's files; nothing here may leave before the move, where the other ranks wait.
  try {
    for (std::size_t p = 0; p < plans.size() && why.empty(); ++p)
      if (plans[p].receiver == rank)
        targets[p] = XorTarget(tier::create_own(*d, format::shard_name(plans[p].shard) + ".tmp"), plans[p].block * plans[p].blocks);
    for (std::size_t i = 0; i < transfers.size() && why.empty(); ++i)
      if (transfers[i].from == rank) open_input(*input_of[i], sources[i]);
    for (const auto& [p, in] : locals) {
      if (!why.empty()) break;
      Source local;
      open_input(*in, local);
      std::vector<std::byte> piece(static_cast<std::size_t>(std::min<std::uint64_t>(plans[p].block, kCheckPiece)));
      for (std::uint64_t at = 0; at < plans[p].block && why.empty(); at += piece.size()) {
        const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(piece.size(), plans[p].block - at));
        why = read_padded(local.fd.get(), local.offset, local.size, at, piece.data(), n);
        if (why.empty()) targets[p].xor_at(in->block * plans[p].block + at, piece.data(), n);
      }
    }
  } catch (const std::exception& e) {
    if (why.empty()) why = e.what();
  }
  try {
    if (!opts.host && !own_host) transfer_comm();
    const auto moved = buddy::move(
        opts.host ? *opts.host : *own_host, transfers, opts.transfer_bytes,
        [&](std::size_t i, std::uint64_t at, std::byte* dst, std::size_t n) -> std::string {
          if (!sources[i].fd) return "no source";
          return read_padded(sources[i].fd.get(), sources[i].offset, sources[i].size, at, dst, n);
        },
        [&](std::size_t i, std::uint64_t at, const std::byte* src, std::size_t n) -> std::string {
          auto& t = targets[plan_of[i]];
          if (!t) return "no file to rebuild into";
          t.xor_at(block_of[i] * plans[plan_of[i]].block + at, src, n);
          return {};
        });
    if (why.empty()) why = moved.why;
  } catch (const std::exception& e) {
    if (why.empty()) why = e.what();
  }
  for (std::size_t p = 0; p < plans.size() && why.empty(); ++p) {
    if (!targets[p]) continue;
    targets[p].unmap();
    if (::ftruncate(targets[p].fd(), static_cast<off_t>(plans[p].bytes)) != 0)
      why = fmt::format("cannot size the rebuilt shard to {} bytes: {}", plans[p].bytes, std::strerror(errno));
    else
      tier::move(*d, format::shard_name(plans[p].shard) + ".tmp", *d, format::shard_name(plans[p].shard), &why);
  }
  return why;
}

}  // namespace trainrt::checkpoint
