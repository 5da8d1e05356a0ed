#include "trainrt/runtime/gloo_communicator.hpp"

#include <fmt/format.h>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoallv.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/address.h>
#include <gloo/transport/context.h>
#include <gloo/transport/tcp/device.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>

#include "host_communicator.hpp"
#include "leader_rendezvous.hpp"
#include "trainrt/data_interface.hpp"
#include "trainrt/number.hpp"
#include "trainrt/error.hpp"
#include "trainrt/kernels/half.hpp"
#include "trainrt/runtime/reduce.hpp"

namespace trainrt {
namespace {

// Gloo's rendezvous asks a key-value store: each rank sets its own keys and waits for some of the
// others' (not symmetrically: a rank reads only lower ranks' host names). Every Gloo key ends in
// the rank that sets it ("rank_3", "3"), so a wait becomes a bootstrap lookup from that rank.
class BootstrapStore final : public gloo::rendezvous::Store {
 public:
  BootstrapStore(bootstrap::Session& s, std::string prefix) : session_(s), prefix_(std::move(prefix)) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    const auto* p = reinterpret_cast<const std::uint8_t*>(data.data());
    session_.publish(prefix_ + key, std::span<const std::uint8_t>(p, data.size()));
  }

  std::vector<char> get(const std::string& key) override {
    auto it = values_.find(key);
    if (it == values_.end()) {
      bootstrap::Blob b = session_.lookup(owner_of(key), prefix_ + key);
      it = values_.emplace(key, std::vector<char>(b.begin(), b.end())).first;
    }
    return it->second;
  }

  void wait(const std::vector<std::string>& keys) override { wait(keys, kDefaultTimeout); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds&) override {
    for (const auto& k : keys) get(k);
  }

 private:
  static unsigned owner_of(const std::string& key) {
    std::size_t digits = key.size();
    while (digits > 0 && std::isdigit(static_cast<unsigned char>(key[digits - 1]))) --digits;
    if (digits == key.size()) throw Error(fmt::format("cannot tell which rank sets '{}'", key), "gloo rendezvous");
    return parse_number<unsigned>(std::string_view(key).substr(digits), "a rank", 0, ~0u, "gloo rendezvous key");
  }

  bootstrap::Session& session_;
  std::string prefix_;
  std::map<std::string, std::vector<char>> values_;
};

// Gloo's mesh with the addresses exchanged in one exchange instead of a store's keys: every rank
// creates a pair per peer it connects to (gloo_peers), hands those pairs' listening addresses to
// `exchange` in one blob (a 4-byte length before each, in its peers' ascending order), gets its
// peers' blobs back (indexed by rank) and connects each pair to the address its peer made for it.
// With PowersOfTwo a rank's blob, reads and sockets grow with log2(size), not size.
class ExchangedMeshContext final : public gloo::rendezvous::Context {
 public:
  using gloo::rendezvous::Context::Context;

  using Exchange = std::function<std::vector<bootstrap::Blob>(const std::vector<std::uint8_t>& mine,
                                                               const std::vector<unsigned>& peers)>;

  void connect(const Exchange& exchange, std::shared_ptr<gloo::transport::Device>& device, GlooPeers which) {
    auto pairs = device->createContext(rank, size);
    pairs->setTimeout(getTimeout());
    which_ = which;
    const std::vector<unsigned> peers = peers_of(rank);
    std::vector<std::uint8_t> mine;
    for (unsigned peer : peers) {
      const std::vector<char> address = pairs->createPair(static_cast<int>(peer))->address().bytes();
      const auto length = static_cast<std::uint32_t>(address.size());
      const auto* l = reinterpret_cast<const std::uint8_t*>(&length);
      mine.insert(mine.end(), l, l + sizeof length);
      mine.insert(mine.end(), address.begin(), address.end());
    }
    const std::vector<bootstrap::Blob> all = exchange(mine, peers);
    if (all.size() != static_cast<std::size_t>(size))
      throw Error(fmt::format("the address exchange returned {} blobs for {} ranks", all.size(), size), "gloo");
    for (unsigned peer : peers)
      pairs->getPair(static_cast<int>(peer))->connect(address_for_me(all[peer], static_cast<int>(peer)));
    device_ = device;
    transportContext_ = std::move(pairs);
  }

 private:
  std::vector<unsigned> peers_of(int r) const {
    return gloo_peers(static_cast<unsigned>(r), static_cast<unsigned>(size), which_);
  }

