#include "leader_rendezvous.hpp"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <unistd.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <future>
#include <memory>

#include "trainrt/error.hpp"
#include "trainrt/number.hpp"

namespace trainrt::rendezvous {

namespace {

using Clock = std::chrono::steady_clock;
constexpr char kMagic[4] = {'T', 'R', 'Z', '2'};
constexpr std::uint32_t kNoOffer = 0xffffffff;  // a request's rank when the asker offers no blob
// One request or reply may take this long once connected: a listener that accepts and never
// answers (someone else's program on a candidate port) costs a client this much, not its timeout.
constexpr auto kExchangeLimit = std::chrono::milliseconds(1000);
constexpr auto kConnectLimit = std::chrono::milliseconds(500);

std::string errno_text(int e) { return std::strerror(e); }

void put_u32(Blob& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
}

std::uint32_t get_u32(const std::uint8_t* p) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<std::uint32_t>(p[i]) << (8 * i);
  return v;
}

int ms_left(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<long long>(left, 60000));
}

// Both move every byte before the deadline or say why not ("" when done).
std::string send_all(int fd, const Blob& data, Clock::time_point deadline) {
  std::size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n > 0) {
      done += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return "send: " + errno_text(errno);
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, ms_left(deadline)) <= 0) return "send: no progress within the time allowed";
  }
  return {};
}

std::string recv_exact(int fd, std::uint8_t* out, std::size_t bytes, Clock::time_point deadline) {
  std::size_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::recv(fd, out + done, bytes - done, 0);
    if (n > 0) {
      done += static_cast<std::size_t>(n);
      continue;
    }
    if (n == 0) return "the connection closed early";
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return "recv: " + errno_text(errno);
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, ms_left(deadline)) <= 0) return "no answer within the time allowed";
  }
  return {};
}

// magic, key length, key: what both sides send first.
Blob header(const std::string& key) {
  Blob out(kMagic, kMagic + 4);
  put_u32(out, static_cast<std::uint32_t>(key.size()));
  out.insert(out.end(), key.begin(), key.end());
  return out;
}

// Reads a header and says whether it carries `key` ("" when it does).
std::string read_header(int fd, const std::string& key, Clock::time_point deadline) {
  std::uint8_t head[8];
  if (std::string why = recv_exact(fd, head, sizeof head, deadline); !why.empty()) return why;
  if (std::memcmp(head, kMagic, 4) != 0) return "not a train-runtime rendezvous";
  const std::uint32_t length = get_u32(head + 4);
  if (length > kMaxKeyBytes) return fmt::format("a {}-byte key, more than {}", length, kMaxKeyBytes);
  std::string got(length, '\0');
  if (std::string why = recv_exact(fd, reinterpret_cast<std::uint8_t*>(got.data()), length, deadline); !why.empty()) return why;
  if (got != key) return "another job's or communicator's rendezvous";
  return {};
}

struct AddrInfoFree {
  void operator()(addrinfo* a) const { ::freeaddrinfo(a); }
};

}  // namespace

PortRange parse_port_range(const std::string& text) {
  const auto dash = text.find('-');
  const auto first = dash == std::string::npos ? std::nullopt : to_number<unsigned>(text.substr(0, dash));
  const auto last = dash == std::string::npos ? std::nullopt : to_number<unsigned>(text.substr(dash + 1));
  if (!first || !last || *first < 1024 || *last > 65535 || *first + (kPortCandidates - 1) > *last)
    throw UsageError(fmt::format("TRAINRT_RENDEZVOUS_PORTS='{}' is not FIRST-LAST with 1024 <= FIRST and FIRST + {} <= LAST "
                                 "<= 65535",
                                 text, kPortCandidates - 1),
                     "rendezvous");
  return {static_cast<std::uint16_t>(*first), static_cast<std::uint16_t>(*last)};
}

PortRange port_range_from_environment() {
  const char* v = std::getenv("TRAINRT_RENDEZVOUS_PORTS");
  return v && *v ? parse_port_range(v) : PortRange{};
}

