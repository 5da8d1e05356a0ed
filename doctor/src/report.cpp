// trainrt-doctor's two outputs. Everything in them may come from a hostile file: text escapes
// control bytes, JSON replaces invalid UTF-8.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "trainrt/doctor/doctor.hpp"
#include "trainrt/printable.hpp"

namespace trainrt::doctor {

// A backslash as \x5c: trainrt/printable.hpp.
std::string escape_text(const std::string& s) { return printable_line(s, Backslash::hex); }

namespace {

std::string node_text(const std::string& n) { return n.empty() ? "unknown node" : escape_text(n); }

nlohmann::json rank_nodes(const std::vector<RankNode>& v, bool with_seconds) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& r : v) {
    nlohmann::json o = {{"rank", r.rank}, {"node", r.node.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.node)},
                        {"evidence", r.evidence}};
    if (with_seconds) o["seconds"] = r.seconds >= 0 ? nlohmann::json(r.seconds) : nlohmann::json(nullptr);
    a.push_back(std::move(o));
  }
  return a;
}

}  // namespace

std::string format_text(const Verdict& v) {
  std::string out = fmt::format("verdict: {}: {}\n", to_string(v.kind), escape_text(v.summary));
  if (v.collective)
    out += fmt::format("collective: #{} {} {} B\n", v.collective->seq, escape_text(v.collective->op), v.collective->bytes);
  for (const auto& m : v.mismatches) out += fmt::format("called: {}\n", escape_text(m));
  for (const auto& r : v.never_arrived)
    out += fmt::format("never arrived: rank {} on {}: {}\n", r.rank, node_text(r.node), escape_text(r.evidence));
  for (const auto& r : v.waited)
    out += fmt::format("waited: rank {} on {}{}{}\n", r.rank, node_text(r.node),
                       r.seconds >= 0 ? fmt::format(" for {:.1f} s", r.seconds) : std::string(),
                       r.evidence.empty() ? std::string() : ": " + escape_text(r.evidence));
  for (const auto& s : v.stragglers)
    out += fmt::format("straggler: rank {} on {}: {:.3f} ms per step before the allreduce, +{:.0f}% over the median {:.3f} ms\n",
                       s.rank, node_text(s.node), s.seconds * 1e3, s.excess * 100, v.median_compute_s * 1e3);
  if (!v.culprit_nodes.empty()) {
    std::string list;
    for (const auto& n : v.culprit_nodes) list += (list.empty() ? "" : ",") + escape_text(n);
    out += fmt::format("exclude on rerun: {}\n", list);
  }
  for (const auto& n : v.notes) out += fmt::format("note: {}\n", escape_text(n));
  return out;
}

std::string format_json(const Verdict& v) {
  nlohmann::json j;
  j["verdict"] = to_string(v.kind);
  j["exit_code"] = exit_code(v);
  j["summary"] = v.summary;
  j["world"] = v.world ? nlohmann::json(*v.world) : nlohmann::json(nullptr);
  j["ranks_read"] = v.ranks_read;
  if (v.collective)
    j["collective"] = {{"seq", v.collective->seq}, {"op", v.collective->op}, {"bytes", v.collective->bytes}};
  else
    j["collective"] = nullptr;
  j["mismatches"] = v.mismatches;
  j["never_arrived"] = rank_nodes(v.never_arrived, false);
  j["waited"] = rank_nodes(v.waited, true);
  nlohmann::json s = nlohmann::json::array();
  for (const auto& x : v.stragglers)
    s.push_back({{"rank", x.rank}, {"node", x.node.empty() ? nlohmann::json(nullptr) : nlohmann::json(x.node)},
                 {"compute_s", x.seconds}, {"excess", x.excess}});
  j["stragglers"] = s;
  j["median_compute_s"] = v.median_compute_s;
  j["culprit_nodes"] = v.culprit_nodes;
  j["notes"] = v.notes;
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace trainrt::doctor
