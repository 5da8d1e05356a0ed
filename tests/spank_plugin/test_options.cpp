#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>

#include <random>

#include "options.hpp"
#include "trainrt/error.hpp"

using namespace trainrt::spank;

TEST_CASE("user options: every valid form", "[options]") {
  UserOptions o = parse_user_options("policy=numa,show,bind=dry,gpus=visible-all,tasks-per-gpu=2");
  CHECK(o.policy == trainrt::topo::Policy::Numa);
  CHECK(o.show);
  CHECK(o.bind == BindMode::Dry);
  CHECK(o.gpus == GpuVisibility::All);
  CHECK(o.tasks_per_gpu == 2u);
  CHECK_FALSE(o.help);
  UserOptions d = parse_user_options("");
  CHECK_FALSE(d.policy);
  CHECK_FALSE(d.show);
  CHECK(parse_user_options("help").help);
  CHECK(parse_user_options("bind=off").bind == BindMode::Off);
  CHECK(parse_user_options("tasks-per-gpu=64").tasks_per_gpu == 64u);
  UserOptions n = parse_user_options("nics=own,mem=bind,env=override,launcher,gpus=visible-own");
  CHECK(n.nics == NicScope::Own);
  CHECK(n.mem == MemPolicy::Bind);
  CHECK(n.env == EnvMode::Override);
  CHECK(n.launcher == LauncherMode::On);
  CHECK(n.gpus == GpuVisibility::Own);
  CHECK(parse_user_options("launcher=off").launcher == LauncherMode::Off);
  CHECK(to_text(n) == "gpus=visible-own,nics=own,mem=bind,env=override,launcher=on");
}

TEST_CASE("user options: each bad input names what was wrong and what is valid", "[options]") {
  struct Case {
    const char* text;
    const char* says;
  };
  for (const Case& c : {Case{"policy=fast", "unknown policy 'fast'"}, Case{"polcy=rail", "unknown option 'polcy'"},
                        Case{"policy", "'policy' needs a value"}, Case{"policy=", "'policy' needs a value"},
                        Case{"show=1", "'show' takes no value"}, Case{"policy=rail,policy=numa", "given twice"},
                        Case{"show,,bind=on", "empty item"}, Case{",", "empty item"},
                        Case{"tasks-per-gpu=0", "'0' is out of range"}, Case{"tasks-per-gpu=65", "'65' is out of range"},
                        Case{"tasks-per-gpu=-1", "not a number"}, Case{"tasks-per-gpu=2x", "not a number"},
                        Case{"tasks-per-gpu=99999999999999999999", "out of range"},
                        Case{"bind=maybe", "unknown bind mode"}, Case{"gpus=some", "unknown gpus mode"},
                        Case{"nics=all", "unknown nics scope 'all'"}, Case{"mem=loose", "unknown mem policy"},
                        Case{"launcher=", "'launcher' needs a value"}, Case{"env=x", "unknown env mode 'x'"},
                        Case{"policy=\x01", "\\x01"},
                        // Quoted through common's escaper: a bidi override and a backslash escaped,
                        // valid UTF-8 kept as it is.
                        Case{"policy=\xe2\x80\xae", "'\\xe2\\x80\\xae'"}, Case{"policy=a\\b", "'a\\x5cb'"},
                        Case{"policy=caf\xc3\xa9", "'caf\xc3\xa9'"}}) {
    INFO(c.text);
    CHECK_THROWS_WITH(parse_user_options(c.text), Catch::StartsWith("--train-runtime: ") && Catch::Contains(c.says) &&
                                                      Catch::Contains("valid: policy=rail|numa|none"));
  }
  CHECK_THROWS_WITH(parse_user_options(std::string(2000, 'a')), Catch::Contains("longer than 1024"));
}

TEST_CASE("TRAINRT_OPTS gives defaults; the option wins", "[options]") {
  UserOptions m = merge(parse_user_options("policy=numa,show"), parse_user_options("policy=rail,bind=dry"));
  CHECK(m.policy == trainrt::topo::Policy::Rail);
  CHECK(m.show);
  CHECK(m.bind == BindMode::Dry);
}

namespace {

// The quoted pieces of a message, \xNN escapes undone.
std::vector<std::string> quoted_pieces(const std::string& what) {
  std::vector<std::string> out;
  for (std::size_t a = what.find('\''); a != std::string::npos; a = what.find('\'', a + 1)) {
    std::size_t b = what.find('\'', a + 1);
    if (b == std::string::npos) break;
    std::string raw = what.substr(a + 1, b - a - 1), text;
    for (std::size_t i = 0; i < raw.size(); ++i) {
      if (raw[i] == '\\' && i + 3 < raw.size() && raw[i + 1] == 'x') {
        text += static_cast<char>(std::stoi(raw.substr(i + 2, 2), nullptr, 16));
        i += 3;
      } else {
        text += raw[i];
      }
    }
    out.push_back(text);
    a = b;
  }
  return out;
}

}  // namespace

