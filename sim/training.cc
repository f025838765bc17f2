#include "sim/training.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "core/algorithms.h"
#include "core/error.h"
#include "sim/isolated.h"
#include "sim/protocol.h"
#include "sim/tuner.h"

namespace tandem::sim {
namespace {

using nlohmann::json;

class StepSimulator {
 public:
  StepSimulator(const models::ClusterSpec& cluster, const NetworkModel& network)
      : cluster_(cluster), timer_(cluster, network) {}

  void keep_timeline(bool keep) { keep_timeline_ = keep; }
  void memory_all_microbatches(bool all) { memory_all_microbatches_ = all; }

  TrainingStepResult run(const models::TrainingConfig& config) {
    TrainingStepResult out;
    out.layout = config.layout.name;
    const int gpus = cluster_.nodes * cluster_.gpus_per_node;
    try {
      out.derived = models::derive(config, gpus, cluster_.gpus_per_node);
      out.memory = models::memory_per_gpu(config, out.derived);
      // The analytic sum first: what cannot fit even without the allocator's slack gets its advice.
      models::check_fits(config, out.derived, cluster_.gpu);
      out.step_memory =
          models::step_memory(config, out.derived, cluster_.gpu, config.allocator, memory_all_microbatches_);
      out.has_step_memory = true;
      if (const auto& oom = out.step_memory.oom) {
        fail(ErrorCode::kUnsupported,
             "{} with layout '{}' on {} GPUs runs out of memory: a {:.2f} GB request in the {} failed (allocator {}; "
             "the allocator may use {:.1f} GB of the {}'s {:.0f} GB, the rest is CUDA context and NCCL buffers; "
             "allocated {:.1f} GB, reserved {:.1f} GB before it)",
             config.model.name, config.layout.name, gpus, static_cast<double>(oom->bytes) / 1e9, oom->phase,
             models::describe(config.allocator), (cluster_.gpu.memory_bytes - models::kRuntimeReserveBytes) / 1e9,
             cluster_.gpu.name, cluster_.gpu.memory_bytes / 1e9,
             static_cast<double>(out.step_memory.peak_allocated_bytes) / 1e9,
             static_cast<double>(out.step_memory.peak_reserved_bytes) / 1e9);
      }
      const models::StepProgram program = models::build_step(config, cluster_);
      std::vector<double> comm_seconds(program.comms.size(), 0.0);
      for (size_t c = 0; c < program.comms.size(); ++c) {
        const CollectiveTiming timing = time_collective(program, program.comms[c], config.algorithm);
        comm_seconds[c] = timing.seconds;
        out.collectives.push_back(timing);
      }
      std::vector<double> durations;
      durations.reserve(program.tasks.size());
      for (const models::StepTask& task : program.tasks) {
        durations.push_back(task.kind == models::TaskKind::kComm
                                ? comm_seconds[static_cast<size_t>(task.comm)]
                                : models::compute_seconds(task, cluster_.gpu, config.precision, config.mfu));
      }
      const models::StepBreakdown breakdown = models::run_timeline(program, durations);
      out.step_s = breakdown.step_s;
      out.stage = breakdown.stage;
      if (keep_timeline_) {
        out.streams = program.streams;
        out.labels = program.labels;
        for (size_t t = 0; t < program.tasks.size(); ++t) {
          const models::StepTask& task = program.tasks[t];
          out.timeline.push_back({task.stream, task.label, breakdown.times[t].start_s, breakdown.times[t].end_s,
                                  task.kind == models::TaskKind::kComm});
        }
      }
      out.compute_s = breakdown.compute_s;
      out.exposed_comm_s = breakdown.exposed_comm_s;
      out.bubble_s = breakdown.bubble_s;
      out.top.assign(breakdown.top.begin(),
                     breakdown.top.begin() + static_cast<ptrdiff_t>(std::min(kTopCollectives, breakdown.top.size())));
      out.achieved_mfu = program.model_flops / (out.step_s * gpus * cluster_.gpu.bf16_flops);
      out.tokens_per_s_per_gpu = program.tokens / out.step_s / gpus;
      out.model_tflops_per_gpu = program.model_flops / (out.step_s * gpus) / 1e12;
      out.ok = true;
    } catch (const Error& e) {
      if (e.code() != ErrorCode::kInvalidArgument && e.code() != ErrorCode::kUnsupported) throw;
      out.ok = false;
      out.error = e.what();
    }
    return out;
  }