std::vector<std::uint16_t> candidate_ports(const std::string& key, PortRange range) {
  // FNV-1a: the same value on every node and build, unlike std::hash.
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : key) h = (h ^ c) * 1099511628211ull;
  const std::uint64_t span = std::uint64_t{range.last} - range.first + 1;
  std::vector<std::uint16_t> out;
  for (std::uint64_t i = 0; out.size() < kPortCandidates; ++i) {
    const auto port = static_cast<std::uint16_t>(range.first + (h + i * 7919) % span);
    if (std::find(out.begin(), out.end(), port) == out.end()) out.push_back(port);
    else h = h * 6364136223846793005ull + 1;  // 7919 shares a factor with the span: step elsewhere
  }
  return out;
}

void Mailbox::put(unsigned rank, Blob blob) {
  {
    std::lock_guard lock(mutex_);
    blobs_[rank] = std::move(blob);
  }
  arrived_.notify_all();
}

std::optional<Blob> Mailbox::take(unsigned rank, std::chrono::milliseconds wait) {
  std::unique_lock lock(mutex_);
  if (!arrived_.wait_for(lock, wait, [&] { return blobs_.count(rank) != 0; })) return std::nullopt;
  return blobs_.at(rank);
}

Server::Server(std::string key, unsigned rank, Blob blob, const std::vector<std::uint16_t>& ports, unsigned group_size)
    : key_(std::move(key)), rank_(rank), blob_(std::move(blob)), group_size_(group_size) {
  if (key_.size() > kMaxKeyBytes || blob_.size() > kMaxBlobBytes)
    throw UsageError(fmt::format("a {}-byte key and {}-byte blob: the limits are {} and {}", key_.size(), blob_.size(),
                                 kMaxKeyBytes, kMaxBlobBytes),
                     "rendezvous");
  wake_ = Fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake_) throw Error("eventfd: " + errno_text(errno), "rendezvous");
  // Every address of the node, IPv4 and IPv6 alike where the node has IPv6, else IPv4 only.
  bool v6 = true;
  std::string taken;
  for (std::uint16_t port : ports) {
    Fd s(::socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!s && v6 && (errno == EAFNOSUPPORT || errno == EPROTONOSUPPORT)) {
      v6 = false;
      s = Fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    }
    if (!s) throw Error("socket: " + errno_text(errno), "rendezvous");
    const int one = 1, zero = 0;
    ::setsockopt(s.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    int rc;
    if (v6) {
      ::setsockopt(s.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
      sockaddr_in6 a{};
      a.sin6_family = AF_INET6;
      a.sin6_addr = in6addr_any;
      a.sin6_port = htons(port);
      rc = ::bind(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof a);
    } else {
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_ANY);
      a.sin_port = htons(port);
      rc = ::bind(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof a);
    }
    if (rc != 0 && (errno == EADDRINUSE || errno == EACCES)) {
      taken += fmt::format("{}{} ({})", taken.empty() ? "" : ", ", port, errno_text(errno));
      continue;
    }
    if (rc != 0) throw Error(fmt::format("bind to port {}: {}", port, errno_text(errno)), "rendezvous");
    if (::listen(s.get(), 256) != 0) throw Error(fmt::format("listen on port {}: {}", port, errno_text(errno)), "rendezvous");
    listen_ = std::move(s);
    port_ = port;
    break;
  }
  if (!listen_)
    throw Error(fmt::format("no candidate port is free on this node ({}): choose another range with "
                            "TRAINRT_RENDEZVOUS_PORTS=FIRST-LAST, or TRAINRT_LEADER_EXCHANGE=pmix",
                            taken),
                "rendezvous");
  thread_ = std::thread([this] { run(); });
}

Server::~Server() {
  const std::uint64_t one = 1;
  // One write to a fresh eventfd cannot fail (only a counter at its maximum refuses one).
  [[maybe_unused]] const ssize_t n = ::write(wake_.get(), &one, sizeof one);
  if (thread_.joinable()) thread_.join();
}

void Server::run() {
  for (;;) {
    pollfd p[2] = {{listen_.get(), POLLIN, 0}, {wake_.get(), POLLIN, 0}};
    if (::poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;  // cannot wait any more: clients then time out, naming this node
    }
    if (p[1].revents) return;
    if (!(p[0].revents & POLLIN)) continue;
    Fd c(::accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (c) answer(std::move(c));
    else if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));  // the socket stays readable: no busy loop
  }
}