  // Peer `from`'s blob holds one address per peer of `from`, in their ascending order.
  std::vector<char> address_for_me(const bootstrap::Blob& blob, int from) const {
    const std::vector<unsigned> theirs = peers_of(from);
    const auto it = std::find(theirs.begin(), theirs.end(), static_cast<unsigned>(rank));
    if (it == theirs.end())
      throw Error(fmt::format("rank {} does not connect to rank {} (the pair rule is not symmetric)", from, rank), "gloo");
    const auto wanted = static_cast<std::size_t>(it - theirs.begin());
    std::size_t at = 0;
    for (std::size_t i = 0;; ++i) {
      std::uint32_t length = 0;
      if (blob.size() - at < sizeof length) break;
      std::memcpy(&length, blob.data() + at, sizeof length);
      at += sizeof length;
      if (length > gloo::transport::Address::kMaxByteSize || blob.size() - at < length) break;
      if (i == wanted) return std::vector<char>(blob.begin() + at, blob.begin() + at + length);
      at += length;
    }
    throw Error(fmt::format("rank {} sent a {}-byte address list without a valid entry {} (for rank {})", from,
                            blob.size(), wanted, rank),
                "gloo");
  }

  GlooPeers which_ = GlooPeers::All;
};

template <typename T, typename Acc, Acc (*Load)(T), T (*Store)(Acc)>
gloo::AllreduceOptions::Func make_reduce(ReduceOp op) {
  return [op](void* c_v, const void* a_v, const void* b_v, std::size_t n) {
    T* c = static_cast<T*>(c_v);
    const T* a = static_cast<const T*>(a_v);
    const T* b = static_cast<const T*>(b_v);
    for (std::size_t i = 0; i < n; ++i) {
      Acc x = Load(a[i]), y = Load(b[i]);
      c[i] = Store(op == ReduceOp::Min ? std::min(x, y) : op == ReduceOp::Max ? std::max(x, y) : x + y);
    }
  };
}

template <typename T>
T same(T v) {
  return v;
}

// Gloo throws one IoException type for a closed connection and for a timeout alike; only its text
// ("Timed out waiting 3000ms ...", "Read timeout ...") tells them apart, so this is the one place
// that reads it, turning it into the failure's kind for everyone downstream.
CollectiveFailure gloo_failure(const gloo::IoException& e, std::chrono::milliseconds timeout) {
  std::string text = e.what();
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (text.find("timed out") != std::string::npos || text.find("timeout") != std::string::npos)
    return {FailureKind::Timeout, {}, std::chrono::duration<double>(timeout).count()};
  return {FailureKind::Transport, {}};
}

class GlooCommunicator final : public HostCommunicator {
 public:
  GlooCommunicator(bootstrap::Session& session, const CommOptions& options, std::string address, std::string tag,
                   GlooRendezvous rendezvous, GlooPeers peers, const std::vector<std::string>& hosts)
      : HostCommunicator("gloo"),
        rank_(session.rank()),
        size_(session.size()),
        timeout_(options.timeout),
        every_pair_(peers == GlooPeers::All || gloo_peers(rank_, size_, peers).size() + 1 == size_) {
    if (peers != GlooPeers::All && rendezvous == GlooRendezvous::Lookups)
      throw UsageError("a Gloo group that connects only some pairs needs the Exchange or Tcp rendezvous", "gloo");
    if (rendezvous == GlooRendezvous::Tcp && (hosts.size() != size_ || tag.empty()))
      throw UsageError(fmt::format("the Tcp rendezvous needs every member's host ({} given for {} members) and a tag",
                                   hosts.size(), size_),
                       "gloo");
    // The data network's interface when one is named (the one rule, trainrt/data_interface.hpp:
    // the plugin's TRAINRT_IFNAME, then Gloo's and NCCL's own): a node name may resolve to
    // loopback or a management network.
    const DataInterface net = address.empty() ? data_interface_from_environment() : DataInterface{};
    gloo::transport::tcp::attr attr;
    if (!net.name.empty()) {
      attr.iface = net.name;
      address = fmt::format("interface {} ({})", net.name, net.source);
    } else {
      if (address.empty()) {
        const char* node = std::getenv("SLURMD_NODENAME");
        char host[256] = {};
        ::gethostname(host, sizeof host - 1);
        address = node && *node ? node : host;
      }
      attr.hostname = address;
    }
    try {
      auto device = gloo::transport::tcp::CreateDevice(attr);
      if (rendezvous != GlooRendezvous::Lookups) {
        ExchangedMeshContext::Exchange exchange;
        if (rendezvous == GlooRendezvous::Exchange) {
          // A full mesh needs every blob: the session's allgather, which past a few ranks goes
          // through the node leaders' bundles (one read per rank), not N - 1 reads each.
          exchange = [&](const std::vector<std::uint8_t>& mine, const std::vector<unsigned>& want) {
            return peers == GlooPeers::All ? session.allgather(mine) : session.allgather_some(mine, want);
          };
        } else {
          exchange = [&](const std::vector<std::uint8_t>& mine, const std::vector<unsigned>& want) {
            const std::string key = fmt::format("{}/{}", session.job_id(), tag);
            const auto ports = rendezvous::candidate_ports(key, rendezvous::port_range_from_environment());
            // Served until this communicator goes: a peer may ask after this rank is connected.
            if (!want.empty()) server_ = std::make_unique<rendezvous::Server>(key, rank_, mine, ports, size_);
            std::vector<std::string> where;
            for (unsigned peer : want) where.push_back(hosts[peer]);
            std::vector<bootstrap::Blob> got = rendezvous::fetch_all(key, want, where, ports, options.timeout, server_.get());
            std::vector<bootstrap::Blob> all(size_);
            for (std::size_t i = 0; i < want.size(); ++i) all[want[i]] = std::move(got[i]);
            return all;
          };
        }
        auto ctx = std::make_shared<ExchangedMeshContext>(static_cast<int>(rank_), static_cast<int>(size_));
        ctx->setTimeout(options.timeout);
        ctx->connect(exchange, device, peers);
        context_ = ctx;
        // Tcp: no barrier. Every pair is connected when connect() returns, the server answers any
        // peer still asking, and nothing here waits on PMIx (no lookup a later fence could hang).
      } else {
        auto ctx = std::make_shared<gloo::rendezvous::Context>(static_cast<int>(rank_), static_cast<int>(size_));
        ctx->setTimeout(options.timeout);
        static unsigned contexts = 0;  // distinct keys for every Gloo communicator of this process
        BootstrapStore store(session, tag.empty() ? fmt::format("gloo{}.", contexts++) : "gloo-" + tag + ".");
        ctx->connectFullMesh(store, device);
        context_ = ctx;
        // Over TCP, not PMIx: once it returns every rank has finished its lookups. Slurm 22.05's
        // PMIx plugin can hang a direct-modex lookup that is in flight while the owner's node
        // joins a fence (docs/scale.md), and a rank leaving here goes on to fences. (An exchange
        // makes no lookups, and every pair is connected when connect() returns: no barrier.)
        gloo::BarrierOptions settle(context_);
        gloo::barrier(settle);
      }
    } catch (const Error&) {
      throw;
    } catch (const gloo::IoException& e) {
      throw PeerError(gloo_failure(e, timeout_),
                      fmt::format("rank {} could not connect over TCP from '{}': {}", rank_, address, e.what()),
                      "gloo");
    } catch (const std::exception& e) {
      throw Error(fmt::format("rank {} could not connect over TCP from '{}': {}", rank_, address, e.what()), "gloo");
    }
  }
  ~GlooCommunicator() override { stop_progress(); }