 private:
  CollectiveTiming time_collective(const models::StepProgram& program, const models::CommOp& op,
                                   const std::string& algorithm) {
    return timer_.time(op.collective, op.bytes, program.groups[static_cast<size_t>(op.group)],
                       parse_sim_algorithm_or_auto(algorithm));
  }

  models::ClusterSpec cluster_;
  CollectiveTimer timer_;
  bool keep_timeline_ = false;
  bool memory_all_microbatches_ = true;
};

std::vector<TrainingStepResult> run_in_process(const TrainingRequest& request) {
  StepSimulator simulator(request.cluster, request.network);
  simulator.keep_timeline(request.keep_timeline);
  simulator.memory_all_microbatches(request.memory_all_microbatches);
  std::vector<TrainingStepResult> results;
  for (const models::TrainingConfig& config : request.configs) results.push_back(simulator.run(config));
  return results;
}

json exposed_comm_json(const models::ExposedComm& e) {
  return {{"label", e.label}, {"collective", name(e.collective)}, {"bytes", e.bytes},
          {"group", e.group}, {"exposed_s", e.exposed_s},         {"total_s", e.total_s},
          {"count", e.count}};
}

models::ExposedComm exposed_comm_from_json(const json& e) {
  models::ExposedComm x;
  x.label = e.at("label").get<std::string>();
  x.collective = parse_collective(e.at("collective").get<std::string>());
  x.bytes = e.at("bytes").get<int64_t>();
  x.group = e.at("group").get<std::string>();
  x.exposed_s = e.at("exposed_s").get<double>();
  x.total_s = e.at("total_s").get<double>();
  x.count = e.at("count").get<int>();
  return x;
}

}  // namespace

void to_json(json& j, const TrainingStepResult& r) {
  json top = json::array(), layers = json::array();
  for (const auto& e : r.top) top.push_back(exposed_comm_json(e));
  for (int l : r.derived.layers_of_stage) layers.push_back(l);
  const models::MemoryBreakdown& m = r.memory;
  j = {{"ok", r.ok},
       {"error", r.error},
       {"layout", r.layout},
       {"derived",
        {{"gpus", r.derived.gpus},
         {"dp", r.derived.dp},
         {"microbatches", r.derived.microbatches},
         {"shard_group", r.derived.shard_group},
         {"replicas", r.derived.replicas},
         {"layers_of_stage", layers}}},
       {"memory",
        {{"weights", m.weights_bytes},
         {"gradients", m.gradients_bytes},
         {"optimizer", m.optimizer_bytes},
         {"gathered", m.unsharded_bytes},
         {"activations", m.activations_bytes},
         {"logits", m.logits_bytes},
         {"runtime", m.runtime_bytes}}},
       {"step_memory",
        {{"present", r.has_step_memory},
         {"settings", models::describe(r.step_memory.settings)},
         {"stage", r.step_memory.stage},
         {"peak_allocated", r.step_memory.peak_allocated_bytes},
         {"peak_reserved", r.step_memory.peak_reserved_bytes},
         {"allocated_at_peak_reserved", r.step_memory.allocated_at_peak_reserved_bytes},
         {"fragmentation_at_peak", r.step_memory.fragmentation_at_peak},
         {"peak_phase", r.step_memory.peak_phase},
         {"peak_reserved_phase", r.step_memory.peak_reserved_phase},
         {"device_mallocs", r.step_memory.device_mallocs},
         {"allocations", r.step_memory.allocations},
         {"runtime", r.step_memory.runtime_bytes},
         {"oom", r.step_memory.oom ? json{{"bytes", r.step_memory.oom->bytes},
                                          {"stream", r.step_memory.oom->stream},
                                          {"phase", r.step_memory.oom->phase}}
                                   : json(nullptr)}}},
       {"step_s", r.step_s},
       {"stage", r.stage},
       {"compute_s", r.compute_s},
       {"exposed_comm_s", r.exposed_comm_s},
       {"bubble_s", r.bubble_s},
       {"achieved_mfu", r.achieved_mfu},
       {"tokens_per_s_per_gpu", r.tokens_per_s_per_gpu},
       {"model_tflops_per_gpu", r.model_tflops_per_gpu},
       {"top", top},
       {"collectives", r.collectives}};
  // The timeline only when it was kept: it is large.
  if (!r.timeline.empty()) {
    json timeline = json::array();
    for (const TimelineSlice& t : r.timeline) timeline.push_back({t.stream, t.label, t.start_s, t.end_s, t.comm});
    j["streams"] = r.streams;
    j["labels"] = r.labels;
    j["timeline"] = timeline;
  }
}

void from_json(const json& j, TrainingStepResult& r) {
  r = TrainingStepResult{};
  r.ok = j.at("ok").get<bool>();
  r.error = j.at("error").get<std::string>();
  r.layout = j.at("layout").get<std::string>();
  const json& d = j.at("derived");
  r.derived.gpus = d.at("gpus").get<int>();
  r.derived.dp = d.at("dp").get<int>();
  r.derived.microbatches = d.at("microbatches").get<int>();
  r.derived.shard_group = d.at("shard_group").get<int>();
  r.derived.replicas = d.at("replicas").get<int>();
  r.derived.layers_of_stage = d.at("layers_of_stage").get<std::vector<int>>();
  const json& m = j.at("memory");
  r.memory.weights_bytes = m.at("weights").get<double>();
  r.memory.gradients_bytes = m.at("gradients").get<double>();
  r.memory.optimizer_bytes = m.at("optimizer").get<double>();
  r.memory.unsharded_bytes = m.at("gathered").get<double>();
  r.memory.activations_bytes = m.at("activations").get<double>();
  r.memory.logits_bytes = m.at("logits").get<double>();
  r.memory.runtime_bytes = m.at("runtime").get<double>();
  const json& sm = j.at("step_memory");
  r.has_step_memory = sm.at("present").get<bool>();
  const std::string settings = sm.at("settings").get<std::string>();
  r.step_memory.settings = settings == "default" ? models::AllocatorSettings{} : models::parse_alloc_conf(settings);
  r.step_memory.stage = sm.at("stage").get<int>();
  r.step_memory.peak_allocated_bytes = sm.at("peak_allocated").get<uint64_t>();
  r.step_memory.peak_reserved_bytes = sm.at("peak_reserved").get<uint64_t>();
  r.step_memory.allocated_at_peak_reserved_bytes = sm.at("allocated_at_peak_reserved").get<uint64_t>();
  r.step_memory.fragmentation_at_peak = sm.at("fragmentation_at_peak").get<double>();
  r.step_memory.peak_phase = sm.at("peak_phase").get<std::string>();
  r.step_memory.peak_reserved_phase = sm.at("peak_reserved_phase").get<std::string>();
  r.step_memory.device_mallocs = sm.at("device_mallocs").get<int64_t>();
  r.step_memory.allocations = sm.at("allocations").get<int64_t>();
  r.step_memory.runtime_bytes = sm.at("runtime").get<double>();
  if (const json& oom = sm.at("oom"); !oom.is_null()) {
    r.step_memory.oom = models::StepMemoryOom{oom.at("bytes").get<uint64_t>(), oom.at("stream").get<int64_t>(),
                                              oom.at("phase").get<std::string>()};
  }
  r.step_s = j.at("step_s").get<double>();
  r.stage = j.at("stage").get<int>();
  r.compute_s = j.at("compute_s").get<double>();
  r.exposed_comm_s = j.at("exposed_comm_s").get<double>();
  r.bubble_s = j.at("bubble_s").get<double>();
  r.achieved_mfu = j.at("achieved_mfu").get<double>();
  r.tokens_per_s_per_gpu = j.at("tokens_per_s_per_gpu").get<double>();
  r.model_tflops_per_gpu = j.at("model_tflops_per_gpu").get<double>();
  for (const json& e : j.at("top")) r.top.push_back(exposed_comm_from_json(e));
  r.collectives = j.at("collectives").get<std::vector<CollectiveTiming>>();
  r.streams = j.value("streams", std::vector<std::string>{});
  r.labels = j.value("labels", std::vector<std::string>{});
  for (const json& t : j.value("timeline", json::array())) {
    r.timeline.push_back(
        {t.at(0).get<int>(), t.at(1).get<int>(), t.at(2).get<double>(), t.at(3).get<double>(), t.at(4).get<bool>()});
  }
}

double memory_needed_bytes(const TrainingStepResult& result) {
  if (result.has_step_memory && !result.step_memory.oom) return result.step_memory.total_bytes();
  return result.memory.total_bytes();
}

std::vector<TrainingStepResult> simulate_training(const TrainingRequest& request, bool isolated) {
  if (request.network.fidelity == Fidelity::kPacket) {
    fail(ErrorCode::kUnsupported, "training steps run on the fluid or ideal network model, not packet (ns-3)");
  }
  if (!isolated) return run_in_process(request);
  return run_isolated([&] { return run_in_process(request); });
}

}  // namespace tandem::sim
