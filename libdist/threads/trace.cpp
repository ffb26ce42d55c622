// The Chrome trace of the threads backend: every send, recv, collective and sim_compute span on
// the simulated clock, one track per rank, and one per stream of the rank's simulated device
// (device.cpp) right under it (open in Perfetto or chrome://tracing).
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "threads/engine.hpp"

namespace dist::detail::threads {

namespace {
// Sort slots per rank: the rank's own track, then its device's streams.
constexpr int kTracksPerRank = 64;
}  // namespace

void Engine::trace(int r, TraceEvent ev) {
  if (tracing_) rank_state(r).trace.push_back(std::move(ev));
}

void Engine::write_trace() {
  if (!tracing_) return;
  nlohmann::json events = nlohmann::json::array();
  events.push_back(
      {{"name", "process_name"},
       {"ph", "M"},
       {"pid", 0},
       {"tid", 0},
       {"args",
        {{"name", "threads backend (" + std::to_string(p_) + " ranks, simulated clock)"}}}});
  for (int r = 0; r < p_; ++r) {
    events.push_back({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", 0},
                      {"tid", r},
                      {"args", {{"name", "rank " + std::to_string(r)}}}});
    events.push_back({{"name", "thread_sort_index"},
                      {"ph", "M"},
                      {"pid", 0},
                      {"tid", r},
                      {"args", {{"sort_index", r * kTracksPerRank}}}});
    if (abandoned_ && !thread_done_[static_cast<std::size_t>(r)]) continue;
    // The streams of the rank's device, and the process groups the rank calls (other than the
    // world): one track each, right under the rank's own, named "rank R stream S" and
    // "rank R group NAME".
    std::map<std::string, int> stream_tid;
    for (const TraceEvent& ev : rank_state(r).trace) {
      int tid = r;
      const bool on_group = ev.track.empty() && !ev.group.empty() && ev.group != "world";
      if (!ev.track.empty() || on_group) {
        const std::string key = on_group ? "group " + ev.group : "stream " + ev.track;
        auto [it, added] = stream_tid.try_emplace(key, 0);
        if (added) {
          const int k = static_cast<int>(stream_tid.size());  // 1, 2, ...
          it->second = p_ + r * kTracksPerRank + k;
          events.push_back({{"name", "thread_name"},
                            {"ph", "M"},
                            {"pid", 0},
                            {"tid", it->second},
                            {"args", {{"name", "rank " + std::to_string(r) + " " + key}}}});
          events.push_back({{"name", "thread_sort_index"},
                            {"ph", "M"},
                            {"pid", 0},
                            {"tid", it->second},
                            {"args", {{"sort_index", r * kTracksPerRank + k}}}});
        }
        tid = it->second;
      }
      nlohmann::json args = nlohmann::json::object();
      if (ev.peer >= 0) args[ev.name.find("send") != std::string::npos ? "dst" : "src"] = ev.peer;
      if (ev.tag >= 0) args["tag"] = ev.tag;
      if (ev.bytes > 0 || ev.peer >= 0 || ev.is_coll) args["bytes"] = ev.bytes;
      if (ev.is_coll) args["collective_call"] = ev.seq;
      if (!ev.group.empty()) args["group"] = ev.group;
      const std::string cat = !ev.track.empty() ? "device"
                              : ev.is_coll      ? "collective"
                              : ev.peer >= 0    ? "p2p"
                                                : "compute";
      events.push_back({{"name", ev.name},
                        {"cat", cat},
                        {"ph", "X"},
                        {"pid", 0},
                        {"tid", tid},
                        {"ts", ev.t0 * 1e6},
                        {"dur", (ev.t1 - ev.t0) * 1e6},
                        {"args", args}});
    }
  }
  nlohmann::json doc = {
      {"traceEvents", events},
      {"displayTimeUnit", "ns"},
      {"otherData", {{"clock", "simulated (threads backend alpha-beta model), microseconds"}}}};
  std::ofstream f(opts_.trace_path);
  if (!f)
    throw Error("cannot write the trace to '" + opts_.trace_path +
                "': check that the folder exists");
  f << doc.dump() << "\n";
  if (!f) throw Error("writing the trace to '" + opts_.trace_path + "' failed");
}

}  // namespace dist::detail::threads