TEST_CASE("fuzz: 10,000 generated option strings: acceptances round-trip, rejections quote the input", "[options][fuzz]") {
  const std::vector<std::string> atoms = {"policy", "rail", "numa", "none", "show", "bind", "on", "off", "dry",
                                          "gpus", "visible-own", "visible-all", "tasks-per-gpu", "help", "=", ",",
                                          "0", "1", "64", "65", "-", "x", "\xff", " ", "==", ",,", "9999999999",
                                          "nics", "own", "node", "mem", "prefer", "env", "keep", "launcher", "auto"};
  std::mt19937 rng(7);
  unsigned accepted = 0, rejected = 0;
  for (int i = 0; i < 10000; ++i) {
    std::string s;
    int n = static_cast<int>(rng() % 12);
    for (int k = 0; k < n; ++k) s += atoms[rng() % atoms.size()];
    if (rng() % 50 == 0) s = std::string(1000 + rng() % 100, 'p');
    INFO("input: '" << s << "'");
    try {
      UserOptions o = parse_user_options(s);
      // What was accepted means what it says: its canonical text parses back to the same options.
      UserOptions again = parse_user_options(to_text(o));
      CHECK(to_text(again) == to_text(o));
      CHECK(again.policy == o.policy);
      CHECK(again.tasks_per_gpu == o.tasks_per_gpu);
      CHECK(again.launcher == o.launcher);
      ++accepted;
    } catch (const trainrt::Error& e) {
      std::string what = e.what();
      INFO("message: " << what);
      CHECK(what.rfind("--train-runtime: ", 0) == 0);
      CHECK(what.find("valid:") != std::string::npos);
      // Every rejection names the offending text: a quoted piece of the input (or its length).
      bool names_it = s.size() > 1024;
      for (const auto& q : quoted_pieces(what)) names_it |= !q.empty() && s.find(q) != std::string::npos;
      CHECK(names_it);
      ++rejected;
    }
  }
  CHECK(accepted > 100);  // the generator reaches valid strings too
  CHECK(rejected > 100);
}

TEST_CASE("plugstack arguments", "[options]") {
  AdminConfig c = parse_admin_args({"enable=always", "policy=numa", "topology_xml=/etc/node.xml", "nic_include=mlx5_0,mlx5_3", "strict=0"});
  CHECK(c.enable == Enable::Always);
  CHECK(c.policy == trainrt::topo::Policy::Numa);
  CHECK(c.topology_xml == "/etc/node.xml");
  CHECK(c.nic_include == std::vector<std::string>{"mlx5_0", "mlx5_3"});
  CHECK_FALSE(c.strict);
  AdminConfig d = parse_admin_args({});
  CHECK(d.enable == Enable::Default);
  CHECK(d.strict);
  CHECK_THROWS_WITH(parse_admin_args({"colour=blue"}), Catch::Contains("unknown key 'colour'"));
  CHECK_THROWS_WITH(parse_admin_args({"enable"}), Catch::Contains("not key=value"));
  CHECK_THROWS_WITH(parse_admin_args({"enable=sometimes"}), Catch::Contains("enable='sometimes'"));
  CHECK_THROWS_WITH(parse_admin_args({"topology_xml=node.xml"}), Catch::Contains("absolute path"));
  CHECK_THROWS_WITH(parse_admin_args({"strict=1", "strict=0"}), Catch::Contains("given twice"));
  CHECK_THROWS_WITH(parse_admin_args({"policy=fast"}), Catch::Contains("policy='fast'"));
  AdminConfig net = parse_admin_args({"ifname=ib0", "rail_ids=1"});
  CHECK(net.ifname == "ib0");
  CHECK(net.rail_ids);
  CHECK_THROWS_WITH(parse_admin_args({"ifname=../etc"}),
                    Catch::StartsWith("plugstack.conf: ifname: '../etc' cannot be a network interface name"));
  CHECK_THROWS_WITH(parse_admin_args({"ifname=averyveryverylongname"}),
                    Catch::Contains("ifname: 'averyveryverylongname' cannot be"));
  CHECK_THROWS_WITH(parse_admin_args({"rail_ids=yes"}), Catch::Contains("rail_ids='yes'"));
}
