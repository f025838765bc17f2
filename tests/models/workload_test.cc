// The training-workload model: parameter counts of the published models, the bytes a step moves
// against the worked figures of shared/docs/workloads-reliability.md §1, memory, and the timeline's
// accounting (compute + exposed communication + bubble = the step).
#include "models/workload.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <numeric>

#include "core/error.h"

namespace tandem::models {
namespace {

TEST(Transformer, ParameterCountsMatchThePublishedModels) {
  EXPECT_EQ(transformer_preset("llama3-8b").parameters(), 8'030'261'248);
  EXPECT_EQ(transformer_preset("llama3-70b").parameters(), 70'553'706'496);
  EXPECT_EQ(transformer_preset("llama3-405b").parameters(), 405'853'388'800);
  // One 70B layer in bf16 is one FSDP unit: 1.71 GB.
  EXPECT_NEAR(2.0 * static_cast<double>(transformer_preset("llama3-70b").layer_parameters()), 1.71e9, 0.005e9);
  EXPECT_THROW(transformer_preset("gpt-5"), Error);
}

TrainingConfig config_of(const std::string& model, ParallelLayout layout, int global_batch = 128) {
  TrainingConfig c;
  c.model = transformer_preset(model);
  c.layout = std::move(layout);
  c.global_batch = global_batch;
  c.recompute = Recompute::kFull;
  return c;
}

ClusterSpec h100s(int nodes) {
  ClusterSpec spec = cluster_preset("dgx-h100");
  spec.nodes = nodes;
  return spec;
}

// Sum of nccl-tests sizes per (label) over the stage-0 tasks of a step.
std::map<std::string, double> bytes_by_label(const StepProgram& p, int stage) {
  std::map<std::string, double> out;
  for (const StepTask& t : p.tasks) {
    if (t.kind != TaskKind::kComm || t.stage != stage) continue;
    out[p.labels[static_cast<size_t>(t.label)]] += static_cast<double>(p.comms[static_cast<size_t>(t.comm)].bytes);
  }
  return out;
}

TEST(StepProgram, FsdpOver64MovesThreeTimesTheParametersPerStep) {
  // §1.4: AG in forward, AG again in backward, RS of gradients: 3 * (63/64) * 2P bytes per GPU.
  const TrainingConfig c = config_of("llama3-70b", {"fsdp", 1, 1, Sharding::kFsdp, 0}, 64);
  const StepProgram p = build_step(c, h100s(8));
  const double P = static_cast<double>(c.model.parameters());
  const auto bytes = bytes_by_label(p, 0);
  // nccl-tests sizes are the gathered totals; a ring sends (n-1)/n of them per GPU.
  const double per_gpu = (bytes.at("FSDP all_gather (fwd)") + bytes.at("FSDP all_gather (bwd)") +
                          bytes.at("FSDP reduce_scatter (grads)")) *
                         63.0 / 64.0;
  EXPECT_NEAR(per_gpu, 3 * 63.0 / 64.0 * 2 * P, 1e6);
  EXPECT_NEAR(per_gpu / 1e9, 417, 1);
  ASSERT_EQ(p.groups.size(), 1u);
  EXPECT_EQ(p.groups[0].name, "fsdp");
  EXPECT_EQ(p.groups[0].size(), 64);
  EXPECT_EQ(p.groups[0].nodes, 8);
}

TEST(StepProgram, TensorParallelTrafficPerLayerAndSequence) {
  // §1.4: TP=8 with sequence parallelism: 4 AG + 4 RS of b*s*h*2 bytes per layer and sequence in
  // forward and backward (0.94 GB per GPU with (n-1)/n), 4 more of each with full recompute.
  TrainingConfig c = config_of("llama3-70b", {"tp8-pp4", 8, 4, Sharding::kZero1, 0}, 128);
  c.recompute = Recompute::kNone;
  const StepProgram p = build_step(c, h100s(8));
  const double activation = 8192.0 * 8192 * 2;  // 134 MB
  EXPECT_NEAR(activation / 1e6, 134, 0.5);
  const auto bytes = bytes_by_label(p, 0);
  const DerivedLayout d = derive(c, 64, 8);
  EXPECT_EQ(d.dp, 2);
  EXPECT_EQ(d.microbatches, 64);
  const double layers = d.layers_of_stage[0];
  const double per_layer_seq = (bytes.at("TP all_gather") + bytes.at("TP reduce_scatter")) / layers / d.microbatches;
  EXPECT_DOUBLE_EQ(per_layer_seq, 8 * activation);
  EXPECT_NEAR(per_layer_seq * 7 / 8 / 1e9, 0.94, 0.005);
  c.recompute = Recompute::kFull;
  const auto with_recompute = bytes_by_label(build_step(c, h100s(8)), 0);
  EXPECT_DOUBLE_EQ((with_recompute.at("TP all_gather") + with_recompute.at("TP reduce_scatter")) / layers / 64,
                   12 * activation);
  // Pipeline sends: one activation per microbatch per boundary and TP rank (sequence-sharded).
  EXPECT_DOUBLE_EQ(bytes.at("PP send (activations)"), 64 * activation / 8);
}

TEST(StepProgram, GroupsArePlacedTensorFirstThenDataThenStage) {
  const TrainingConfig c = config_of("llama3-70b", {"tp8-pp4", 8, 4, Sharding::kZero1, 0}, 128);
  const StepProgram p = build_step(c, h100s(8));
  std::map<std::string, const CommGroup*> by_name;
  for (const CommGroup& g : p.groups) by_name[g.name] = &g;
  ASSERT_TRUE(by_name.count("tp") && by_name.count("dp") && by_name.count("pp0-1"));
  EXPECT_EQ(by_name["tp"]->instances.size(), 8u);  // one per node
  EXPECT_EQ(by_name["tp"]->instances[1], (std::vector<int>{8, 9, 10, 11, 12, 13, 14, 15}));
  EXPECT_EQ(by_name["dp"]->instances[0], (std::vector<int>{0, 8}));  // nodes 0 and 1, one rail
  EXPECT_EQ(by_name["dp"]->nodes, 2);
  EXPECT_EQ(by_name["pp0-1"]->instances[0], (std::vector<int>{0, 16}));
  EXPECT_EQ(by_name["pp0-1"]->instances.size(), 16u);
}

TEST(Memory, Llama70bOn64H100) {
  // ZeRO-3 over 64: weights + gradients + optimizer = 16 B/param / 64 = 17.6 GB (§1.3).
  const TrainingConfig c = config_of("llama3-70b", {"fsdp", 1, 1, Sharding::kFsdp, 0}, 64);
  const DerivedLayout d = derive(c, 64, 8);
  const MemoryBreakdown m = memory_per_gpu(c, d);
  EXPECT_NEAR((m.weights_bytes + m.gradients_bytes + m.optimizer_bytes) / 1e9, 17.6, 0.1);
  EXPECT_LT(m.total_bytes(), 80e9);
  // Without recompute the activations of 80 layers do not fit, and the error says what would help.
  TrainingConfig no_recompute = c;
  no_recompute.recompute = Recompute::kNone;
  try {
    check_fits(no_recompute, d, h100s(8).gpu);
    FAIL() << "expected a memory error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("recompute: full"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("80 GB"), std::string::npos) << e.what();
  }
  // DDP of 70B cannot fit anywhere: 16 B/param replicated.
  const TrainingConfig ddp = config_of("llama3-70b", {"ddp", 1, 1, Sharding::kNone, 0}, 64);
  EXPECT_THROW(check_fits(ddp, derive(ddp, 64, 8), h100s(8).gpu), Error);
}

TEST(Layout, BadLayoutsAreOneClearError) {
  auto message = [](const TrainingConfig& c, int gpus) {
    try {
      derive(c, gpus, 8);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(config_of("llama3-70b", {"x", 3, 1, Sharding::kFsdp, 0}), 64).find("tp x pp x cp = 3"),
            std::string::npos);
  EXPECT_NE(message(config_of("llama3-70b", {"x", 16, 1, Sharding::kFsdp, 0}), 64).find("inside a node"),
            std::string::npos);
  EXPECT_NE(message(config_of("llama3-70b", {"x", 1, 1, Sharding::kFsdp, 0}, 100), 64).find("global_batch 100"),
            std::string::npos);
  EXPECT_NE(message(config_of("llama3-70b", {"x", 1, 1, Sharding::kHsdp, 3}), 64).find("shard_group 3"),
            std::string::npos);
  TrainingConfig unfused_cp = config_of("llama3-70b", {"x", 8, 1, Sharding::kFsdp, 0});
  unfused_cp.layout.cp = 2;
  unfused_cp.attention = AttentionImpl::kUnfused;
  EXPECT_NE(message(unfused_cp, 64).find("attention 'unfused' needs cp = 1"), std::string::npos);
}

// The timeline with simulated-looking durations: every second of the reported stage is compute,
// exposed communication or bubble.
void expect_accounted(const StepProgram& p, const std::vector<double>& durations) {
  const StepBreakdown b = run_timeline(p, durations);
  EXPECT_NEAR(b.compute_s + b.exposed_comm_s + b.bubble_s, b.step_s, 1e-9 * b.step_s);
  double exposed = 0;
  for (const ExposedComm& e : b.top) {
    EXPECT_LE(e.exposed_s, e.total_s + 1e-12);
    exposed += e.exposed_s;
  }
  EXPECT_NEAR(exposed, b.exposed_comm_s, 1e-9 * b.step_s);
}

std::vector<double> durations_for(const StepProgram& p, double comm_s_per_gb) {
  std::vector<double> out;
  const GpuSpec gpu = cluster_preset("dgx-h100").gpu;
  for (const StepTask& t : p.tasks) {
    out.push_back(t.kind == TaskKind::kComm
                      ? static_cast<double>(p.comms[static_cast<size_t>(t.comm)].bytes) / 1e9 * comm_s_per_gb
                      : compute_seconds(t, gpu, Precision::kBF16, 0.4));
  }
  return out;
}

TEST(Timeline, FsdpOverlapsGathersWithCompute) {
  const TrainingConfig c = config_of("llama3-70b", {"fsdp", 1, 1, Sharding::kFsdp, 0}, 64);
  const StepProgram p = build_step(c, h100s(8));
  // Fast network: almost everything hides behind compute; only the first gather is exposed.
  const auto fast = durations_for(p, 0.001);
  const StepBreakdown b = run_timeline(p, fast);
  EXPECT_LT(b.exposed_comm_s, 0.01 * b.step_s);
  EXPECT_DOUBLE_EQ(b.bubble_s, 0);
  expect_accounted(p, fast);
  // Slow network: communication dominates and shows as exposed, led by the gathers.
  const auto slow = durations_for(p, 1.0);
  const StepBreakdown s = run_timeline(p, slow);
  EXPECT_GT(s.exposed_comm_s, 0.3 * s.step_s);
  EXPECT_GT(s.step_s, b.step_s);
  expect_accounted(p, slow);
  // Compute at 40% MFU: model FLOPs (6N + 12Lds) * tokens / 64 GPUs, plus one recomputed forward.
  const double tokens = 64.0 * 8192;
  // §1.2: 6N + 12Lds = 488 GFLOP/token with every parameter; the input embedding (a lookup) left
  // out, 481.5.
  EXPECT_NEAR((6.0 * 70.553706496e9 + 12.0 * 80 * 8192 * 8192) / 1e9, 488, 0.5);
  const double model_flops = tokens * (6.0 * (70.553706496e9 - 128256.0 * 8192) + 12.0 * 80 * 8192 * 8192);
  EXPECT_NEAR(p.model_flops / model_flops, 1.0, 1e-9);
  EXPECT_NEAR(model_flops / tokens / 1e9, 481.5, 0.5);
  const double expected_compute = model_flops * 4.0 / 3.0 / 64 / (989e12 * 0.4);
  EXPECT_NEAR(b.compute_s / expected_compute, 1.0, 0.03);
}

TEST(Timeline, PipelineBubbleOf1F1B) {
  // pp stages, m microbatches, no communication: the bubble is (pp - 1) / m of the ideal time.
  TrainingConfig c = config_of("llama3-70b", {"tp8-pp4", 8, 4, Sharding::kZero1, 0}, 32);
  c.recompute = Recompute::kNone;
  const StepProgram p = build_step(c, h100s(8));
  std::vector<double> durations = durations_for(p, 0.0);
  const StepBreakdown b = run_timeline(p, durations);
  const DerivedLayout d = derive(c, 64, 8);
  ASSERT_EQ(d.microbatches, 16);
  // Stages differ a little (embedding on the first, the head on the last), so the bound is loose.
  const double ideal = b.compute_s;
  EXPECT_GT(b.bubble_s, 0.8 * ideal * 3.0 / 16);
  EXPECT_LT(b.bubble_s, 1.5 * ideal * 3.0 / 16);
  EXPECT_DOUBLE_EQ(b.exposed_comm_s, 0);
  expect_accounted(p, durations);
}

TEST(Timeline, EveryLayoutKindAccountsForItsStep) {
  const std::vector<ParallelLayout> layouts{
      {"ddp", 1, 1, Sharding::kNone, 0},         {"zero1", 1, 1, Sharding::kZero1, 0},
      {"fsdp", 1, 1, Sharding::kFsdp, 0},        {"hsdp", 1, 1, Sharding::kHsdp, 0},
      {"tp2-hsdp", 2, 1, Sharding::kHsdp, 2},    {"tp4-pp2", 4, 2, Sharding::kZero1, 0},
      {"tp2-pp3-fsdp", 2, 3, Sharding::kFsdp, 0}};
  for (const ParallelLayout& layout : layouts) {
    SCOPED_TRACE(layout.name);
    TrainingConfig c = config_of("llama3-8b", layout, layout.pp == 3 ? 48 : 32);
    c.model = {"small", 12, 2048, 8192, 16, 8, 32000, true};  // DDP must fit: 1.1 B parameters
    c.seq_len = 2048;
    ClusterSpec cluster = h100s(layout.pp == 3 ? 3 : 2);
    const StepProgram p = build_step(c, cluster);
    for (double speed : {0.0, 0.05, 2.0}) expect_accounted(p, durations_for(p, speed));
  }
}

TEST(Timeline, DurationsMustMatchTheTasks) {
  const StepProgram p = build_step(config_of("llama3-8b", {"fsdp", 1, 1, Sharding::kFsdp, 0}, 8), h100s(1));
  EXPECT_THROW(run_timeline(p, {1.0}), Error);
}

}  // namespace
}  // namespace tandem::models

namespace tandem::models {
namespace {

TEST(Timeline, Fp8HalvesTheMatmulTimeAndA100HasNone) {
  const StepProgram p = build_step(config_of("llama3-8b", {"fsdp", 1, 1, Sharding::kFsdp, 0}, 8), h100s(1));
  const GpuSpec h100 = cluster_preset("dgx-h100").gpu;
  double bf16 = 0, fp8 = 0;
  for (const StepTask& t : p.tasks) {
    if (t.kind != TaskKind::kCompute || t.flops == 0) continue;
    bf16 += compute_seconds(t, h100, Precision::kBF16, 0.4);
    fp8 += compute_seconds(t, h100, Precision::kFP8, 0.4);
  }
  EXPECT_NEAR(fp8 / bf16, 989.0 / 1978.9, 1e-3);
  EXPECT_THROW(compute_seconds(p.tasks.front(), cluster_preset("hgx-a100").gpu, Precision::kFP8, 0.4), Error);
}

TEST(Timeline, InterleavingShrinksTheBubbleByVp) {
  // Megatron's interleaved 1F1B: the bubble is (pp - 1) / (vp x m) of the ideal time, not
  // (pp - 1) / m, paid for with vp times the pipeline sends.
  auto bubble_of = [](int vp) {
    TrainingConfig c = config_of("llama3-70b", {"tp8-pp4", 8, 4, Sharding::kZero1, 0}, 32);
    c.recompute = Recompute::kNone;
    c.layout.vp = vp;
    const StepProgram p = build_step(c, h100s(8));
    const std::vector<double> durations = durations_for(p, 0.0);
    expect_accounted(p, durations);
    int sends = 0;
    for (const StepTask& t : p.tasks) sends += t.kind == TaskKind::kComm && p.labels[static_cast<size_t>(t.label)] == "PP send (activations)";
    return std::pair{run_timeline(p, durations), sends};
  };
  const auto [plain, plain_sends] = bubble_of(1);
  const auto [interleaved, interleaved_sends] = bubble_of(5);
  EXPECT_NEAR(interleaved.compute_s, plain.compute_s, 1e-9 * plain.compute_s);
  EXPECT_GT(interleaved.bubble_s, 0.8 * plain.compute_s * 3.0 / (5 * 16));
  EXPECT_LT(interleaved.bubble_s, 1.5 * plain.compute_s * 3.0 / (5 * 16));
  EXPECT_LT(interleaved.bubble_s, plain.bubble_s / 3);
  // 1F1B: 3 boundaries x 16 microbatches; interleaved: 19 of 20 virtual-stage boundaries.
  EXPECT_EQ(plain_sends, 3 * 16);
  EXPECT_EQ(interleaved_sends, 19 * 16);
  // The schedule needs the microbatches in groups of pp, and a pipeline.
  TrainingConfig odd = config_of("llama3-70b", {"tp8-pp4", 8, 4, Sharding::kZero1, 0}, 36);
  odd.layout.vp = 5;
  EXPECT_THROW(derive(odd, 64, 8), Error);  // 18 microbatches
  TrainingConfig flat = config_of("llama3-8b", {"fsdp", 1, 1, Sharding::kFsdp, 0}, 8);
  flat.layout.vp = 2;
  EXPECT_THROW(derive(flat, 8, 8), Error);
}

TEST(Timeline, ContextParallelismSplitsTheSequenceAndRingsTheKv) {
  TrainingConfig c = config_of("llama3-8b", {"cp2", 1, 1, Sharding::kZero1, 0}, 32);
  c.recompute = Recompute::kNone;
  TrainingConfig plain = c;
  c.layout.cp = 2;
  const DerivedLayout d = derive(c, 8, 8);
  EXPECT_EQ(d.dp, 4);
  EXPECT_EQ(d.data_ranks, 8);  // gradients reduce over dp x cp
  EXPECT_EQ(d.microbatches, 8);
  // Half the tokens per rank: half the activations.
  EXPECT_NEAR(memory_per_gpu(c, d).activations_bytes * 2, memory_per_gpu(plain, derive(plain, 4, 8)).activations_bytes,
              1.0);
  const StepProgram p = build_step(c, h100s(1));
  bool cp_group = false;
  for (const CommGroup& g : p.groups) cp_group = cp_group || (g.name == "cp" && g.size() == 2);
  EXPECT_TRUE(cp_group);
  int exchanges = 0;
  for (const StepTask& t : p.tasks) {
    if (t.kind == TaskKind::kComm && p.labels[static_cast<size_t>(t.label)].starts_with("CP send/recv")) ++exchanges;
  }
  EXPECT_EQ(exchanges, 32 * 8 * 2);  // one ring step (cp - 1) per layer, microbatch, pass
  for (double speed : {0.0, 0.05, 5.0}) expect_accounted(p, durations_for(p, speed));
  TrainingConfig bad = c;
  bad.seq_len = 8190;
  EXPECT_THROW(derive(bad, 8, 8), Error);
}

TEST(Timeline, TpOverlapHidesMostOfTheTpCollectives) {
  TrainingConfig c = config_of("llama3-70b", {"tp8-pp4", 8, 4, Sharding::kZero1, 0}, 32);
  c.recompute = Recompute::kNone;
  const StepProgram serial = build_step(c, h100s(8));
  c.layout.tp_overlap = true;
  const StepProgram overlapped = build_step(c, h100s(8));
  const StepBreakdown a = run_timeline(serial, durations_for(serial, 0.002));
  const StepBreakdown b = run_timeline(overlapped, durations_for(overlapped, 0.002));
  expect_accounted(overlapped, durations_for(overlapped, 0.002));
  EXPECT_GT(a.exposed_comm_s, 0);
  EXPECT_LT(b.exposed_comm_s, a.exposed_comm_s / 3);  // only the first and last chunk of 8 stay exposed
  EXPECT_LT(b.step_s, a.step_s);
}

TEST(Memory, SelectiveRecomputeDependsOnTheStack) {
  TrainingConfig c = config_of("llama3-8b", {"fsdp", 1, 1, Sharding::kFsdp, 0}, 16);
  c.micro_batch = 2;
  const DerivedLayout d = derive(c, 8, 8);
  c.recompute = Recompute::kNone;
  const double none = memory_per_gpu(c, d).activations_bytes;
  c.recompute = Recompute::kSelective;
  EXPECT_DOUBLE_EQ(memory_per_gpu(c, d).activations_bytes, none);  // Megatron's, with flash attention
  c.kernels = KernelStack::kEager;
  const double torchtitan = memory_per_gpu(c, d).activations_bytes;
  c.recompute = Recompute::kNone;
  EXPECT_LT(torchtitan, 0.4 * memory_per_gpu(c, d).activations_bytes);  // about a third of its own none
  c.recompute = Recompute::kSelective;
  c.recompute = Recompute::kFull;
  EXPECT_LT(memory_per_gpu(c, d).activations_bytes, torchtitan);
  EXPECT_EQ(parse_recompute("true"), Recompute::kFull);
  EXPECT_EQ(parse_recompute("selective"), Recompute::kSelective);
  EXPECT_THROW(parse_recompute("some"), Error);
}

TEST(Moe, PresetsCountTheirParameters) {
  // Mixtral 8x7B: 46.7 B in all, 12.9 B active (2 of 8 experts), as its model card says.
  const TransformerSpec mixtral = transformer_preset("mixtral-8x7b");
  EXPECT_EQ(mixtral.parameters(), 46'702'792'704);
  EXPECT_NEAR(static_cast<double>(mixtral.active_parameters()) / 1e9, 12.9, 0.05);
  EXPECT_NEAR(static_cast<double>(transformer_preset("mixtral-8x22b").parameters()) / 1e9, 140.6, 0.1);
  // DeepSeek-V3: 671 B / 37 B published; its latent attention modelled as 128-head attention.
  const TransformerSpec deepseek = transformer_preset("deepseek-v3");
  EXPECT_NEAR(static_cast<double>(deepseek.parameters()) / 671e9, 1.0, 0.01);
  EXPECT_NEAR(static_cast<double>(deepseek.active_parameters()) / 37e9, 1.0, 0.06);
  EXPECT_FALSE(deepseek.moe_layer(2));
  EXPECT_TRUE(deepseek.moe_layer(3));
  // Model FLOPs count the active parameters, not all of them.
  EXPECT_LT(model_flops_per_token(mixtral, 4096), 6.0 * 13e9 + 12.0 * 32 * 4096 * 4096);
}

TEST(Moe, ExpertParallelismDispatchesAndCombinesWithAllToAll) {
  TrainingConfig c = config_of("mixtral-8x7b", {"tp2-ep8", 2, 1, Sharding::kZero1, 0}, 64);
  c.seq_len = 4096;
  c.recompute = Recompute::kNone;
  c.layout.ep = 8;
  const DerivedLayout d = derive(c, 64, 8);
  EXPECT_EQ(d.dp, 32);
  EXPECT_EQ(d.expert_data_ranks, 8);  // 64 ranks a stage (tp 2 x dp 32) over ep 8
  const StepProgram p = build_step(c, h100s(8));
  const CommGroup* ep = nullptr;
  for (const CommGroup& g : p.groups) {
    if (g.name == "ep") ep = &g;
  }
  ASSERT_NE(ep, nullptr);
  EXPECT_EQ(ep->size(), 8);
  EXPECT_EQ(ep->nodes, 1);  // folding: ep consecutive ranks of the stage, one node
  std::map<std::string, int> count;
  for (const StepTask& t : p.tasks) {
    if (t.kind == TaskKind::kComm) ++count[p.labels[static_cast<size_t>(t.label)]];
  }
  // Two all_to_alls forward and two backward per layer and microbatch.
  const int per_pass = 32 * d.microbatches;
  EXPECT_EQ(count["EP all_to_all (dispatch)"], per_pass);
  EXPECT_EQ(count["EP all_to_all (combine)"], per_pass);
  EXPECT_EQ(count["EP all_to_all (dispatch grad)"], per_pass);
  EXPECT_EQ(count["EP all_to_all (combine grad)"], per_pass);
  EXPECT_EQ(count["EDP reduce_scatter (expert grads)"], 32);
  // Each dispatch moves a rank's tokens (its sequence-parallel share) top_k times: 2 x 2,048 x
  // 4,096 x 2 bytes.
  for (const CommOp& op : p.comms) {
    if (op.collective == Collective::kAllToAll) {
      EXPECT_EQ(op.bytes, 2 * 2048 * 4096 * 2);
    }
  }
  for (double speed : {0.0, 0.05, 5.0}) expect_accounted(p, durations_for(p, speed));
  // The experts split over ep: the weights per GPU drop with it.
  TrainingConfig no_ep = c;
  no_ep.layout.ep = 1;
  EXPECT_GT(memory_per_gpu(no_ep, derive(no_ep, 64, 8)).weights_bytes,
            4 * memory_per_gpu(c, d).weights_bytes);
  // Errors: ep on a dense model, ep not dividing the experts or the stage's ranks, ep with FSDP.
  TrainingConfig dense = config_of("llama3-8b", {"x", 1, 1, Sharding::kZero1, 0}, 64);
  dense.layout.ep = 2;
  EXPECT_THROW(derive(dense, 8, 8), Error);
  TrainingConfig odd = c;
  odd.layout.ep = 3;
  EXPECT_THROW(derive(odd, 64, 8), Error);
  TrainingConfig fsdp = c;
  fsdp.layout.sharding = Sharding::kFsdp;
  EXPECT_THROW(derive(fsdp, 64, 8), Error);
}

TEST(Moe, ExpertParallelismFoldsOverTensorAndDataRanks) {
  // NeMo's Qwen3-235B-A22B recipe on 256 H100s: TP2 PP8 EP32. dp is 16, so ep = 32 takes the
  // tensor-parallel ranks too (Megatron-Core's parallel folding, expert TP 1).
  TrainingConfig c = config_of("llama3-8b", {"tp2-pp8-ep32", 2, 8, Sharding::kZero1, 0}, 8192);
  c.model = {"qwen3-235b-a22b", 94, 4096, 12288, 64, 4, 151936, false, 128, 8, 1536};
  c.model.head_dim = 128;
  c.seq_len = 4096;
  c.layout.ep = 32;
  c.layout.vp = 4;
  const DerivedLayout d = derive(c, 256, 8);
  EXPECT_EQ(d.dp, 16);
  EXPECT_EQ(d.expert_data_ranks, 1);  // each expert on one rank of a stage
  c.global_batch = 128;               // a shorter step for the program (8 microbatches)
  const StepProgram p = build_step(c, h100s(32));
  const CommGroup* ep = nullptr;
  for (const CommGroup& g : p.groups) {
    EXPECT_NE(g.name, "edp");  // nothing to reduce the experts over
    if (g.name == "ep") ep = &g;
  }
  ASSERT_NE(ep, nullptr);
  EXPECT_EQ(ep->size(), 32);
  EXPECT_EQ(ep->nodes, 4);  // the 32 ranks of a stage: four nodes
  ASSERT_EQ(ep->instances.size(), 8u);  // one a stage
  for (size_t s = 0; s < 8; ++s) {
    for (int e = 0; e < 32; ++e) EXPECT_EQ(ep->instances[s][static_cast<size_t>(e)], static_cast<int>(s) * 32 + e);
  }
  // The routed experts: 128 / 32 = 4 a rank, their optimizer state unsharded (edp 1) under zero1;
  // with ep 16 two ranks hold each expert and the distributed optimizer halves that state.
  const MemoryBreakdown m32 = memory_per_gpu(c, d);
  TrainingConfig ep16 = c;
  ep16.layout.ep = 16;
  const DerivedLayout d16 = derive(ep16, 256, 8);
  EXPECT_EQ(d16.expert_data_ranks, 2);
  const MemoryBreakdown m16 = memory_per_gpu(ep16, d16);
  EXPECT_GT(m16.weights_bytes, 1.5 * m32.weights_bytes);  // twice the experts a rank
  EXPECT_NEAR(m16.optimizer_bytes / m32.optimizer_bytes, 1.0, 1e-9);
  // ep must divide the stage's 32 ranks.
  c.layout.ep = 64;
  EXPECT_THROW(derive(c, 256, 8), Error);
}

TEST(Moe, ExpertTensorParallelismSplitsEachExpert) {
  // Mixtral 8x7B on 64 H100: EP 4 with expert TP 2 over a stage's 64 ranks (edp 8).
  TrainingConfig c = config_of("mixtral-8x7b", {"tp2-ep4-etp2", 2, 1, Sharding::kZero1, 0}, 64);
  c.seq_len = 4096;
  c.recompute = Recompute::kNone;
  c.layout.ep = 4;
  c.layout.etp = 2;
  const DerivedLayout d = derive(c, 64, 8);
  EXPECT_EQ(d.expert_data_ranks, 8);
  const StepProgram p = build_step(c, h100s(8));
  std::map<std::string, const CommGroup*> groups;
  for (const CommGroup& g : p.groups) groups[g.name] = &g;
  ASSERT_TRUE(groups.count("ep") && groups.count("etp") && groups.count("edp"));
  EXPECT_EQ(groups["ep"]->instances.front(), (std::vector<int>{0, 2, 4, 6}));  // etp apart
  EXPECT_EQ(groups["etp"]->instances.front(), (std::vector<int>{0, 1}));       // consecutive
  EXPECT_EQ(groups["edp"]->size(), 8);                                         // etp x ep = 8 apart
  EXPECT_EQ(groups["edp"]->instances.front()[1], 8);
  // Each MoE layer gathers the dispatched tokens in the expert-TP pair and reduce-scatters the
  // results: etp x the rank's dispatch bytes, nccl-tests' gathered size.
  std::map<std::string, int> count;
  for (const StepTask& t : p.tasks) {
    if (t.kind == TaskKind::kComm) ++count[p.labels[static_cast<size_t>(t.label)]];
  }
  EXPECT_EQ(count["ETP all_gather (tokens)"], 32 * d.microbatches);
  EXPECT_EQ(count["ETP reduce_scatter (results)"], 32 * d.microbatches);
  for (const CommOp& op : p.comms) {
    if (op.collective == Collective::kAllGather && p.groups[static_cast<size_t>(op.group)].name == "etp") {
      EXPECT_EQ(op.bytes, 2 * (2 * 2048 * 4096 * 2));
    }
  }
  for (double speed : {0.0, 0.05, 5.0}) expect_accounted(p, durations_for(p, speed));
  // Half the experts' weights of ep 4 alone, and the same FLOPs per rank.
  TrainingConfig whole = c;
  whole.layout.etp = 1;
  const MemoryBreakdown split = memory_per_gpu(c, d), unsplit = memory_per_gpu(whole, derive(whole, 64, 8));
  EXPECT_LT(split.weights_bytes, 0.6 * unsplit.weights_bytes);
  EXPECT_NEAR(layer_kernels(c, h100s(1).gpu).moe_fwd.flops / layer_kernels(whole, h100s(1).gpu).moe_fwd.flops, 1.0,
              0.01);
  // etp must divide the expert width and the node; it needs an MoE model.
  c.layout.etp = 16;
  EXPECT_THROW(derive(c, 64, 8), Error);
}

TEST(Layout, Llama405bNeedsThousandsOfGpus) {
  // 405B at 16 B/param is 6.5 TB of training state: ZeRO-3 over 64 GPUs is 101 GB each before any
  // activation; over 1,024 GPUs with TP8 it fits.
  const TrainingConfig small = config_of("llama3-405b", {"fsdp", 1, 1, Sharding::kFsdp, 0}, 64);
  EXPECT_THROW(check_fits(small, derive(small, 64, 8), h100s(8).gpu), Error);
  const TrainingConfig big = config_of("llama3-405b", {"tp8-fsdp", 8, 1, Sharding::kFsdp, 0}, 128);
  const DerivedLayout d = derive(big, 1024, 8);
  EXPECT_NO_THROW(check_fits(big, d, h100s(128).gpu));
  EXPECT_EQ(d.layers_of_stage, std::vector<int>{126});
  const TrainingConfig piped = config_of("llama3-405b", {"tp8-pp4", 8, 4, Sharding::kZero1, 0}, 128);
  EXPECT_EQ(derive(piped, 1024, 8).layers_of_stage, (std::vector<int>{32, 32, 31, 31}));  // 126 = 2x32 + 2x31
}

}  // namespace
}  // namespace tandem::models

namespace tandem::models {
namespace {

TEST(StepProgram, DeepSpeedAddsEveryMicrobatchsGradientsIntoFp32Ones) {
  TrainingConfig c = config_of("llama3-8b", {"tp2-pp2", 2, 2, Sharding::kZero1, 0}, 16);
  c.model = {"small", 12, 2048, 8192, 16, 8, 32000, true};
  c.seq_len = 2048;
  c.grad_reduce_dtype = DataType::kF32;
  const ClusterSpec cluster = h100s(1);
  const DerivedLayout d = derive(c, 8, 8);
  ASSERT_EQ(d.microbatches, 8);
  auto passes = [&](const StepProgram& p, int stage) {
    std::vector<double> seconds;
    for (const StepTask& t : p.tasks) {
      if (t.kind == TaskKind::kCompute && t.stage == stage && p.labels[static_cast<size_t>(t.label)] == "gradient accumulation")
        seconds.push_back(t.kernel_s);
    }
    return seconds;
  };
  EXPECT_TRUE(passes(build_step(c, cluster), 0).empty());  // fused: the GEMMs accumulate
  const MemoryBreakdown fused = memory_per_gpu(c, d);

  c.grad_accumulation = GradAccumulation::kDeepSpeed;
  const MemoryBreakdown deepspeed = memory_per_gpu(c, d);
  // bf16 weights: 2 B a local parameter; the gradients gain a bf16 copy beside the fp32 ones.
  const double local = deepspeed.weights_bytes / 2;
  EXPECT_DOUBLE_EQ(fused.gradients_bytes, 4 * local);
  EXPECT_DOUBLE_EQ(deepspeed.gradients_bytes, 6 * local);
  // One pass per microbatch over the stage's parameters: zero (2) + autograd's add (6) + fp32 add (10).
  const KernelEnv env{cluster.gpu, c.precision, c.kernels};
  const std::vector<double> ds = passes(build_step(c, cluster), 0);
  ASSERT_EQ(ds.size(), 8u);
  // (memory_per_gpu is of the busiest stage, the last here: the final norm's 2,048 parameters more.)
  for (double s : ds) EXPECT_NEAR(s / memory_bound(env, 18 * local).seconds, 1.0, 1e-4);
  // Megatron's hook: the fp32 add only, and no bf16 copy kept.
  c.grad_accumulation = GradAccumulation::kHook;
  EXPECT_DOUBLE_EQ(memory_per_gpu(c, d).gradients_bytes, 4 * local);
  for (double s : passes(build_step(c, cluster), 0)) EXPECT_NEAR(s / memory_bound(env, 10 * local).seconds, 1.0, 1e-4);
  // Names, and FSDP refuses it.
  EXPECT_EQ(parse_grad_accumulation("DeepSpeed"), GradAccumulation::kDeepSpeed);
  EXPECT_THROW(parse_grad_accumulation("apex"), Error);
  c.layout = {"fsdp", 1, 1, Sharding::kFsdp, 0};
  EXPECT_THROW(derive(c, 8, 8), Error);
}

TEST(Timeline, OnAnA100MoreTokensPerMicrobatchRunTheGemmsFaster) {
  // BLOOM-176B's layer widths at TP4 on A100s: the compute of a step falls from micro-batch 1 to 2
  // (the last wave of GEMM tiles is a smaller share), while the H100's split tail keeps it flat.
  TrainingConfig c = config_of("llama3-8b", {"tp4-pp2", 4, 2, Sharding::kZero1, 0}, 64);
  c.model = {"bloom-like", 4, 14336, 57344, 112, 112, 250880, true};
  c.model.mlp = MlpKind::kGelu;
  c.seq_len = 2048;
  auto compute_of = [&](const ClusterSpec& cluster, int micro_batch) {
    c.micro_batch = micro_batch;
    const StepProgram p = build_step(c, cluster);
    std::vector<double> kernels;  // the kernels' own times, communication free
    for (const StepTask& t : p.tasks) kernels.push_back(t.kind == TaskKind::kCompute ? t.kernel_s : 0.0);
    return run_timeline(p, kernels).compute_s;
  };
  ClusterSpec a100 = cluster_preset("hgx-a100");
  a100.nodes = 1;
  const double a1 = compute_of(a100, 1), a2 = compute_of(a100, 2), a4 = compute_of(a100, 4);
  EXPECT_GT(a1 / a2, 1.03);
  EXPECT_GT(a2, a4 * 0.97);
  const double h1 = compute_of(h100s(1), 1), h2 = compute_of(h100s(1), 2);
  EXPECT_NEAR(h1 / h2, 1.0, 0.01);
}

}  // namespace
}  // namespace tandem::models
