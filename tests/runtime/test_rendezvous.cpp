// The leaders' TCP rendezvous (runtime/src/leader_rendezvous.cpp) on this machine's loopback: the
// blob round trip, ports someone else holds (another job's server, a listener that never answers,
// a server of another rank), a peer that starts late, the blob a fetch offers, and the errors
// when nobody answers.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <set>
#include <string>
#include <thread>

#include "../../runtime/src/leader_rendezvous.hpp"
#include "trainrt/error.hpp"

using namespace trainrt;
using namespace trainrt::rendezvous;
using Clock = std::chrono::steady_clock;

namespace {

// A range of this process's own (test cases run as separate processes, maybe side by side), below
// Linux's ephemeral ports (32768 up) and the runtime's default range (24000-27999).
PortRange own_range() {
  const auto first = static_cast<std::uint16_t>(12000 + (::getpid() % 1400) * 8);
  return {first, static_cast<std::uint16_t>(first + 7)};
}

Blob bytes(const std::string& s) { return Blob(s.begin(), s.end()); }

std::string message(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no exception)";
}

// A listener that accepts connections and never says a word (someone else's program).
Fd silent_listener(std::uint16_t port) {
  Fd s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  const int one = 1;
  ::setsockopt(s.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  REQUIRE(::bind(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(::listen(s.get(), 8) == 0);
  return s;
}

}  // namespace

TEST_CASE("port ranges: FIRST-LAST with room for every candidate, else an error naming the text") {
  const PortRange r = parse_port_range("24000-27999");
  CHECK(r.first == 24000);
  CHECK(r.last == 27999);
  CHECK(parse_port_range("2000-2007").last == 2007);
  for (const char* bad : {"", "24000", "24000-", "-27999", "abc-def", "80-2000", "24000-24006", "24000-70000", "27999-24000"})
    CHECK(message([&] { parse_port_range(bad); }).find(std::string("'") + bad + "'") != std::string::npos);
}

TEST_CASE("candidate ports: distinct, inside the range, the same for the same key") {
  const PortRange r{24000, 24007};  // exactly as many ports as candidates
  const auto a = candidate_ports("slurm.pmix.7.0/hier0-leaders", r);
  REQUIRE(a.size() == kPortCandidates);
  CHECK(std::set<std::uint16_t>(a.begin(), a.end()).size() == kPortCandidates);
  for (auto p : a) CHECK((p >= r.first && p <= r.last));
  CHECK(a == candidate_ports("slurm.pmix.7.0/hier0-leaders", r));
  const auto wide = candidate_ports("slurm.pmix.7.0/hier0-leaders", PortRange{});
  CHECK(wide != candidate_ports("slurm.pmix.8.0/hier0-leaders", PortRange{}));
}

TEST_CASE("a leader's blob round trip; the first free candidate is used") {
  const auto ports = candidate_ports("job/a", own_range());
  Server server("job/a", 3, bytes("addresses of rank 3"), ports);
  CHECK(server.port() == ports[0]);
  CHECK(fetch("job/a", 3, "localhost", ports, std::chrono::seconds(5)) == bytes("addresses of rank 3"));
  CHECK(fetch("job/a", 3, "127.0.0.1", ports, std::chrono::seconds(5)) == bytes("addresses of rank 3"));
  CHECK(server.served() == 2);
}

TEST_CASE("ports held by others are skipped on both sides") {
  const auto ports = candidate_ports("job/b", own_range());
  SECTION("another job's server on the first port") {
    Server other("job/other", 3, bytes("not yours"), ports);
    Server mine("job/b", 3, bytes("yours"), ports);
    CHECK(mine.port() == ports[1]);
    CHECK(fetch("job/b", 3, "localhost", ports, std::chrono::seconds(5)) == bytes("yours"));
    CHECK(other.served() == 0);
  }
  SECTION("a listener that never answers: the client moves on after its exchange limit") {
    Fd quiet = silent_listener(ports[0]);
    Server mine("job/b", 3, bytes("yours"), ports);
    CHECK(mine.port() == ports[1]);
    const auto t0 = Clock::now();
    CHECK(fetch("job/b", 3, "127.0.0.1", ports, std::chrono::seconds(10)) == bytes("yours"));
    CHECK(Clock::now() - t0 < std::chrono::seconds(3));
  }
  SECTION("a server of another rank of the same job answers, and is not taken") {
    Server rank4("job/b", 4, bytes("rank 4's"), ports);
    const std::string why = message([&] { fetch("job/b", 3, "localhost", ports, std::chrono::milliseconds(300)); });
    CHECK(why.find("rank 4 answered, not rank 3") != std::string::npos);
  }
}

TEST_CASE("a peer that starts late is waited for") {
  const auto ports = candidate_ports("job/c", own_range());
  auto got = std::async(std::launch::async, [&] { return fetch("job/c", 1, "localhost", ports, std::chrono::seconds(10)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  Server late("job/c", 1, bytes("late"), ports);
  CHECK(got.get() == bytes("late"));
}

TEST_CASE("a leader that asks offers its own blob: the peer it asked has it without asking back") {
  const auto ports = candidate_ports("job/i", own_range());
  Server zero("job/i", 0, bytes("zero's"), ports, 3);
  {
    Server one("job/i", 1, bytes("one's"), ports, 3);  // the next candidate: rank 0 holds the first
    CHECK(fetch("job/i", 0, "localhost", ports, std::chrono::seconds(5), &one) == bytes("zero's"));
  }
  // Nobody serves rank 1 any more: rank 0 can only have what rank 1 offered when it asked.
  CHECK(fetch("job/i", 1, "localhost", ports, std::chrono::milliseconds(300), &zero) == bytes("one's"));
  // Without its own server a fetch has no mailbox to look in, and nobody answers for rank 1.
  CHECK(message([&] { fetch("job/i", 1, "localhost", ports, std::chrono::milliseconds(300)); }).find("did not give") !=
        std::string::npos);
  // A waiting fetch ends when the offer comes, before its next attempt.
  auto waiting = std::async(std::launch::async, [&] { return fetch("job/i", 2, "localhost", ports, std::chrono::seconds(10), &zero); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  {
    Server two("job/i", 2, bytes("two's"), ports, 3);
    CHECK(fetch("job/i", 0, "localhost", ports, std::chrono::seconds(5), &two) == bytes("zero's"));
  }
  CHECK(waiting.get() == bytes("two's"));
  // Offers from outside the group, or in this rank's own name, are not kept.
  {
    Server seven("job/i", 7, bytes("seven's"), ports, 8);
    CHECK(fetch("job/i", 0, "localhost", ports, std::chrono::seconds(5), &seven) == bytes("zero's"));
  }
  CHECK(message([&] { fetch("job/i", 7, "localhost", ports, std::chrono::milliseconds(300), &zero); }).find("did not give") !=
        std::string::npos);
}

TEST_CASE("nobody answering: an error naming the host, the ports and the last problem, after the timeout") {
  const auto ports = candidate_ports("job/d", own_range());
  const auto t0 = Clock::now();
  const std::string why = message([&] { fetch("job/d", 5, "localhost", ports, std::chrono::milliseconds(400)); });
  const auto took = Clock::now() - t0;
  CHECK(took >= std::chrono::milliseconds(400));
  CHECK(took < std::chrono::seconds(5));
  CHECK(why.find("rank 5's leader on 'localhost'") != std::string::npos);
  CHECK(why.find(std::to_string(ports[0])) != std::string::npos);
  CHECK(why.find("refused") != std::string::npos);
}

TEST_CASE("a node name that does not resolve: an error naming it and the way out") {
  const auto ports = candidate_ports("job/e", own_range());
  const std::string why = message([&] { fetch("job/e", 2, "no-such-node.invalid", ports, std::chrono::seconds(2)); });
  CHECK(why.find("'no-such-node.invalid'") != std::string::npos);
  CHECK(why.find("TRAINRT_LEADER_EXCHANGE=pmix") != std::string::npos);
}

TEST_CASE("every candidate port taken: the server says how to choose others") {
  const auto ports = candidate_ports("job/f", own_range());
  std::vector<Fd> held;
  for (auto p : ports) held.push_back(silent_listener(p));
  const std::string why = message([&] { Server s("job/f", 0, bytes("x"), ports); });
  CHECK(why.find("TRAINRT_RENDEZVOUS_PORTS") != std::string::npos);
  CHECK(why.find(std::to_string(ports[0])) != std::string::npos);
}

TEST_CASE("limits: an oversized key or blob is refused before anything is bound") {
  const auto ports = candidate_ports("job/g", own_range());
  CHECK(message([&] { Server s(std::string(kMaxKeyBytes + 1, 'k'), 0, bytes("x"), ports); }).find("limits") != std::string::npos);
  CHECK(message([&] { Server s("job/g", 0, Blob(kMaxBlobBytes + 1), ports); }).find("limits") != std::string::npos);
}

TEST_CASE("fetch_all: every peer side by side, in the order asked; one missing peer fails it, naming that peer") {
  const auto ports = candidate_ports("job/h", own_range());
  Server zero("job/h", 0, bytes("zero"), ports);
  Server one("job/h", 1, bytes("one"), ports);  // on the next candidate: the same node holds both here
  const auto got = fetch_all("job/h", {1, 0}, {"localhost", "127.0.0.1"}, ports, std::chrono::seconds(5));
  REQUIRE(got.size() == 2);
  CHECK(got[0] == bytes("one"));
  CHECK(got[1] == bytes("zero"));
  const std::string why =
      message([&] { fetch_all("job/h", {0, 7}, {"localhost", "localhost"}, ports, std::chrono::milliseconds(300)); });
  CHECK(why.find("rank 7's leader") != std::string::npos);
}
