#include "gpu_identity.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <memory>

#include "trainrt/error.hpp"
#include "trainrt/number.hpp"
#include "trainrt/strings.hpp"

namespace trainrt::spank {
namespace {

constexpr std::size_t kMaxGpus = 256;
constexpr std::size_t kMaxInformation = 16384;

std::string_view value_of(std::string_view line) {
  std::size_t colon = line.find(':');
  std::string_view v = line.substr(colon + 1);
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t' || v.back() == '\r')) v.remove_suffix(1);
  return v;
}

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

}  // namespace

DriverGpu parse_driver_information(std::string_view folder_busid, std::string_view text) {
  DriverGpu g;
  g.busid = lower(folder_busid);
  for (std::string_view line : split(text, '\n')) {
    if (line.rfind("Device Minor:", 0) == 0) {
      g.minor = static_cast<int>(parse_number(value_of(line), "a Device Minor number", 0u, 1u << 20, folder_busid));
    } else if (line.rfind("GPU UUID:", 0) == 0) {
      g.uuid = std::string(value_of(line)).substr(0, 128);
    } else if (line.rfind("Bus Location:", 0) == 0) {
      g.busid = lower(value_of(line)).substr(0, 32);
    }
  }
  if (g.minor < 0) throw Error("no Device Minor line", std::string(folder_busid));
  return g;
}

std::vector<DriverGpu> read_driver_gpus(const std::string& proc_root) {
  const std::string dir = proc_root + "/driver/nvidia/gpus";
  std::unique_ptr<DIR, decltype(&closedir)> d(opendir(dir.c_str()), closedir);
  if (!d) return {};
  std::vector<DriverGpu> out;
  while (dirent* e = readdir(d.get())) {
    std::string name = e->d_name;
    if (name == "." || name == ".." || name.size() > 32) continue;
    if (out.size() >= kMaxGpus) throw Error(fmt::format("more than {} GPUs", kMaxGpus), dir);
    const std::string path = dir + "/" + name + "/information";
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) continue;
    std::string text(kMaxInformation, '\0');
    ssize_t n = ::read(fd, text.data(), text.size());
    ::close(fd);
    if (n <= 0) continue;
    text.resize(static_cast<std::size_t>(n));
    out.push_back(parse_driver_information(name, text));
  }
  std::sort(out.begin(), out.end(), [](const DriverGpu& a, const DriverGpu& b) { return a.busid < b.busid; });
  return out;
}

}  // namespace trainrt::spank