  unsigned rank() const override { return rank_; }
  unsigned size() const override { return size_; }
  std::string backend() const override { return "gloo"; }

  Work start_allreduce(const void* in, void* out, std::size_t count, DType t, ReduceOp op, Mode mode) override {
    return submit(mode, [=, this] { wrap([&] { do_allreduce(in, out, count, t, op); }); });
  }

  Work start_reduce_scatter(const void* in, void* out, std::size_t count, DType t, ReduceOp op, Mode mode) override {
    return submit(mode, [=, this] {
      wrap([&] {
        std::vector<std::byte> tmp(count * size_ * size_of(t));
        do_allreduce(in, tmp.data(), count * size_, t, op);
        std::memcpy(out, tmp.data() + rank_ * count * size_of(t), count * size_of(t));
      });
    });
  }

  Work start_allgather(const void* in, void* out, std::size_t count, DType t, Mode mode) override {
    return submit(mode, [=, this] {
      wrap([&] {
        if (count == 0) return;
        gloo::AllgatherOptions o(context_);
        o.setInput(static_cast<std::uint8_t*>(const_cast<void*>(in)), count * size_of(t));
        o.setOutput(static_cast<std::uint8_t*>(out), count * size_of(t) * size_);
        gloo::allgather(o);
      });
    });
  }

  Work start_broadcast(void* buf, std::size_t count, DType t, unsigned root, Mode mode) override {
    return submit(mode, [=, this] {
      wrap([&] {
        if (count == 0) return;
        gloo::BroadcastOptions o(context_);
        o.setOutput(static_cast<std::uint8_t*>(buf), count * size_of(t));
        o.setRoot(static_cast<int>(root));
        gloo::broadcast(o);
      });
    });
  }

  Work start_barrier(Mode mode) override {
    return submit(mode, [this] {
      wrap([&] {
        gloo::BarrierOptions o(context_);
        gloo::barrier(o);
      });
    });
  }

