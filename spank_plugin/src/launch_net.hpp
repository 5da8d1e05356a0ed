#pragma once
// Where the ranks of a step meet: MASTER_PORT from a band below the kernel's ephemeral ports, and
// MASTER_ADDR checked to be reachable from this node. The choices are pure functions of what the
// node says (tested without a network); the readers below gather it.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace trainrt::spank {

// Ports a step may listen on: [low, high], minus `reserved` ranges and well-known ports.
struct PortBand {
  unsigned low = 20000;
  unsigned high = 32767;
  std::vector<std::pair<unsigned, unsigned>> reserved;  // inclusive ranges
};

// From <proc_root>/sys/net/ipv4/ip_local_port_range and ip_local_reserved_ports: the band ends just
// below the ephemeral range (where any outgoing connection may already hold a port) and starts
// 12768 ports lower (20000 with Linux's default range 32768-60999), never below 1024.
// Unreadable files leave Linux's defaults; malformed ones are errors naming the file.
PortBand read_port_band(const std::string& proc_root = "/proc");
PortBand port_band_from(const std::string& port_range_text, const std::string& reserved_text);

// A port in `band`, the same on every node of the step, distinct for up to 16 concurrent steps of
// a job and, step 0 included, for about band/16 consecutive jobs sharing a first node. Skips
// reserved ports, torchrun's default 29500 and Slurm's default daemon ports 6817-6819.
unsigned master_port(std::uint32_t job_id, std::uint32_t step_id, const PortBand& band);

struct Address {
  std::string text;  // numeric, e.g. "10.1.2.3" or "fe80::1"
  bool v6 = false;
  bool loopback = false;
  unsigned char bytes[16] = {};
};
struct Network {
  Address address;
  unsigned prefix = 0;
};

// getaddrinfo() of `host` (IPv4 first); empty when it does not resolve.
std::vector<Address> resolve(const std::string& host);
// The addresses of interface `ifname` on this node with their prefixes; empty when it has none.
std::vector<Network> interface_networks(const std::string& ifname);
bool interface_exists(const std::string& ifname);

struct MasterInput {
  std::string first_host;         // the step's first node
  bool this_is_first = false;     // this node is that node
  unsigned nnodes = 1;
  std::vector<Address> resolved;  // what first_host resolves to on this node
  std::string ifname;             // the data network's interface (admin ifname= or TRAINRT_IFNAME), or ""
  std::vector<Network> ifname_networks;  // this node's addresses on it
};
// The numeric MASTER_ADDR this node's tasks use. Throws trainrt::Error naming the host, what it
// resolved to and the remedies when the other nodes could not reach it.
std::string choose_master_addr(const MasterInput& in);

}  // namespace trainrt::spank
