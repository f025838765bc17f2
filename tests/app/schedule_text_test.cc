#include "app/report/schedule_text.h"

#include <cctype>
#include <sstream>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "core/algorithms.h"

namespace tandem::app {
namespace {

TEST(ScheduleText, FormatsSlotRanges) {
  EXPECT_EQ(format_slots({BufferKind::kInput, 3, 1}), "In[3]");
  EXPECT_EQ(format_slots({BufferKind::kOutput, 2, 4}), "Out[2..5]");
  EXPECT_EQ(format_slots({BufferKind::kScratch, 0, 1}), "Scr[0]");
}

TEST(ScheduleText, FormatsEveryOpKind) {
  EXPECT_EQ(format_op({OpKind::kSend, 1, {BufferKind::kInput, 3, 1}, {}}), "send In[3] -> r1");
  EXPECT_EQ(format_op({OpKind::kRecv, 7, {}, {BufferKind::kOutput, 2, 1}}), "recv Out[2] <- r7");
  EXPECT_EQ(format_op({OpKind::kRecvReduce, 7, {BufferKind::kInput, 2, 1}, {BufferKind::kOutput, 2, 1}}),
            "recv-reduce Out[2] = In[2] + r7");
  EXPECT_EQ(format_op({OpKind::kCopy, -1, {BufferKind::kInput, 0, 2}, {BufferKind::kOutput, 4, 2}}),
            "copy Out[4..5] = In[0..1]");
  EXPECT_EQ(format_op({OpKind::kReduce, -1, {BufferKind::kScratch, 0, 1}, {BufferKind::kOutput, 1, 1}}),
            "reduce Out[1] += Scr[0]");
}

TEST(ScheduleText, ListsEveryOpOnceRoundByRound) {
  for (int n : {1, 2, 3, 4, 7}) {
    CollectiveSpec spec{Collective::kAllReduce, 1, DataType::kF32, ReduceOp::kSum, 0, n};
    Schedule schedule = build_checked_schedule(spec, RankLayout::flat(n), Algorithm::kRing);
    std::string text = format_schedule_text(schedule);
    EXPECT_EQ(text.rfind(schedule_summary(schedule) + "\n", 0), 0u) << text;
    EXPECT_EQ(schedule_summary(schedule).rfind(fmt::format("all_reduce ring: {} ranks, ", n), 0), 0u);

    std::istringstream lines(text);
    std::string line;
    size_t ops = 0;
    long last_round = -1;
    while (std::getline(lines, line)) {
      if (line.rfind("round ", 0) == 0) {
        long round = std::stol(line.substr(6));
        EXPECT_GT(round, last_round);
        last_round = round;
      } else if (line.size() > 3 && line.rfind("  r", 0) == 0 && std::isdigit(static_cast<unsigned char>(line[3]))) {
        ++ops;
      }
    }
    EXPECT_EQ(ops, schedule.op_count()) << text;
  }
}

TEST(ScheduleText, ShowsASymmetricScheduleExpanded) {
  for (int n : {2, 5, 8}) {
    CollectiveSpec spec{Collective::kAllReduce, 1, DataType::kF32, ReduceOp::kSum, 0, n};
    Schedule explicit_form = build_checked_schedule(spec, RankLayout::flat(n), Algorithm::kRing);
    Schedule symmetric_form =
        build_checked_schedule(spec, RankLayout::flat(n), Algorithm::kRing, {}, ScheduleForm::kSymmetric);
    ASSERT_TRUE(symmetric_form.symmetric());
    std::string text = format_schedule_text(symmetric_form);
    const std::string note =
        fmt::format("  stored in rank-symmetric form (one program, rotation group {}); every rank shown\n",
                    symmetric_form.symmetry.rotation_group);
    size_t at = text.find(note);
    ASSERT_NE(at, std::string::npos) << text;
    text.erase(at, note.size());
    EXPECT_EQ(text, format_schedule_text(explicit_form));
  }
}

}  // namespace
}  // namespace tandem::app
