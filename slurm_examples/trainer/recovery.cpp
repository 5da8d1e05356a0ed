#include "recovery.hpp"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "trainrt/error.hpp"

namespace train_mlp {
namespace {

// A wall-clock time from the script: a finite number of seconds since the epoch, or an Error
// naming the variable (a typo must not become a phase of minus fifty years).
std::optional<double> env_time(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  char* end = nullptr;
  const double t = std::strtod(v, &end);
  if (*end != '\0' || !std::isfinite(t) || t < 1e9 || t > 1e11)
    throw trainrt::Error(std::string("'") + v + "' is not a time in seconds since the epoch", name);
  return t;
}

std::string env_text(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v).substr(0, 4096) : std::string();
}

}  // namespace

std::optional<ScriptTimes> script_times_from_env() {
  const auto detected = env_time("TRAINRT_RECOVERY_DETECTED_AT");
  if (!detected) return std::nullopt;
  ScriptTimes s;
  s.detected_at = *detected;
  s.failed_at = env_time("TRAINRT_RECOVERY_FAILED_AT").value_or(*detected);
  s.verdict_at = env_time("TRAINRT_RECOVERY_VERDICT_AT").value_or(*detected);
  s.launched_at = env_time("TRAINRT_RECOVERY_LAUNCHED_AT").value_or(s.verdict_at);
  s.kind = env_text("TRAINRT_RECOVERY_KIND");
  s.excluded = env_text("TRAINRT_RECOVERY_EXCLUDED");
  s.spares = env_text("TRAINRT_RECOVERY_SPARES");
  if (const std::string n = env_text("TRAINRT_RECOVERY_FAILED_LAUNCHES"); !n.empty()) {
    unsigned v = 0;
    const auto [end, ec] = std::from_chars(n.data(), n.data() + n.size(), v);
    if (ec != std::errc{} || end != n.data() + n.size() || v > 1000000)
      throw trainrt::Error("'" + n + "' is not a count of launches", "TRAINRT_RECOVERY_FAILED_LAUNCHES");
    s.failed_launches = v;
  }
  return s;
}

std::string recovery_event(const ScriptTimes& s, const RecoveryTimes& t, double first_step_done, bool no_step_left) {
  using nlohmann::json;
  // Each phase ends where the next begins, so they add up to the whole.
  json phases = {{"detection_s", s.detected_at - s.failed_at},
                 {"verdict_s", s.verdict_at - s.detected_at},
                 {"launch_s", s.launched_at - s.verdict_at},
                 {"bootstrap_s", t.init_done - s.launched_at},
                 {"restore_s", t.restore_done - t.init_done},
                 {"first_step_s", first_step_done - t.restore_done}};
  json restore_phases = json::array();
  for (const auto& p : t.restore_phases) restore_phases.push_back({{"phase", p.name}, {"step", p.step}, {"s", p.seconds}});
  json e = {{"event", "recovery"},
            {"wall", first_step_done},
            {"total_s", first_step_done - s.failed_at},
            {"phases", phases},
            {"kind", s.kind},
            {"excluded", s.excluded},
            {"spares", s.spares},
            {"failed_launches", s.failed_launches},
            {"restored_step", t.restored_step},
            {"restore_source", t.source},
            {"moved_copies", t.moved_copies},
            {"fallbacks", t.fallbacks},
            {"restore_phases", restore_phases},
            {"no_step_left", no_step_left},
            {"times", {{"failed_at", s.failed_at}, {"detected_at", s.detected_at}, {"verdict_at", s.verdict_at},
                       {"launched_at", s.launched_at}, {"process_start", t.process_start}, {"init_done", t.init_done},
                       {"restore_done", t.restore_done}, {"first_step_done", first_step_done}}}};
  return e.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace train_mlp
