#include "app/scenario/startup_text.h"

#include <algorithm>
#include <array>

#include <fmt/format.h>

namespace tandem::app {
namespace {

std::string seconds_text(double seconds) {
  if (seconds >= 100) return fmt::format("{:.0f} s", seconds);
  if (seconds >= 1) return fmt::format("{:.2f} s", seconds);
  return fmt::format("{:.0f} ms", seconds * 1e3);
}

}  // namespace

std::string startup_table(std::span<const sim::StartupResult> rows, std::span<const std::string> labels,
                          const std::string& label) {
  const bool barriers =
      std::any_of(rows.begin(), rows.end(), [](const auto& r) { return r.phase_s("group barriers") > 0; });
  size_t width = label.size();
  for (size_t i = 0; i < rows.size(); ++i) {
    width = std::max(width, i < labels.size() ? labels[i].size() : std::to_string(rows[i].gpus).size());
  }
  std::string out = fmt::format("  {:<{}} {:>9} {:>9} {:>14}", label, width, "launch", "store", "communicators");
  if (barriers) out += fmt::format(" {:>15}", "group barriers");
  out += fmt::format(" {:>18} {:>9}\n", "first collectives", "total");
  for (size_t i = 0; i < rows.size(); ++i) {
    const sim::StartupResult& r = rows[i];
    const std::string name = i < labels.size() ? labels[i] : std::to_string(r.gpus);
    out += fmt::format("  {:<{}} {:>9} {:>9} {:>14}", name, width, seconds_text(r.phase_s("launch")),
                       seconds_text(r.phase_s("store")), seconds_text(r.phase_s("communicators")));
    if (barriers) out += fmt::format(" {:>15}", seconds_text(r.phase_s("group barriers")));
    out += fmt::format(
        " {:>18} {:>9}{}\n", seconds_text(r.phase_s("first collectives")), seconds_text(r.total_s),
        r.simulated_gpus < r.gpus ? fmt::format("  (ring steps scaled from {} GPUs)", r.simulated_gpus) : "");
  }
  return out;
}

}  // namespace tandem::app
