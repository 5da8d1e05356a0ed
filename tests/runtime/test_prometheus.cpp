// The Prometheus textfile writer: format, escaping, refused names, atomic replacement.
// With an argument, writes a sample file there (for prom_parse.py, which parses it with the
// prometheus_client package's own parser).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>

#include "../common/temp_dir.hpp"
#include "trainrt/error.hpp"
#include "trainrt/fd.hpp"
#include "trainrt/runtime/prometheus.hpp"
#include "trainrt/runtime/stragglers.hpp"

namespace fs = std::filesystem;

namespace {
trainrt::TrainingGauges sample_gauges() {
  trainrt::TrainingGauges g;
  g.job = "12345";
  g.slurm_step = "1";  // Slurm's job step (a rerun's is 2, ...), not the training step
  g.node = "node\"2\\\n";  // every character the format escapes
  g.rank = 0;
  g.step = 200;
  g.samples_per_s = 51234.5;
  g.step_p50_s = 0.0121;
  g.step_p99_s = 0.0305;
  g.allreduce_s = 0.0021;
  g.allreduce_busbw_gbs = 3.25;
  g.ckpt_stall_s = 0.004;
  g.ckpt_persist_s = 0.35;
  g.goodput = 0.93;
  g.restarts = 1;
  g.stragglers = 2;
  return g;
}
// Whether `s` is valid shortest-form UTF-8 (written here, not borrowed from the code under test).
bool is_utf8(const std::string& s) {
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const std::size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size() || (n == 2 && c < 0xc2)) return false;
    std::uint32_t cp = n == 1 ? c : c & (0x7f >> n);
    for (std::size_t k = 1; k < n; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3f);
    }
    if ((n == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)))
      return false;
    i += n;
  }
  return true;
}
std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
}  // namespace

TEST_CASE("exposition text: HELP and TYPE once per name, labels escaped, values exact") {
  const auto text = trainrt::prometheus_text(trainrt::training_samples(sample_gauges()));
  CHECK(text.find("# TYPE trainrt_step gauge\n") != std::string::npos);
  CHECK(text.find("# TYPE trainrt_restarts_total counter\n") != std::string::npos);
  CHECK(text.find(R"(trainrt_step{job="12345",step="1",node="node\"2\\\n",rank="0"} 200)" "\n") != std::string::npos);
  CHECK(text.find(R"(trainrt_step_seconds_p99{job="12345",step="1",node="node\"2\\\n",rank="0"} 0.0305)") != std::string::npos);
  CHECK(text.find("trainrt_stragglers{") != std::string::npos);
  // grouped: two samples of one name share one header
  std::vector<trainrt::PromSample> two{{"x_a", "h", "gauge", {{"rank", "0"}}, 1}, {"x_b", "h", "gauge", {}, 2},
                                       {"x_a", "h", "gauge", {{"rank", "1"}}, 3}};
  CHECK(trainrt::prometheus_text(two) ==
        "# HELP x_a h\n# TYPE x_a gauge\nx_a{rank=\"0\"} 1\nx_a{rank=\"1\"} 3\n# HELP x_b h\n# TYPE x_b gauge\nx_b 2\n");
  // optional gauges left out
  trainrt::TrainingGauges bare;
  CHECK(trainrt::training_samples(bare).size() == 2);  // step and restarts
}

TEST_CASE("bad metric or label names and types are refused") {
  CHECK_THROWS_AS(trainrt::prometheus_text({{"1bad", "h", "gauge", {}, 1}}), trainrt::UsageError);
  CHECK_THROWS_AS(trainrt::prometheus_text({{"a b", "h", "gauge", {}, 1}}), trainrt::UsageError);
  CHECK_THROWS_AS(trainrt::prometheus_text({{"ok", "h", "summary", {}, 1}}), trainrt::UsageError);
  CHECK_THROWS_AS(trainrt::prometheus_text({{"ok", "h", "gauge", {{"__reserved", "x"}}, 1}}), trainrt::UsageError);
  CHECK_THROWS_AS(trainrt::prometheus_text({{"ok", "h", "gauge", {{"a:b", "x"}}, 1}}), trainrt::UsageError);
  CHECK(trainrt::prometheus_text({{"ok", "h", "gauge", {}, NAN}}).find("ok NaN") != std::string::npos);
}

