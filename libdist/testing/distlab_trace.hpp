// Reading the Chrome trace that the threads backend writes at the end of a launch
// (LaunchOptions::trace_path), for tests that check the order or the timing of device work.
#pragma once

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace distlab::testing {

/// One span of a track: its name ("kernel 'forward 0'", "all_gather(...)", "wait event '...'")
/// and its simulated start and end, in seconds.
struct TraceSpan {
  std::string name;
  double t0 = 0, t1 = 0;
};

/// The spans of the track named `track` ("rank 0", "rank 0 stream comm", ...) in start order
/// (spans that start together keep the trace's order); none when no track has that name.
inline std::vector<TraceSpan> trace_spans(const std::string& path, const std::string& track) {
  std::ifstream f(path);
  const nlohmann::json doc = nlohmann::json::parse(f);
  long tid = -1;
  for (const auto& ev : doc.at("traceEvents")) {
    if (ev.value("name", "") == "thread_name" && ev.at("args").value("name", "") == track)
      tid = ev.at("tid").get<long>();
  }
  std::vector<TraceSpan> out;
  for (const auto& ev : doc.at("traceEvents")) {
    if (ev.value("ph", "") != "X" || ev.at("tid").get<long>() != tid) continue;
    const double t0 = ev.at("ts").get<double>() * 1e-6;
    out.push_back({ev.value("name", ""), t0, t0 + ev.at("dur").get<double>() * 1e-6});
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const TraceSpan& a, const TraceSpan& b) { return a.t0 < b.t0; });
  return out;
}

}  // namespace distlab::testing