  // Sizes first (an allgather of every rank's send and receive sizes), so a mismatch is a
  // UsageError on every rank instead of a transfer that waits for bytes that never come.
  Work start_alltoallv(const void* send, std::vector<std::size_t> send_bytes, void* recv,
                       std::vector<std::size_t> recv_bytes, Mode mode) override {
    if (!every_pair_)
      throw UsageError(fmt::format("alltoallv needs every pair connected; this Gloo group of {} connects only the "
                                   "pairs at distance 2^k (GlooPeers::PowersOfTwo)",
                                   size_),
                       "gloo");
    return submit(mode, [=, this] {
      wrap([&] {
        std::vector<std::int64_t> mine, all(2 * size_ * size_);
        for (std::size_t n : send_bytes) mine.push_back(static_cast<std::int64_t>(n));
        for (std::size_t n : recv_bytes) mine.push_back(static_cast<std::int64_t>(n));
        gloo::AllgatherOptions sizes(context_);
        sizes.setInput(mine.data(), mine.size());
        sizes.setOutput(all.data(), all.size());
        gloo::allgather(sizes);
        for (unsigned s = 0; s < size_; ++s)
          for (unsigned d = 0; d < size_; ++d)
            if (all[2 * size_ * s + d] != all[2 * size_ * d + size_ + s])
              throw UsageError({FailureKind::Mismatch, {s, d}},
                               fmt::format("alltoallv: rank {} sends {} bytes to rank {}, which expects {}", s,
                                           all[2 * size_ * s + d], d, all[2 * size_ * d + size_ + s]),
                               "gloo");
        std::uint8_t none = 0;  // gloo wants a buffer even for zero bytes
        auto* in = send ? static_cast<std::uint8_t*>(const_cast<void*>(send)) : &none;
        auto* out = recv ? static_cast<std::uint8_t*>(recv) : &none;
        gloo::AlltoallvOptions o(context_);
        o.setInput(in, std::vector<std::int64_t>(mine.begin(), mine.begin() + size_));
        o.setOutput(out, std::vector<std::int64_t>(mine.begin() + size_, mine.end()));
        gloo::alltoallv(o);
      });
    });
  }

 private:
  // Gloo reports a dead peer, a closed connection and a timeout as an IoException: a PeerError.
  // Anything else it throws (an enforce failure) is its own bug or ours: a plain Error.
  template <typename F>
  void wrap(F&& f) {
    try {
      f();
    } catch (const Error&) {
      throw;
    } catch (const gloo::IoException& e) {
      throw PeerError(gloo_failure(e, timeout_), fmt::format("rank {}: {}", rank_, e.what()), "gloo");
    } catch (const std::exception& e) {
      throw Error(fmt::format("rank {}: {}", rank_, e.what()), "gloo");
    }
  }

  template <typename T>
  void run_allreduce(const void* in, void* out, std::size_t count, gloo::AllreduceOptions::Func fn) {
    gloo::AllreduceOptions o(context_);
    o.setInput(static_cast<T*>(const_cast<void*>(in)), count);
    o.setOutput(static_cast<T*>(out), count);
    o.setReduceFunction(fn);
    gloo::allreduce(o);
  }

  void do_allreduce(const void* in, void* out, std::size_t count, DType t, ReduceOp op) {
    if (count == 0) return;
    using namespace trainrt::kernels;
    switch (t) {
      case DType::F32: run_allreduce<float>(in, out, count, make_reduce<float, float, same<float>, same<float>>(op)); break;
      case DType::F64: run_allreduce<double>(in, out, count, make_reduce<double, double, same<double>, same<double>>(op)); break;
      case DType::I32: run_allreduce<std::int32_t>(in, out, count, make_reduce<std::int32_t, std::int32_t, same<std::int32_t>, same<std::int32_t>>(op)); break;
      case DType::I64: run_allreduce<std::int64_t>(in, out, count, make_reduce<std::int64_t, std::int64_t, same<std::int64_t>, same<std::int64_t>>(op)); break;
      case DType::F16: run_allreduce<std::uint16_t>(in, out, count, make_reduce<std::uint16_t, float, f16_to_f32, f32_to_f16>(op)); break;
      case DType::BF16: run_allreduce<std::uint16_t>(in, out, count, make_reduce<std::uint16_t, float, bf16_to_f32, f32_to_bf16>(op)); break;
    }
    if (op == ReduceOp::Avg) divide_in_place(out, count, t, size_);
  }

  unsigned rank_, size_;
  std::chrono::milliseconds timeout_;
  bool every_pair_;  // false: only the pairs gloo_peers names are connected
  std::shared_ptr<gloo::Context> context_;
  std::unique_ptr<rendezvous::Server> server_;  // Tcp: this rank's addresses, for peers still asking
};

}  // namespace

std::unique_ptr<Communicator> make_gloo_communicator(bootstrap::Session& session, const CommOptions& options,
                                                     const std::string& address, const std::string& tag,
                                                     GlooRendezvous rendezvous, GlooPeers peers,
                                                     const std::vector<std::string>& hosts) {
  return std::make_unique<GlooCommunicator>(session, options, address, tag, rendezvous, peers, hosts);
}

}  // namespace trainrt