TEST_CASE("the file is replaced atomically, no temporary left behind") {
  const trainrt::testing::TempDir tmp("prom-test-");
  const fs::path& dir = tmp.path();
  const std::string path = tmp / "trainrt.prom";
  trainrt::write_prometheus_textfile(path, trainrt::training_samples(sample_gauges()));
  auto g = sample_gauges();
  g.step = 201;
  trainrt::write_prometheus_textfile(path, trainrt::training_samples(g));
  CHECK(slurp(path).find("} 201\n") != std::string::npos);
  std::size_t files = 0;
  for (auto& e : fs::directory_iterator(dir)) files += (void(e), 1);
  CHECK(files == 1);
  CHECK_THROWS_AS(trainrt::write_prometheus_textfile((dir / "no" / "such.prom").string(), {}), trainrt::Error);
}

TEST_CASE("hostile: a FIFO planted at the temporary name cannot block the writer") {
  // Another member of the textfile folder's group plants a FIFO where the writer used to put its
  // temporary (<path>.tmp.<pid>): an O_WRONLY open of it waits for a reader forever.
  const fs::path dir = fs::temp_directory_path() / ("prom-fifo-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string path = (dir / "trainrt.prom").string();
  const std::string planted = path + ".tmp." + std::to_string(::getpid());
  REQUIRE(::mkfifo(planted.c_str(), 0666) == 0);
  auto done = std::async(std::launch::async, [&] {
    try {
      trainrt::write_prometheus_textfile(path, trainrt::training_samples(sample_gauges()));
      return std::string();
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
  });
  const bool finished = done.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  trainrt::Fd reader;
  if (!finished) reader = trainrt::Fd(::open(planted.c_str(), O_RDONLY | O_NONBLOCK));  // let it go, then fail
  const std::string error = done.get();
  reader.reset();
  CHECK(finished);
  CHECK(error.empty());
  CHECK(slurp(path).find("trainrt_step{") != std::string::npos);
  struct stat st {};
  CHECK((::lstat(planted.c_str(), &st) == 0 && S_ISFIFO(st.st_mode)));  // not opened, not removed
  fs::remove_all(dir);
}

TEST_CASE("hostile: label values stay UTF-8, cut on a character boundary and escaped") {
  // A node name of 62 ASCII bytes and a 2-byte character: 64 bytes, cut to fit 63.
  const std::string long_name = std::string(62, 'n') + "\xc3\xa9";
  ::setenv("SLURMD_NODENAME", long_name.c_str(), 1);
  const std::string node = trainrt::local_node_name();
  ::unsetenv("SLURMD_NODENAME");
  CHECK(node == std::string(62, 'n'));
  CHECK(is_utf8(node));
  auto g = sample_gauges();
  g.node = node;
  g.job = "job\xff\xfe\"x\\";  // bytes that are not UTF-8 beside the characters the format escapes
  const std::string text = trainrt::prometheus_text(trainrt::training_samples(g));
  CHECK(is_utf8(text));
  CHECK(text.find("job=\"job\xef\xbf\xbd\xef\xbf\xbd\\\"x\\\\\"") != std::string::npos);
  CHECK(text.find("node=\"" + std::string(62, 'n') + "\"") != std::string::npos);
}

TEST_CASE("quantile by nearest rank") {
  CHECK(trainrt::quantile({}, 0.5) == 0);
  CHECK(trainrt::quantile({3, 1, 2}, 0.5) == 2);
  std::vector<double> v;
  for (int i = 1; i <= 100; ++i) v.push_back(i);
  CHECK(trainrt::quantile(v, 0.99) == 99);
  CHECK(trainrt::quantile(v, 1.0) == 100);
  CHECK(trainrt::quantile(v, 0.0) == 1);
  CHECK(trainrt::quantile({NAN, 5}, 0.5) == 5);
}

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--write") {
    trainrt::write_prometheus_textfile(argv[2], trainrt::training_samples(sample_gauges()));
    return 0;
  }
  return Catch::Session().run(argc, argv);
}
