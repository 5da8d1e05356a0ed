// plugstack nccl_topo=auto|always|off and topology_cache=PATH|off: parsing, the VM test, and when
// NCCL_TOPO_FILE is exported.
#include <catch2/catch.hpp>

#include "nccl_topo.hpp"
#include "options.hpp"
#include "trainrt/error.hpp"

using namespace trainrt::spank;

TEST_CASE("plugstack topology_cache= and nccl_topo=", "[options][nccl_topo]") {
  AdminConfig d = parse_admin_args({});
  CHECK(d.topology_cache == "/run/train-runtime/topology.cache");
  CHECK(d.nccl_topo == NcclTopo::Auto);
  AdminConfig c = parse_admin_args({"topology_cache=/var/cache/trt/node.cache", "nccl_topo=always"});
  CHECK(c.topology_cache == "/var/cache/trt/node.cache");
  CHECK(c.nccl_topo == NcclTopo::Always);
  CHECK(parse_admin_args({"topology_cache=off"}).topology_cache.empty());
  CHECK(parse_admin_args({"nccl_topo=off"}).nccl_topo == NcclTopo::Off);
  CHECK(parse_admin_args({"nccl_topo=auto"}).nccl_topo == NcclTopo::Auto);
  for (const char* bad : {"topology_cache=relative.cache", "topology_cache=/run/x/", "topology_cache=/run/../etc/c",
                          "topology_cache=/run/x/..", "topology_cache=/run/./c"}) {
    INFO(bad);
    CHECK_THROWS_WITH(parse_admin_args({bad}), Catch::Contains("topology_cache=") && Catch::Contains("absolute path"));
  }
  CHECK_THROWS_WITH(parse_admin_args({"nccl_topo=sometimes"}),
                    Catch::Contains("nccl_topo='sometimes'") && Catch::Contains("nccl_topo=auto|always|off"));
  CHECK_THROWS_WITH(parse_admin_args({"nccl_topo=auto", "nccl_topo=off"}), Catch::Contains("given twice"));
  CHECK(std::string(to_string(NcclTopo::Always)) == "always");
}

TEST_CASE("a VM is told by the hypervisor flag or a hypervisor's DMI name", "[nccl_topo]") {
  const char* kvm_cpuinfo =
      "processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu vme de pse tsc msr hypervisor lahf_lm\n\n"
      "processor\t: 1\nflags\t\t: fpu vme\n";
  const char* metal_cpuinfo = "processor\t: 0\nflags\t\t: fpu vme de pse tsc msr lahf_lm hypervisorx\n";
  CHECK(looks_like_vm(kvm_cpuinfo, "", "", ""));
  CHECK_FALSE(looks_like_vm(metal_cpuinfo, "Supermicro", "AS -4125GS-TNRT", ""));
  CHECK_FALSE(looks_like_vm("", "Amazon EC2", "p4d.24xlarge", ""));  // bare-metal cloud: a name is not a VM
  CHECK_FALSE(looks_like_vm("", "Google", "Google Compute Engine", ""));
  CHECK(looks_like_vm("", "QEMU\n", "Standard PC (Q35 + ICH9, 2009)\n", ""));
  CHECK(looks_like_vm("", "Microsoft Corporation", "Virtual Machine", ""));
  CHECK(looks_like_vm("", "", "VMware20,1", ""));
  CHECK(looks_like_vm("", "Red Hat", "KVM", ""));
  CHECK(looks_like_vm("", "", "", "xen\n"));
  // ARM has no flags line ("Features"): only DMI/hypervisor decide.
  CHECK_FALSE(looks_like_vm("processor\t: 0\nFeatures\t: fp asimd hypervisor\n", "NVIDIA", "Grace Hopper", ""));
  // Only the first flags line counts, and only whole words.
  CHECK_FALSE(looks_like_vm("flags\t: fpu\nflags\t: hypervisor\n", "", "", ""));
}

TEST_CASE("NCCL_TOPO_FILE: exported only where asked, from a fresh cache, never over the user's", "[nccl_topo]") {
  NcclTopoInput in;
  in.path = "/run/train-runtime/topology.nccl.xml";
  in.cache_used = true;
  int checks = 0;
  auto good = [&] {
    ++checks;
    return std::string();
  };
  SECTION("auto on bare metal: nothing, and the file is not even read") {
    in.mode = NcclTopo::Auto;
    NcclTopoChoice c = choose_nccl_topo(in, good);
    CHECK(c.export_path.empty());
    CHECK(c.note.empty());
    CHECK(checks == 0);
  }
  SECTION("auto in a VM, always anywhere: the file") {
    in.mode = NcclTopo::Auto;
    in.is_vm = true;
    NcclTopoChoice c = choose_nccl_topo(in, good);
    CHECK(c.export_path == in.path);
    CHECK_THAT(c.note, Catch::Contains("virtual machine"));
    in.mode = NcclTopo::Always;
    in.is_vm = false;
    CHECK(choose_nccl_topo(in, good).export_path == in.path);
    CHECK(checks == 2);
  }
  SECTION("off: nothing") {
    in.mode = NcclTopo::Off;
    in.is_vm = true;
    CHECK(choose_nccl_topo(in, good).export_path.empty());
    CHECK(checks == 0);
  }
  SECTION("the user's own NCCL_TOPO_FILE is kept") {
    in.mode = NcclTopo::Always;
    in.user_value = "/home/u/my-topo.xml";
    NcclTopoChoice c = choose_nccl_topo(in, good);
    CHECK(c.export_path.empty());
    CHECK_THAT(c.note, Catch::Contains("/home/u/my-topo.xml") && Catch::Contains("kept"));
  }
  SECTION("no fresh cache: no file, and why") {
    in.mode = NcclTopo::Always;
    in.cache_used = false;
    NcclTopoChoice c = choose_nccl_topo(in, good);
    CHECK(c.export_path.empty());
    CHECK_THAT(c.note, Catch::Contains("fresh digested cache"));
    CHECK(checks == 0);
  }
  SECTION("a file that fails its check is not exported; the reason is escaped") {
    in.mode = NcclTopo::Always;
    NcclTopoChoice c = choose_nccl_topo(in, [] { return std::string("owned by uid 1000\x1b[2J"); });
    CHECK(c.export_path.empty());
    CHECK_THAT(c.note, Catch::Contains("uid 1000\\x1b[2J"));
  }
}
