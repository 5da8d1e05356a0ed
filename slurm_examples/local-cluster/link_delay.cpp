// link_delay: holds every packet a node namespace sends on its link for a fixed time, for the local
// cluster's `cluster.sh delay US` (this kernel has no sch_netem, so `tc netem` cannot do it).
//   link_delay DELAY_US /run/netns/NS...
// Each namespace's nftables rule (`oifname "eth0" queue num 0 bypass`, set up by cluster.sh) hands
// its outgoing packets to NFQUEUE 0 of that namespace; this process binds one netlink socket per
// namespace and accepts each packet DELAY_US after it arrived, in arrival order (a batch verdict
// releases every packet up to an id). One thread at real-time priority: under the benchmarks'
// full load an ordinary thread would add scheduling delay of its own. `bypass` and fail-open mean
// a dead or overrun delayer lets packets through instead of dropping them.
#include <fcntl.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_queue.h>
#include <linux/netlink.h>
#include <poll.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <endian.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <string>
#include <vector>

namespace {

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "link_delay: %s (%s)\n", what.c_str(), std::strerror(errno));
  std::exit(1);
}

std::int64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1'000'000'000LL + ts.tv_nsec;
}

// One netlink message: header, nfgenmsg, then attributes, each 4-byte aligned.
class Msg {
 public:
  Msg(std::uint16_t type, std::uint16_t flags, std::uint16_t queue) {
    buf_.resize(NLMSG_HDRLEN + NLMSG_ALIGN(sizeof(nfgenmsg)));
    auto* h = reinterpret_cast<nlmsghdr*>(buf_.data());
    h->nlmsg_type = static_cast<std::uint16_t>((NFNL_SUBSYS_QUEUE << 8) | type);
    h->nlmsg_flags = static_cast<std::uint16_t>(NLM_F_REQUEST | flags);
    auto* g = reinterpret_cast<nfgenmsg*>(buf_.data() + NLMSG_HDRLEN);
    g->nfgen_family = AF_UNSPEC;
    g->version = NFNETLINK_V0;
    g->res_id = htobe16(queue);
  }
  void attr(std::uint16_t type, const void* data, std::size_t len) {
    const std::size_t at = buf_.size();
    buf_.resize(at + NLA_ALIGN(NLA_HDRLEN + len));
    auto* a = reinterpret_cast<nlattr*>(buf_.data() + at);
    a->nla_type = type;
    a->nla_len = static_cast<std::uint16_t>(NLA_HDRLEN + len);
    std::memcpy(buf_.data() + at + NLA_HDRLEN, data, len);
  }
  void send(int fd) {
    reinterpret_cast<nlmsghdr*>(buf_.data())->nlmsg_len = static_cast<std::uint32_t>(buf_.size());
    sockaddr_nl to{};
    to.nl_family = AF_NETLINK;
    if (sendto(fd, buf_.data(), buf_.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof to) < 0) die("netlink send");
  }

 private:
  std::vector<char> buf_;
};

// Bound to queue 0 of the namespace this thread is in when it is created.
int open_queue(const std::string& ns) {
  int nsfd = open(ns.c_str(), O_RDONLY | O_CLOEXEC);
  if (nsfd < 0) die("cannot open namespace " + ns);
  if (setns(nsfd, CLONE_NEWNET) != 0) die("setns " + ns);
  close(nsfd);
  int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, NETLINK_NETFILTER);
  if (fd < 0) die("netlink socket in " + ns);
  int big = 8 << 20;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof big);
  sockaddr_nl me{};
  me.nl_family = AF_NETLINK;
  if (bind(fd, reinterpret_cast<sockaddr*>(&me), sizeof me) != 0) die("netlink bind in " + ns);
  Msg bind_queue(NFQNL_MSG_CONFIG, 0, 0);
  nfqnl_msg_config_cmd cmd{};
  cmd.command = NFQNL_CFG_CMD_BIND;
  bind_queue.attr(NFQA_CFG_CMD, &cmd, sizeof cmd);
  bind_queue.send(fd);
  Msg params(NFQNL_MSG_CONFIG, 0, 0);
  nfqnl_msg_config_params p{};
  p.copy_range = htobe32(0);
  p.copy_mode = NFQNL_COPY_META;  // the verdict needs the id only, never the payload
  params.attr(NFQA_CFG_PARAMS, &p, sizeof p);
  const std::uint32_t maxlen = htobe32(1u << 20), flags = htobe32(NFQA_CFG_F_FAIL_OPEN);
  params.attr(NFQA_CFG_QUEUE_MAXLEN, &maxlen, sizeof maxlen);
  params.attr(NFQA_CFG_FLAGS, &flags, sizeof flags);
  params.attr(NFQA_CFG_MASK, &flags, sizeof flags);
  params.send(fd);
  return fd;
}

