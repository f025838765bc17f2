#include "app/scenario/training_run.h"

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "app/scenario/scenario_report.h"
#include "core/error.h"
#include "core/flight_recorder.h"
#include "core/fr_analysis.h"
#include "core/text.h"
#include "models/nccl_protocol.h"

namespace tandem::app {

const sim::TrainingStepResult* TrainingResults::find(const Scenario& scenario, std::string_view variant,
                                                     std::string_view layout) const {
  for (size_t v = 0; v < scenario.variants.size() && v < steps.size(); ++v) {
    if (scenario.variants[v].name != variant) continue;
    for (const sim::TrainingStepResult& step : steps[v]) {
      if (step.layout == layout) return &step;
    }
  }
  return nullptr;
}

namespace {

const TrainingWorkload& training_of(const Scenario& scenario) {
  const auto* training = std::get_if<TrainingWorkload>(&scenario.workload);
  if (training == nullptr) fail(ErrorCode::kInvalidArgument, "the scenario's workload is not a training job");
  return *training;
}

int gpus_of(const models::ClusterSpec& cluster) { return cluster.nodes * cluster.gpus_per_node; }

}  // namespace

TrainingResults run_training(const Scenario& scenario, ScenarioBackend backend, const ProgressFn& progress,
                             bool keep_timeline) {
  if (backend != ScenarioBackend::kSim) {
    fail(ErrorCode::kUnsupported,
         "a training workload runs on the simulator (--backend sim), not on {}: its steps "
         "are whole-cluster predictions",
         name(backend));
  }
  const TrainingWorkload& training = training_of(scenario);
  TrainingResults results;
  for (size_t v = 0; v < scenario.variants.size(); ++v) {
    const ClusterVariant& variant = scenario.variants[v];
    sim::TrainingRequest request;
    request.cluster = variant.cluster;
    request.network = network_model(scenario);
    request.keep_timeline = keep_timeline || !scenario.faults.empty();  // a rehearsal plays the timeline
    for (size_t l = 0; l < training.layouts.size(); ++l) {
      request.configs.push_back(training.config_for(l, gpus_of(variant.cluster)));
      request.configs.back().allocator = variant.allocator;
    }
    if (progress) {
      progress(fmt::format("variant {}/{} ({}): simulating {} layouts", v + 1, scenario.variants.size(), variant.name,
                           request.configs.size()));
    }
    results.steps.push_back(sim::simulate_training(request, /*isolated=*/true));
    results.configs.push_back(request.configs);
  }
  return results;
}

namespace {

// The rehearsal of a variant's layout, or nullptr (no faults, or no such variant / layout).
const TrainingResults::Rehearsed* rehearsed(const Scenario& scenario, const TrainingResults& results,
                                            std::string_view variant, std::string_view layout) {
  const TrainingWorkload& training = training_of(scenario);
  for (size_t v = 0; v < results.rehearsals.size(); ++v) {
    if (scenario.variants[v].name != variant) continue;
    for (size_t l = 0; l < training.layouts.size() && l < results.rehearsals[v].size(); ++l) {
      if (training.layouts[l].layout.name == layout) return &results.rehearsals[v][l];
    }
  }
  return nullptr;
}

}  // namespace

void rehearse_training(const Scenario& scenario, TrainingResults& results, const std::string& out_dir,
                       bool keep_timeline) {
  if (scenario.faults.empty()) return;
  const TrainingWorkload& training = training_of(scenario);
  const bool one = scenario.variants.size() * training.layouts.size() == 1;
  const size_t capacity = scenario.outputs.fr_buffer_size.value_or(FrConfig{}.capacity);
  results.rehearsals.assign(scenario.variants.size(), {});
  for (size_t v = 0; v < scenario.variants.size(); ++v) {
    const ClusterVariant& variant = scenario.variants[v];
    for (size_t l = 0; l < training.layouts.size(); ++l) {
      sim::TrainingStepResult& step = results.steps[v][l];
      TrainingResults::Rehearsed& r = results.rehearsals[v].emplace_back();
      if (!step.ok) {
        r.not_rehearsed = "the layout does not run";
        continue;
      }
      const models::StepProgram program = models::build_step(results.configs[v][l], variant.cluster);
      for (const Fault& f : scenario.faults.faults) {
        const bool has = std::any_of(program.groups.begin(), program.groups.end(),
                                     [&](const models::CommGroup& g) { return fault_group_matches(f.group, g.name); });
        if (!has) r.not_rehearsed = fmt::format("the layout has no {} communicator", f.group);
      }
      if (!r.not_rehearsed.empty()) continue;
      r.rehearsal = rehearse_step(program, step.timeline, gpus_of(variant.cluster), scenario.faults.faults,
                                  scenario.recovery.watchdog_s, capacity);
      if (!keep_timeline) step.timeline.clear();
      if (out_dir.empty() || capacity == 0) continue;
      const std::filesystem::path dir =
          one ? std::filesystem::path(out_dir) / "fr"
              : std::filesystem::path(out_dir) / "fr" / variant.name / training.layouts[l].layout.name;
      const std::string prefix = (dir / "rank_").string();
      remove_dumps(prefix);
      write_dumps(r.rehearsal->dumps, prefix, scenario.outputs.dump_format.value_or(FrFormat::kPickle));
      r.dumps_dir = dir.string();
    }
  }
}

std::vector<TrainingExpectationOutcome> evaluate_training_expectations(const Scenario& scenario,
                                                                       const TrainingResults& results) {
  std::vector<TrainingExpectationOutcome> outcomes;
  for (const TrainingExpectation& e : scenario.expectations_of<TrainingExpectation>()) {
    TrainingExpectationOutcome outcome;
    outcome.expectation = e;
    if (e.backend && *e.backend != ScenarioBackend::kSim) {
      outcome.verdict = ExpectationVerdict::kSkip;
      outcome.detail = fmt::format("for backend {}", name(*e.backend));
      outcomes.push_back(std::move(outcome));
      continue;
    }
    const sim::TrainingStepResult* step = results.find(scenario, e.variant, e.layout);
    if (step == nullptr) fail(ErrorCode::kInvalidArgument, "no result for layout '{}' on '{}'", e.layout, e.variant);
    bool holds = true;
    std::string& detail = outcome.detail;
    if (e.culprit_ranks) {
      const TrainingResults::Rehearsed* r = rehearsed(scenario, results, e.variant, e.layout);
      if (r == nullptr || !r->rehearsal) {
        holds = false;
        detail = fmt::format("not rehearsed: {}", r == nullptr ? "no faults" : r->not_rehearsed);
      } else {
        const std::vector<int>& got = r->rehearsal->analysis.culprit_ranks;
        holds = got == *e.culprit_ranks;
        detail = fmt::format("flight-recorder culprit [{}] (expected [{}])", fmt::join(got, ", "),
                             fmt::join(*e.culprit_ranks, ", "));
      }
    }
    if (e.fits) {
      holds = step->ok == *e.fits;
      detail = step->ok ? fmt::format("fits ({} per GPU)", format_gigabytes(sim::memory_needed_bytes(*step)))
                        : fmt::format("does not run: {}", step->error);
    }
    const bool bounds = e.step_time_s.set() || e.achieved_mfu.set() || e.exposed_comm_s.set() || e.bubble_s.set() ||
                        e.memory_GB.set() || e.tokens_per_s_per_gpu.set() || e.speedup.set();
    if (bounds && !step->ok && !e.memory_GB.set()) {
      holds = false;
      if (detail.empty()) detail = fmt::format("does not run: {}", step->error);
    } else if (bounds) {
      holds = check_bound(e.memory_GB, sim::memory_needed_bytes(*step) / 1e9, "memory", "GB", detail) && holds;
      if (step->ok) {
        holds = check_bound(e.step_time_s, step->step_s, "step", "s", detail) && holds;
        holds = check_bound(e.achieved_mfu, step->achieved_mfu, "MFU", "", detail) && holds;
        holds = check_bound(e.exposed_comm_s, step->exposed_comm_s, "exposed communication", "s", detail) && holds;
        holds = check_bound(e.bubble_s, step->bubble_s, "bubble", "s", detail) && holds;
        holds = check_bound(e.tokens_per_s_per_gpu, step->tokens_per_s_per_gpu, "tokens/s/GPU", "", detail) && holds;
        if (e.relative_to) {
          const sim::TrainingStepResult* other = results.find(scenario, *e.relative_to, e.layout);
          if (other == nullptr || !other->ok) {
            holds = false;
            detail += fmt::format("{}the layout does not run on {}", detail.empty() ? "" : "; ", *e.relative_to);
          } else {
            holds = check_bound(e.speedup, other->step_s / step->step_s, fmt::format("speedup over {}", *e.relative_to),
                                "x", detail) &&
                    holds;
          }
        }
      }
    }
    outcome.verdict = holds ? ExpectationVerdict::kPass : ExpectationVerdict::kFail;
    outcomes.push_back(std::move(outcome));
  }
  return outcomes;
}

namespace {

bool any_layout_ran(const TrainingResults& results) {
  for (const auto& steps : results.steps) {
    if (std::any_of(steps.begin(), steps.end(), [](const sim::TrainingStepResult& s) { return s.ok; })) return true;
  }
  return false;
}

}  // namespace

bool training_passed(const TrainingResults& results, const std::vector<TrainingExpectationOutcome>& outcomes) {
  // Nothing ran and nothing was expected: a scenario that answers nothing is no pass.
  if (outcomes.empty() && !any_layout_ran(results)) return false;
  return std::none_of(outcomes.begin(), outcomes.end(),
                      [](const auto& o) { return o.verdict == ExpectationVerdict::kFail; });
}

std::string format_seconds(double seconds) {
  if (seconds >= 100) return fmt::format("{:.1f}", seconds);
  if (seconds >= 1) return fmt::format("{:.2f}", seconds);
  return fmt::format("{:.3f}", seconds);
}

std::string format_gigabytes(double bytes) { return fmt::format("{:.2f} GB", bytes / 1e9); }

std::string format_percent(double fraction) { return fmt::format("{:.1f}%", 100 * fraction); }

namespace {

// How many collectives per layout the report lists (results.json has sim::kTopCollectives).
constexpr size_t kReportedCollectives = 3;

// Decimal units, as bandwidths are: "1.71 GB", "134 MB", "16.8 MB".
std::string decimal_size(int64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (b >= 1e9) return fmt::format("{:.3g} GB", b / 1e9);
  if (b >= 1e6) return fmt::format("{:.3g} MB", b / 1e6);
  if (b >= 1e3) return fmt::format("{:.3g} kB", b / 1e3);
  return fmt::format("{} B", bytes);
}

std::string describe(const TrainingExpectation& e) {
  std::string out = fmt::format("{} {}", e.variant, e.layout);
  if (e.relative_to) out += fmt::format(" vs {}", *e.relative_to);
  return out;
}

// "80.1 GB" of a byte count, "-" when there is none.
std::string gigabytes_or_dash(double bytes) { return bytes > 0 ? format_gigabytes(bytes) : std::string("-"); }

std::string layout_table(const std::vector<sim::TrainingStepResult>& steps,
                         const std::vector<models::TrainingConfig>& configs) {
  std::string out = fmt::format(
      "{:<14} {:>3} {:>3} {:>3} {:>3} {:>3} {:>6} {:>9} {:>9} {:>10} {:>10} {:>6} {:>10} {:>9} {:>9} {:>9} {:>8} "
      "{:>7} {:>7} {:>10}\n",
      "layout", "tp", "pp", "vp", "cp", "ep", "dp", "micro", "recompute", "allocated", "reserved", "frag", "memory/GPU",
      "step (s)", "compute", "exposed", "bubble", "MFU", "TFLOP/s", "tok/s/GPU");
  for (size_t l = 0; l < steps.size(); ++l) {
    const sim::TrainingStepResult& s = steps[l];
    const models::TrainingConfig& c = configs[l];
    const models::StepMemoryResult& sm = s.step_memory;
    const std::string micro =
        s.derived.microbatches > 0 ? fmt::format("{}x{}", s.derived.microbatches, c.micro_batch) : std::string("-");
    out += fmt::format(
        "{:<14} {:>3} {:>3} {:>3} {:>3} {:>3} {:>6} {:>9} {:>9} {:>10} {:>10} {:>6} {:>10} ", s.layout, c.layout.tp,
        c.layout.pp, c.layout.vp, c.layout.cp, c.layout.ep, s.derived.dp > 0 ? std::to_string(s.derived.dp) : "-",
        micro, models::name(c.recompute),
        s.has_step_memory && !sm.oom ? gigabytes_or_dash(static_cast<double>(sm.peak_allocated_bytes)) : "-",
        s.has_step_memory && !sm.oom ? gigabytes_or_dash(static_cast<double>(sm.peak_reserved_bytes)) : "-",
        s.has_step_memory && !sm.oom ? format_percent(sm.fragmentation_at_peak) : "-",
        s.has_step_memory && !sm.oom ? gigabytes_or_dash(sm.total_bytes()) : "-");
    if (s.ok) {
      out += fmt::format("{:>9} {:>9} {:>9} {:>8} {:>7} {:>7.0f} {:>10.0f}\n", format_seconds(s.step_s),
                         format_seconds(s.compute_s), format_seconds(s.exposed_comm_s), format_seconds(s.bubble_s),
                         format_percent(s.achieved_mfu), s.model_tflops_per_gpu, s.tokens_per_s_per_gpu);
    } else {
      out += "does not run (below)\n";
    }
  }
  for (const sim::TrainingStepResult& s : steps) {
    if (!s.ok) out += fmt::format("  {}: {}\n", s.layout, s.error);
  }
  out +=
      "allocated = peak allocated of the step's memory timeline (busiest stage), reserved = its peak reserved under "
      "the allocator settings, frag = 1 - allocated/reserved at the moment reserved peaked (as tandem memory defines "
      "it), memory/GPU = reserved + CUDA context and NCCL buffers (what fits and memory_GB check)\n";
  out +=
      "memory per GPU, analytic (busiest stage): weights + gradients + optimizer + gathered FSDP units + activations "
      "+ logits + context/NCCL = total; the timeline's peak\n";
  for (const sim::TrainingStepResult& s : steps) {
    const models::MemoryBreakdown& m = s.memory;
    if (m.total_bytes() <= 0) continue;
    out += fmt::format("  {:<14} {:.1f} + {:.1f} + {:.1f} + {:.1f} + {:.1f} + {:.1f} + {:.1f} = {:.1f} GB", s.layout,
                       m.weights_bytes / 1e9, m.gradients_bytes / 1e9, m.optimizer_bytes / 1e9, m.unsharded_bytes / 1e9,
                       m.activations_bytes / 1e9, m.logits_bytes / 1e9, m.runtime_bytes / 1e9, m.total_bytes() / 1e9);
    if (s.has_step_memory && !s.step_memory.oom) {
      const models::StepMemoryResult& sm = s.step_memory;
      out += fmt::format(
          "; stage {}, allocated peaks in the {}, reserved in the {} ({} cudaMallocs/maps, allocator {})", sm.stage,
          sm.peak_phase, sm.peak_reserved_phase, sm.device_mallocs, models::describe(sm.settings));
    }
    out += "\n";
  }
  return out;
}

// --explain: each layout's activations on its busiest stage, tensor by tensor (saved_activations,
// the list the analytic sum and the timeline both use). Without full recompute every layer in flight
// keeps the whole set, so each tensor's share of the activations is its share of a layer's bytes;
// with it, each layer keeps its input and the set below lives once, for the layer being rebuilt.
std::string activations_explained(const std::vector<sim::TrainingStepResult>& steps,
                                  const std::vector<models::TrainingConfig>& configs) {
  std::string out = "activations tensor by tensor (--explain; docs/memory.md lists the sources), per token of a "
                    "microbatch on one rank, and their share on the busiest stage:\n";
  for (size_t l = 0; l < steps.size(); ++l) {
    const sim::TrainingStepResult& s = steps[l];
    const models::TrainingConfig& c = configs[l];
    if (s.memory.activations_bytes <= 0) continue;  // a layout that fits or not: both are worth explaining
    const double tp = c.layout.tp;
    const bool full = c.recompute == models::Recompute::kFull;
    out += fmt::format("  {}: {:.2f} GB of activations on stage {} ({}, tp {}{})\n", s.layout,
                       s.memory.activations_bytes / 1e9, s.stage, models::name(c.recompute), c.layout.tp,
                       full ? "; each layer in flight keeps its input, the set below lives once" : "");
    for (bool moe : {false, true}) {
      if (moe && !c.model.moe()) continue;
      const std::vector<models::SavedTensor> tensors = models::saved_activations(c, moe);
      double layer = 0;
      for (const models::SavedTensor& t : tensors) layer += t.bytes_per_token() / tp;
      if (c.model.moe()) out += fmt::format("    {} layers: {:.0f} B a token\n", moe ? "MoE" : "dense", layer);
      for (const models::SavedTensor& t : tensors) {
        const double bytes = t.bytes_per_token() / tp;
        const std::string share =
            full || c.model.moe() ? "" : fmt::format("  {:>8.2f} GB", s.memory.activations_bytes * bytes / layer / 1e9);
        const std::string shape = fmt::format("({:g} elements x {:g} B)", t.elements_per_token / tp, t.bytes_per_element);
        out += fmt::format("    {:<42} {:>9.0f} B a token {:<28}{}\n", t.what, bytes, shape, share);
      }
    }
  }
  return out;
}

std::string top_collectives(const std::vector<sim::TrainingStepResult>& steps) {
  std::string out = "collectives with the most exposed time (on the stage the breakdown is of):\n";
  for (const sim::TrainingStepResult& s : steps) {
    if (!s.ok) continue;
    for (size_t i = 0; i < s.top.size() && i < kReportedCollectives; ++i) {
      const models::ExposedComm& e = s.top[i];
      std::string how;
      for (const sim::CollectiveTiming& c : s.collectives) {
        if (c.collective == e.collective && c.bytes == e.bytes && c.group == e.group) {
          how = fmt::format("{} ranks, {}/{} {:.1f} GB/s busbw", c.ranks, sim::name(c.algorithm), models::name(c.protocol),
                            c.busbw_GBps);
          break;
        }
      }
      out += fmt::format("  {:<14} {:<28} {:>9} on {:<15} x{:<6} {:>8} s exposed of {:>8} s  ({})\n",
                         i == 0 ? s.layout : "", e.label, decimal_size(e.bytes), e.group, e.count,
                         format_seconds(e.exposed_s), format_seconds(e.total_s), how);
    }
  }
  return out;
}

// The faults rehearsed on each layout: who waits where, when the watchdog fires, the dumps and
// what `tandem fr analyze` makes of them.
std::string rehearsal_text(const TrainingWorkload& training, const std::vector<TrainingResults::Rehearsed>& rehearsals) {
  std::string out;
  for (size_t l = 0; l < rehearsals.size(); ++l) {
    const TrainingResults::Rehearsed& r = rehearsals[l];
    const std::string& layout = training.layouts[l].layout.name;
    if (!r.rehearsal) {
      out += fmt::format("rehearsal, {}: not rehearsed ({})\n", layout, r.not_rehearsed);
      continue;
    }
    const StepRehearsal& h = *r.rehearsal;
    out += fmt::format("rehearsal, {}: {}\n", layout, fmt::join(h.faults, "; "));
    if (h.first_wait_s < 0 && h.end_s > h.fault_free_end_s) {
      out += fmt::format("  every collective of the step completed, {} late: it ends at {} instead of {} (+{:.1f}%)\n",
                         duration_text(h.end_s - h.fault_free_end_s), duration_text(h.end_s),
                         duration_text(h.fault_free_end_s), 100 * (h.end_s / h.fault_free_end_s - 1));
    } else if (h.first_wait_s < 0) {
      out += "  every collective of the step completed: the faults stopped nothing\n";
    } else {
      out += fmt::format("  {} wait{} in collectives that cannot complete, the first from {} into the step in {}; the "
                         "watchdog fires at {}\n",
                         ranks_phrase(h.waiting_ranks), h.waiting_ranks.size() == 1 ? "s" : "", duration_text(h.first_wait_s),
                         h.first_stuck, duration_text(h.watchdog_fires_s));
    }
    if (!h.dead_ranks.empty()) out += fmt::format("  {} crashed: no dump\n", ranks_phrase(h.dead_ranks));
    out += fmt::format("  {} dumps{}\n", h.dumps.size(),
                       r.dumps_dir.empty() ? " (not written: run with --out DIR)"
                                           : fmt::format(" in {} (tandem fr analyze / tandem replay)", r.dumps_dir));
    out += fmt::format("  fr analyze: {}\n", h.analysis.verdict);
    if (!h.analysis.culprit_ranks.empty()) out += fmt::format("  culprit: {}\n", ranks_phrase(h.analysis.culprit_ranks));
  }
  return out;
}

}  // namespace

std::string format_training_report(const Scenario& scenario, const TrainingResults& results,
                                   const std::vector<TrainingExpectationOutcome>& outcomes, bool quiet, bool explain) {
  const TrainingWorkload& training = training_of(scenario);
  const models::TrainingConfig& base = training.base;
  std::string out;
  if (!quiet) {
    out += fmt::format("tandem run: {} ({})\n", scenario.name, scenario.file);
    if (!scenario.description.empty()) {
      std::string description = scenario.description;
      while (!description.empty() && description.back() == '\n') description.pop_back();
      out += description + "\n";
    }
    out += fmt::format("backend: sim (network model: {})\n", name(scenario.network));
    if (scenario.calibration) out += fmt::format("calibration: {}\n", profile_summary(*scenario.calibration));
    const std::string batch = training.batch_per_gpu
                                  ? fmt::format("{:g} sequences per GPU", *training.batch_per_gpu)
                                  : fmt::format("global batch {} ({:.2f} M tokens per step)", base.global_batch,
                                                static_cast<double>(base.global_batch) * base.seq_len / 1e6);
    out += fmt::format(
        "workload: training {} ({:.2f} B parameters, {} layers, d_model {}), seq_len {}, {}, {}, {}, collectives: {}\n",
        base.model.name, static_cast<double>(base.model.parameters()) / 1e9, base.model.layers, base.model.d_model,
        base.seq_len, batch, models::name(base.precision), models::describe_compute(base), base.algorithm);
    out +=
        "step = compute + exposed communication + pipeline bubble, on the busiest pipeline stage; MFU = model "
        "FLOPs (6N + 12Lds per token, N the active parameters without the embedding lookup) / (step x GPUs x bf16 "
        "peak); TFLOP/s = model FLOPs / (step x GPUs)\n";
    for (size_t v = 0; v < scenario.variants.size(); ++v) {
      const ClusterVariant& variant = scenario.variants[v];
      out += fmt::format("\n== {}: {}\n", variant.name, models::describe(variant.cluster));
      out += layout_table(results.steps[v], results.configs[v]);
      out += top_collectives(results.steps[v]);
      if (explain) out += activations_explained(results.steps[v], results.configs[v]);
      if (v < results.rehearsals.size()) out += rehearsal_text(training, results.rehearsals[v]);
    }
    if (scenario.variants.size() > 1) {
      out += "\n== comparison: step time (s) per layout, and the speedup over base\n";
      out += fmt::format("{:<14}", "layout");
      for (const ClusterVariant& variant : scenario.variants) out += fmt::format(" {:>18}", variant.name);
      out += '\n';
      for (size_t l = 0; l < training.layouts.size(); ++l) {
        const sim::TrainingStepResult& b = results.steps[0][l];
        out += fmt::format("{:<14}", b.layout);
        for (size_t v = 0; v < scenario.variants.size(); ++v) {
          const sim::TrainingStepResult& s = results.steps[v][l];
          std::string cell = "does not run";
          if (s.ok) {
            cell = format_seconds(s.step_s);
            if (v > 0 && b.ok) cell += fmt::format(" ({:.2f}x)", b.step_s / s.step_s);
          }
          out += fmt::format(" {:>18}", cell);
        }
        out += '\n';
      }
    }
  }
  size_t passed = 0, failed = 0, skipped = 0;
  if (!outcomes.empty()) out += "\n== expectations\n";
  for (const TrainingExpectationOutcome& o : outcomes) {
    out += fmt::format("  {}  {}: {}\n", name(o.verdict), describe(o.expectation), o.detail);
    passed += o.verdict == ExpectationVerdict::kPass;
    failed += o.verdict == ExpectationVerdict::kFail;
    skipped += o.verdict == ExpectationVerdict::kSkip;
  }
  if (!quiet) out += '\n';
  if (!any_layout_ran(results)) {
    out += "no layout ran on any cluster: each does not split the GPUs or does not fit (the reasons above)\n";
  }
  out += format_verdict_line(training_passed(results, outcomes), passed, failed, skipped, "sim");
  return out;
}

std::vector<std::string> training_csv_columns() {
  return {"variant",
          "layout",
          "gpus",
          "tp",
          "pp",
          "vp",
          "cp",
          "ep",
          "dp",
          "microbatches",
          "micro_batch",
          "recompute",
          "fits",
          "memory_GB",
          "step_s",
          "compute_s",
          "exposed_comm_s",
          "bubble_s",
          "achieved_mfu",
          "model_tflops_per_gpu",
          "tokens_per_s_per_gpu",
          "error"};
}

std::string training_results_csv(const Scenario& scenario, const TrainingResults& results) {
  std::string out = fmt::format("{}\n", fmt::join(training_csv_columns(), ","));
  for (size_t v = 0; v < results.steps.size(); ++v) {
    for (size_t l = 0; l < results.steps[v].size(); ++l) {
      const sim::TrainingStepResult& s = results.steps[v][l];
      const models::TrainingConfig& c = results.configs[v][l];
      out += fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},{:.4f},", scenario.variants[v].name, s.layout,
                         gpus_of(scenario.variants[v].cluster), c.layout.tp, c.layout.pp, c.layout.vp, c.layout.cp,
                         c.layout.ep, s.derived.dp, s.derived.microbatches, c.micro_batch, models::name(c.recompute),
                         s.ok, sim::memory_needed_bytes(s) / 1e9);
      if (s.ok) {
        out += fmt::format("{:.6g},{:.6g},{:.6g},{:.6g},{:.6g},{:.6g},{:.6g},", s.step_s, s.compute_s, s.exposed_comm_s,
                           s.bubble_s, s.achieved_mfu, s.model_tflops_per_gpu, s.tokens_per_s_per_gpu);
      } else {
        out += ",,,,,,,";
      }
      out += csv_field(s.error) + "\n";
    }
  }
  return out;
}

