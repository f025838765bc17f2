// Training workloads in scenarios: the shipped Llama-3 70B scenario loads as written, a layout's
// overrides reach its config, and every kind of mistake is an error at its file:line:column.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "app/scenario/scenario.h"
#include "core/error.h"

namespace tandem::app {
namespace {

constexpr const char* kTraining = R"(tandem_scenario: 1
name: t
cluster: {preset: dgx-h100, nodes: 2}
workload:
  type: training
  model: llama3-8b
  global_batch: 32
  layouts:
    - {name: fsdp, sharding: fsdp}
    - {name: tp8, tp: 8, sharding: zero1, recompute: true, micro_batch: 2}
)";

TEST(TrainingScenario, ShippedLlama70bLoads) {
  const Scenario scenario = load_scenario("scenarios/llama3-70b-64xh100.yaml");
  ASSERT_EQ(scenario.variants.size(), 4u);
  const auto& training = std::get<TrainingWorkload>(scenario.workload);
  EXPECT_EQ(training.base.model.name, "llama3-70b");
  EXPECT_EQ(training.base.model.parameters(), 70'553'706'496);
  EXPECT_EQ(training.base.seq_len, 8192);
  EXPECT_EQ(training.base.global_batch, 128);
  EXPECT_FALSE(training.base.mfu.has_value());  // compute timed from the kernels
  ASSERT_EQ(training.layouts.size(), 2u);
  EXPECT_EQ(training.layouts[0].layout.sharding, models::Sharding::kFsdp);
  EXPECT_EQ(training.layouts[1].layout.tp, 8);
  EXPECT_EQ(training.layouts[1].layout.pp, 4);
  EXPECT_EQ(scenario.expectations_of<TrainingExpectation>().size(), 8u);
  EXPECT_TRUE(scenario.variants[3].allocator.expandable_segments);
  EXPECT_TRUE(scenario.expectations_of<Expectation>().empty());  // nothing of another kind
  EXPECT_EQ(scenario.expectations.size(), 8u);
}

TEST(TrainingScenario, LayoutOverridesAndBatchPerGpu) {
  const Scenario scenario = parse_scenario(kTraining, "t.yaml");
  const auto& training = std::get<TrainingWorkload>(scenario.workload);
  const models::TrainingConfig fsdp = training.config_for(0, 16);
  EXPECT_EQ(fsdp.recompute, models::Recompute::kNone);
  EXPECT_EQ(fsdp.micro_batch, 1);
  EXPECT_EQ(fsdp.global_batch, 32);
  const models::TrainingConfig tp = training.config_for(1, 16);
  EXPECT_EQ(tp.recompute, models::Recompute::kFull);
  EXPECT_EQ(tp.micro_batch, 2);
  EXPECT_EQ(tp.layout.tp, 8);
  std::string text = kTraining;
  text.replace(text.find("global_batch: 32"), 16, "batch_per_gpu: 0.5");
  const Scenario scaled = parse_scenario(text, "t.yaml");
  const auto& per_gpu = std::get<TrainingWorkload>(scaled.workload);
  EXPECT_EQ(per_gpu.config_for(0, 64).global_batch, 32);
  EXPECT_EQ(per_gpu.config_for(0, 16).global_batch, 8);
}

TEST(TrainingScenario, CustomModelFromItsDimensions) {
  std::string text = kTraining;
  text.replace(
      text.find("model: llama3-8b"), 16,
      "model: {name: mini, layers: 4, d_model: 1024, ffn: 4096, heads: 8, vocab: 32000, tied_embeddings: true}");
  const Scenario scenario = parse_scenario(text, "t.yaml");
  const auto& training = std::get<TrainingWorkload>(scenario.workload);
  EXPECT_EQ(training.base.model.name, "mini");
  EXPECT_EQ(training.base.model.kv_heads, 8);  // defaults to heads
  EXPECT_EQ(training.base.model.parameters(), 4 * (4 * 1024 * 1024 + 3 * 1024 * 4096 + 2 * 1024) + 32000 * 1024 + 1024);
}

TEST(TrainingScenario, MixtureOfExpertsAndTheNewLayoutKeys) {
  std::string text = kTraining;
  text.replace(text.find("model: llama3-8b"), 16,
               "model: {name: moe, layers: 4, d_model: 1024, ffn: 4096, heads: 8, vocab: 32000, experts: 8, top_k: 2, "
               "moe_ffn: 2048, shared_experts: 1, dense_layers: 1}\n  capacity_factor: 1.25");
  text.replace(
      text.find("{name: fsdp, sharding: fsdp}"), 28,
      "{name: ep4, tp: 2, pp: 2, vp: 2, cp: 2, ep: 4, sharding: zero1, recompute: selective, tp_overlap: true}");
  const Scenario scenario = parse_scenario(text, "t.yaml");
  const auto& training = std::get<TrainingWorkload>(scenario.workload);
  const models::TransformerSpec& m = training.base.model;
  EXPECT_EQ(m.experts, 8);
  EXPECT_EQ(m.top_k, 2);
  EXPECT_EQ(m.moe_ffn, 2048);
  EXPECT_EQ(m.shared_experts, 1);
  EXPECT_EQ(m.dense_layers, 1);
  EXPECT_DOUBLE_EQ(training.base.capacity_factor, 1.25);
  // 1 dense layer, 3 with 8 routed + 1 shared expert and a router.
  const int64_t attention = 4 * 1024 * 1024, expert = 3 * 1024 * 2048;
  EXPECT_EQ(m.parameters(), (attention + 3 * 1024 * 4096 + 2 * 1024) +
                                3 * (attention + 9 * expert + 1024 * 8 + 2 * 1024) + 2 * 32000 * 1024 + 1024);
  const models::TrainingConfig c = training.config_for(0, 64);
  EXPECT_EQ(c.layout.vp, 2);
  EXPECT_EQ(c.layout.cp, 2);
  EXPECT_EQ(c.layout.ep, 4);
  EXPECT_TRUE(c.layout.tp_overlap);
  EXPECT_EQ(c.recompute, models::Recompute::kSelective);
}

TEST(TrainingScenario, AGpuPowerCapAndMemorySize) {
  std::string text = kTraining;
  text.replace(text.find("nodes: 2}"), 9, "nodes: 2, gpu_power_w: 500, gpu_memory_GB: 96}");
  const Scenario scenario = parse_scenario(text, "t.yaml");
  ASSERT_EQ(scenario.variants.size(), 1u);
  EXPECT_DOUBLE_EQ(scenario.variants[0].cluster.gpu.power_limit_w, 500);
  EXPECT_DOUBLE_EQ(scenario.variants[0].cluster.gpu.memory_bytes, 96e9);
  text = kTraining;
  text.replace(text.find("nodes: 2}"), 9, "nodes: 2, gpu_power_w: 900}");  // above the H100's 700 W
  EXPECT_THROW(parse_scenario(text, "t.yaml"), Error);
}

struct Reject {
  std::string from, to, where, mentions;
};

TEST(TrainingScenario, MistakesAreFileLineColumnErrors) {
  const std::vector<Reject> cases{
      {"model: llama3-8b", "model: llama4", "t.yaml:6:10", "unknown model 'llama4'"},
      {"global_batch: 32", "global_batch: 0", "t.yaml:7:17", "workload.global_batch must be an integer"},
      {"global_batch: 32", "global_batch: 32\n  batch_per_gpu: 1", "t.yaml:8:18", "not both"},
      {"sharding: fsdp}", "sharding: fdsp}", "t.yaml:9:30", "unknown sharding 'fdsp'"},
      {"{name: fsdp, sharding: fsdp}", "{name: fsdp, sharding: fsdp, shard_group: 4}", "t.yaml:9:49",
       "goes with sharding: hsdp"},
      {"{name: tp8,", "{name: fsdp,", "t.yaml:10:14", "a layout named 'fsdp' comes earlier"},
      {"{name: fsdp, sharding: fsdp}", "{name: fsdp, tensor: 2}", "t.yaml:9:20", "unknown key 'tensor'"},
      {"  layouts:\n    - {name: fsdp, sharding: fsdp}\n    - {name: tp8, tp: 8, sharding: zero1, recompute: true, "
       "micro_batch: 2}\n",
       "  layouts: []\n", "t.yaml:8:12", "must not be empty"},
      {"  model: llama3-8b\n", "  model: llama3-8b\n  mfu: 1.5\n", "t.yaml:7:8", "workload.mfu must be a number"},
      {"sharding: fsdp}", "sharding: fsdp, ep: 0}", "t.yaml:9:40", "ep must be an integer"},
      {"  model: llama3-8b\n", "  model: llama3-8b\n  capacity_factor: 0.5\n", "t.yaml:7:20", "capacity_factor"},
      {"  model: llama3-8b\n", "  model: llama3-8b\n  recompute: partial\n", "t.yaml:7:14",
       "unknown recompute 'partial'"},
      {"  model: llama3-8b\n", "  model: llama3-8b\n  kernels: compiled\n", "t.yaml:7:12",
       "unknown kernels 'compiled'"},
      {"  model: llama3-8b\n", "  model: llama3-8b\n  grad_reduce_dtype: i32\n", "t.yaml:7:22", "bf16 or f32"},
      {"  model: llama3-8b\n", "  model: llama3-8b\n  grad_accumulation: apex\n", "t.yaml:7:22",
       "unknown grad_accumulation 'apex' (expected: fused, hook, deepspeed)"},
      {"  model: llama3-8b\n",
       "  model: {name: m, layers: 2, d_model: 512, ffn: 1024, heads: 8, vocab: 1000, kv_lora_rank: 64}\n",
       "t.yaml:6:10", "needs all of q_lora_rank"},
      {"  model: llama3-8b\n",
       "  model: {name: m, layers: 2, d_model: 512, ffn: 1024, heads: 8, vocab: 1000, positions: learned}\n",
       "t.yaml:6:10", "positions: learned needs max_positions"},
      {"micro_batch: 2}", "micro_batch: 2}\nexpect:\n  - {layout: tp9, step_time_s: {max: 1}}", "t.yaml:12:14",
       "no layout named 'tp9'"},
      {"micro_batch: 2}", "micro_batch: 2}\nexpect:\n  - {layout: tp8}", "t.yaml:12:5", "checks nothing"},
      {"micro_batch: 2}", "micro_batch: 2}\nexpect:\n  - {layout: tp8, speedup: {min: 1}}", "t.yaml:12:5",
       "needs relative_to"},
      {"micro_batch: 2}", "micro_batch: 2}\nexpect:\n  - {layout: tp8, relative_to: 800G, speedup: {min: 1}}",
       "t.yaml:12:32", "no variant named '800G'"},
  };
  for (const Reject& c : cases) {
    SCOPED_TRACE(c.to);
    std::string text = kTraining;
    ASSERT_NE(text.find(c.from), std::string::npos);
    text.replace(text.find(c.from), c.from.size(), c.to);
    try {
      parse_scenario(text, "t.yaml");
      ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kFormat);
      const std::string message = e.what();
      EXPECT_EQ(message.rfind(c.where + ":", 0), 0u) << message;
      EXPECT_NE(message.find(c.mentions), std::string::npos) << message;
    }
  }
}

}  // namespace
}  // namespace tandem::app