struct Held {
  std::int64_t at;
  std::uint32_t id;
};

void release_upto(int fd, std::uint32_t id) {
  Msg v(NFQNL_MSG_VERDICT_BATCH, 0, 0);
  nfqnl_msg_verdict_hdr h{};
  h.verdict = htobe32(NF_ACCEPT);
  h.id = htobe32(id);
  v.attr(NFQA_VERDICT_HDR, &h, sizeof h);
  v.send(fd);
}

void read_packets(int fd, std::deque<Held>& held) {
  alignas(nlmsghdr) static char buf[1 << 16];
  while (true) {
    ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
      if (errno == ENOBUFS) continue;  // the kernel dropped a notification: fail-open let it through
      die("netlink recv");
    }
    const std::int64_t t = now_ns();
    int len = static_cast<int>(n);
    for (auto* h = reinterpret_cast<nlmsghdr*>(buf); NLMSG_OK(h, len); h = NLMSG_NEXT(h, len)) {
      if (h->nlmsg_type == NLMSG_ERROR) {
        auto* e = static_cast<nlmsgerr*>(NLMSG_DATA(h));
        if (e->error != 0) {
          errno = -e->error;
          die("the kernel refused a queue command");
        }
        continue;
      }
      if ((h->nlmsg_type & 0xff) != NFQNL_MSG_PACKET) continue;
      int alen = static_cast<int>(h->nlmsg_len) - NLMSG_HDRLEN - static_cast<int>(NLMSG_ALIGN(sizeof(nfgenmsg)));
      auto* a = reinterpret_cast<nlattr*>(static_cast<char*>(NLMSG_DATA(h)) + NLMSG_ALIGN(sizeof(nfgenmsg)));
      for (; alen >= static_cast<int>(NLA_HDRLEN) && a->nla_len >= NLA_HDRLEN && a->nla_len <= alen;
           alen -= NLA_ALIGN(a->nla_len), a = reinterpret_cast<nlattr*>(reinterpret_cast<char*>(a) + NLA_ALIGN(a->nla_len))) {
        if ((a->nla_type & NLA_TYPE_MASK) != NFQA_PACKET_HDR) continue;
        nfqnl_msg_packet_hdr ph;
        std::memcpy(&ph, reinterpret_cast<char*>(a) + NLA_HDRLEN, sizeof ph);
        held.push_back({t, be32toh(ph.packet_id)});
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: link_delay DELAY_US /run/netns/NS...\n");
    return 2;
  }
  char* end = nullptr;
  const long us = std::strtol(argv[1], &end, 10);
  if (*end != '\0' || us < 1 || us > 1'000'000) {
    std::fprintf(stderr, "link_delay: DELAY_US '%s' is not a number from 1 to 1000000\n", argv[1]);
    return 2;
  }
  const std::int64_t delay = us * 1000;
  std::vector<pollfd> fds;
  for (int i = 2; i < argc; ++i) fds.push_back({open_queue(argv[i]), POLLIN, 0});
  std::vector<std::deque<Held>> held(fds.size());
  sched_param sp{};
  sp.sched_priority = 10;
  if (sched_setscheduler(0, SCHED_FIFO, &sp) != 0) std::fprintf(stderr, "link_delay: no real-time priority (%s)\n", std::strerror(errno));
  prctl(PR_SET_TIMERSLACK, 1UL);
  std::fprintf(stderr, "link_delay: %ld us on %zu namespaces\n", us, fds.size());
  while (true) {
    std::int64_t next = -1;
    const std::int64_t t = now_ns();
    for (std::size_t i = 0; i < fds.size(); ++i) {
      auto& q = held[i];
      bool any = false;
      std::uint32_t upto = 0;
      while (!q.empty() && q.front().at + delay <= t) {
        upto = q.front().id;
        any = true;
        q.pop_front();
      }
      if (any) release_upto(fds[i].fd, upto);
      if (!q.empty() && (next < 0 || q.front().at + delay < next)) next = q.front().at + delay;
    }
    timespec wait{};
    timespec* timeout = nullptr;
    if (next >= 0) {
      const std::int64_t ns = std::max<std::int64_t>(0, next - now_ns());
      wait.tv_sec = ns / 1'000'000'000;
      wait.tv_nsec = ns % 1'000'000'000;
      timeout = &wait;
    }
    if (ppoll(fds.data(), fds.size(), timeout, nullptr) < 0 && errno != EINTR) die("ppoll");
    for (std::size_t i = 0; i < fds.size(); ++i)
      if (fds[i].revents & POLLIN) read_packets(fds[i].fd, held[i]);
  }
}