nlohmann::json training_results_json(const Scenario& scenario, const TrainingResults& results,
                                     const std::vector<TrainingExpectationOutcome>& outcomes) {
  const TrainingWorkload& training = training_of(scenario);
  nlohmann::json variants = nlohmann::json::array();
  for (size_t v = 0; v < scenario.variants.size(); ++v) {
    nlohmann::json steps = results.steps[v];
    for (size_t l = 0; l < steps.size(); ++l) {
      const models::TrainingConfig& c = results.configs[v][l];
      steps[l]["config"] = {{"tp", c.layout.tp},
                            {"pp", c.layout.pp},
                            {"vp", c.layout.vp},
                            {"cp", c.layout.cp},
                            {"ep", c.layout.ep},
                            {"etp", c.layout.etp},
                            {"tp_overlap", c.layout.tp_overlap},
                            {"sharding", std::string(models::name(c.layout.sharding))},
                            {"global_batch", c.global_batch},
                            {"micro_batch", c.micro_batch},
                            {"recompute", std::string(models::name(c.recompute))}};
    }
    for (size_t l = 0; v < results.rehearsals.size() && l < results.rehearsals[v].size(); ++l) {
      const TrainingResults::Rehearsed& r = results.rehearsals[v][l];
      if (!r.rehearsal) {
        steps[l]["rehearsal"] = {{"not_rehearsed", r.not_rehearsed}};
        continue;
      }
      const StepRehearsal& h = *r.rehearsal;
      steps[l]["rehearsal"] = {{"faults", h.faults},
                               {"waiting_ranks", h.waiting_ranks},
                               {"dead_ranks", h.dead_ranks},
                               {"first_wait_s", h.first_wait_s},
                               {"watchdog_fires_s", h.watchdog_fires_s},
                               {"first_stuck", h.first_stuck},
                               {"fault_free_end_s", h.fault_free_end_s},
                               {"end_s", h.end_s},
                               {"dumps", h.dumps.size()},
                               {"dumps_dir", r.dumps_dir},
                               {"verdict", h.analysis.verdict},
                               {"culprit_ranks", h.analysis.culprit_ranks},
                               {"root_ranks", h.analysis.root_ranks}};
    }
    variants.push_back({{"name", scenario.variants[v].name},
                        {"cluster", cluster_json(scenario.variants[v].cluster)},
                        {"allocator", models::describe(scenario.variants[v].allocator)},
                        {"layouts", steps}});
  }
  nlohmann::json expectations = nlohmann::json::array();
  for (const TrainingExpectationOutcome& o : outcomes) {
    expectations.push_back({{"variant", o.expectation.variant},
                            {"layout", o.expectation.layout},
                            {"verdict", std::string(name(o.verdict))},
                            {"detail", o.detail}});
  }
  const models::TrainingConfig& base = training.base;
  return {{"tandem_results", kResultsFormatVersion},
          {"scenario",
           {{"file", scenario.file},
            {"name", scenario.name},
            {"description", scenario.description},
            {"network", std::string(name(scenario.network))}}},
          {"workload",
           {{"type", "training"},
            {"model", base.model.name},
            {"parameters", base.model.parameters()},
            {"seq_len", base.seq_len},
            {"precision", std::string(models::name(base.precision))},
            {"kernels", std::string(models::name(base.kernels))},
            {"attention", std::string(models::name(models::resolved(base.attention, base.kernels)))},
            {"grad_accumulation", std::string(models::name(base.grad_accumulation))},
            {"mfu", base.mfu ? nlohmann::json(*base.mfu) : nlohmann::json(nullptr)},
            {"algorithm", base.algorithm}}},
          {"variants", variants},
          {"expectations", expectations},
          {"passed", training_passed(results, outcomes)}};
}

}  // namespace tandem::app