// One request (the key, and the asker's rank and blob when it offers one), one reply, at most
// kExchangeLimit each; a stranger's bytes, or a blob over the limit, get no reply.
void Server::answer(Fd c) {
  const auto deadline = Clock::now() + kExchangeLimit;
  if (!read_header(c.get(), key_, deadline).empty()) return;
  std::uint8_t offer[8];
  if (!recv_exact(c.get(), offer, sizeof offer, deadline).empty()) return;
  const std::uint32_t asker = get_u32(offer), bytes = get_u32(offer + 4);
  if (bytes > kMaxBlobBytes || (asker == kNoOffer && bytes != 0)) return;
  Blob offered(bytes);
  if (!recv_exact(c.get(), offered.data(), bytes, deadline).empty()) return;
  if (asker != kNoOffer && asker < group_size_ && asker != rank_) mailbox_.put(asker, std::move(offered));
  Blob reply = header(key_);
  put_u32(reply, rank_);
  put_u32(reply, static_cast<std::uint32_t>(blob_.size()));
  reply.insert(reply.end(), blob_.begin(), blob_.end());
  if (send_all(c.get(), reply, Clock::now() + kExchangeLimit).empty()) served_.fetch_add(1);
}

namespace {

// One attempt at one address: the blob, or why not.
// Never past `until`, the caller's deadline.
std::string ask(const sockaddr* addr, socklen_t len, const std::string& key, unsigned rank, const Server* mine, Blob& out,
                Clock::time_point until) {
  Fd s(::socket(addr->sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!s) return "socket: " + errno_text(errno);
  if (::connect(s.get(), addr, len) != 0) {
    if (errno != EINPROGRESS) return "connect: " + errno_text(errno);
    pollfd p{s.get(), POLLOUT, 0};
    const int wait_ms = std::min(static_cast<int>(kConnectLimit.count()), ms_left(until));
    if (::poll(&p, 1, wait_ms) <= 0) return fmt::format("connect: no answer within {} ms", wait_ms);
    int err = 0;
    socklen_t l = sizeof err;
    ::getsockopt(s.get(), SOL_SOCKET, SO_ERROR, &err, &l);
    if (err != 0) return "connect: " + errno_text(err);
  }
  const auto deadline = std::min(Clock::now() + kExchangeLimit, until);
  Blob request = header(key);
  put_u32(request, mine ? mine->rank() : kNoOffer);
  put_u32(request, mine ? static_cast<std::uint32_t>(mine->blob().size()) : 0);
  if (mine) request.insert(request.end(), mine->blob().begin(), mine->blob().end());
  if (std::string why = send_all(s.get(), request, deadline); !why.empty()) return why;
  if (std::string why = read_header(s.get(), key, deadline); !why.empty()) return why;
  std::uint8_t tail[8];
  if (std::string why = recv_exact(s.get(), tail, sizeof tail, deadline); !why.empty()) return why;
  if (get_u32(tail) != rank) return fmt::format("rank {} answered, not rank {}", get_u32(tail), rank);
  const std::uint32_t bytes = get_u32(tail + 4);
  if (bytes > kMaxBlobBytes) return fmt::format("a {}-byte blob, more than {}", bytes, kMaxBlobBytes);
  out.assign(bytes, 0);
  return recv_exact(s.get(), out.data(), bytes, deadline);
}

}  // namespace

Blob fetch(const std::string& key, unsigned rank, const std::string& host, const std::vector<std::uint16_t>& ports,
           std::chrono::milliseconds timeout, Server* mine) {
  const auto deadline = Clock::now() + timeout;
  std::unique_ptr<addrinfo, AddrInfoFree> found;
  std::string last;
  auto pause = std::chrono::milliseconds(1);
  for (unsigned round = 0;; ++round) {
    if (mine)
      if (auto offered = mine->mailbox().take(rank, std::chrono::milliseconds(0))) return std::move(*offered);
    // The server binds the first candidate it can, so a refusal at one means it is not up yet,
    // unless something that does not listen held that port when it started: every 8th round
    // tries every candidate, the others stop at the first refusal. Polling costs CPU that the
    // ranks still starting need (hundreds of them per core here).
    const bool every_port = round % 8 == 7;
    bool refused_here = false;
    if (!found) {
      addrinfo hints{};
      hints.ai_family = AF_UNSPEC;
      hints.ai_socktype = SOCK_STREAM;
      addrinfo* list = nullptr;
      const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &list);
      if (rc == 0) found.reset(list);
      else if (rc != EAI_AGAIN)
        throw Error(fmt::format("cannot resolve the node name '{}' of rank {}'s leader: {} (set TRAINRT_LEADER_EXCHANGE=pmix "
                                "where node names do not resolve)",
                                host, rank, ::gai_strerror(rc)),
                    "rendezvous");
      else last = fmt::format("resolving '{}': {}", host, ::gai_strerror(rc));
    }
    for (std::size_t i = 0; found && i < ports.size() && (every_port || !refused_here); ++i) {
      const std::uint16_t port = ports[i];
      for (const addrinfo* a = found.get(); a; a = a->ai_next) {
        sockaddr_storage ss{};
        std::memcpy(&ss, a->ai_addr, std::min<std::size_t>(a->ai_addrlen, sizeof ss));
        if (ss.ss_family == AF_INET) reinterpret_cast<sockaddr_in*>(&ss)->sin_port = htons(port);
        else if (ss.ss_family == AF_INET6) reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port = htons(port);
        else continue;
        Blob out;
        if (Clock::now() >= deadline) break;
        const std::string why = ask(reinterpret_cast<sockaddr*>(&ss), a->ai_addrlen, key, rank, mine, out, deadline);
        if (why.empty()) return out;
        // A refusal says only that nobody listens yet; keep anything more telling over it.
        const bool refused = why.find("refused") != std::string::npos;
        refused_here = refused_here || refused;
        if (!refused || last.empty() || last.find("refused") != std::string::npos) last = fmt::format("port {}: {}", port, why);
      }
    }
    if (Clock::now() >= deadline) break;
    // The pause ends early when the peer, fetching ours, offers its blob to our server.
    // Rounded up: a wait cut to 0 would start a round with no time left, whose timed-out exchange
    // would replace a more telling reason (another rank's answer) as the error's last problem.
    const auto wait = std::chrono::ceil<std::chrono::milliseconds>(std::min<Clock::duration>(pause, deadline - Clock::now()));
    if (mine) {
      if (auto offered = mine->mailbox().take(rank, wait)) return std::move(*offered);
    } else {
      std::this_thread::sleep_for(wait);
    }
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
  std::string list;
  for (auto p : ports) list += fmt::format("{}{}", list.empty() ? "" : ",", p);
  throw Error(fmt::format("rank {}'s leader on '{}' did not give its address within {} ms (ports {}; last: {}){}", rank, host,
                          timeout.count(), list, last,
                          found ? "" : " (set TRAINRT_LEADER_EXCHANGE=pmix where node names do not resolve)"),
              "rendezvous");
}

std::vector<Blob> fetch_all(const std::string& key, const std::vector<unsigned>& ranks, const std::vector<std::string>& hosts,
                            const std::vector<std::uint16_t>& ports, std::chrono::milliseconds timeout, Server* mine) {
  if (hosts.size() != ranks.size())
    throw UsageError(fmt::format("fetch_all: {} hosts for {} ranks", hosts.size(), ranks.size()), "rendezvous");
  std::vector<std::future<Blob>> pending;
  for (std::size_t i = 0; i < ranks.size(); ++i)
    pending.push_back(std::async(std::launch::async, [&, i] { return fetch(key, ranks[i], hosts[i], ports, timeout, mine); }));
  std::vector<Blob> out;
  std::exception_ptr first;
  for (auto& p : pending) {  // every one waited for: none outlives the references it holds
    try {
      out.push_back(p.get());
    } catch (...) {
      if (!first) first = std::current_exception();
      out.emplace_back();
    }
  }
  if (first) std::rethrow_exception(first);
  return out;
}

}  // namespace trainrt::rendezvous
