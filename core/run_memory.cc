#include "core/run_memory.h"

#include <fmt/format.h>

#include "core/data_check.h"

namespace tandem {

RunMemory::RunMemory(Executor& executor, int nranks, size_t input_bytes, size_t output_bytes)
    : space_(executor.buffer_space()),
      input_bytes_(input_bytes),
      output_bytes_(output_bytes),
      host_inputs_(static_cast<size_t>(nranks)),
      host_outputs_(static_cast<size_t>(nranks)) {
  const std::vector<int> ranks = executor.local_ranks(nranks);
  require_host_memory(static_cast<double>(ranks.size()) * static_cast<double>(input_bytes + output_bytes),
                      fmt::format("buffers for {} ranks on the {} backend", ranks.size(), executor.name()));
  if (space_ != nullptr) {
    device_inputs_.assign(static_cast<size_t>(nranks), nullptr);
    device_outputs_.assign(static_cast<size_t>(nranks), nullptr);
  }
  for (int rank : ranks) {
    const auto r = static_cast<size_t>(rank);
    host_inputs_[r] = std::make_unique<AlignedBuffer>(input_bytes);
    host_outputs_[r] = std::make_unique<AlignedBuffer>(output_bytes);
    if (space_ != nullptr) {
      device_inputs_[r] = space_->allocate(rank, input_bytes);
      device_outputs_[r] = space_->allocate(rank, output_bytes);
    }
  }
}

RunMemory::~RunMemory() {
  if (space_ == nullptr) return;
  for (void* buffer : device_inputs_) {
    if (buffer != nullptr) space_->release(buffer);
  }
  for (void* buffer : device_outputs_) {
    if (buffer != nullptr) space_->release(buffer);
  }
}

std::vector<RankBuffers> RunMemory::place(const std::vector<void*>& inputs, const std::vector<void*>& outputs,
                                          Collective collective, int64_t count, DataType dtype, bool in_place) const {
  std::vector<RankBuffers> buffers(inputs.size());
  for (size_t r = 0; r < inputs.size(); ++r) {
    if (inputs[r] == nullptr) continue;
    buffers[r] = place_buffers(collective, static_cast<int>(r), count, dtype, in_place, inputs[r], outputs[r]);
  }
  return buffers;
}

std::vector<RankBuffers> RunMemory::host(Collective collective, int64_t count, DataType dtype, bool in_place) const {
  std::vector<void*> inputs(host_inputs_.size()), outputs(host_outputs_.size());
  for (size_t r = 0; r < inputs.size(); ++r) {
    if (host_inputs_[r] == nullptr) continue;
    inputs[r] = host_inputs_[r]->data();
    outputs[r] = host_outputs_[r]->data();
  }
  return place(inputs, outputs, collective, count, dtype, in_place);
}

std::vector<RankBuffers> RunMemory::run(Collective collective, int64_t count, DataType dtype, bool in_place) const {
  if (space_ == nullptr) return host(collective, count, dtype, in_place);
  return place(device_inputs_, device_outputs_, collective, count, dtype, in_place);
}

void RunMemory::upload() const {
  if (space_ == nullptr) return;
  for (size_t r = 0; r < host_inputs_.size(); ++r) {
    if (host_inputs_[r] == nullptr) continue;
    space_->upload(device_inputs_[r], host_inputs_[r]->data(), input_bytes_);
    space_->upload(device_outputs_[r], host_outputs_[r]->data(), output_bytes_);
  }
}

void RunMemory::download() const {
  if (space_ == nullptr) return;
  for (size_t r = 0; r < host_inputs_.size(); ++r) {
    if (host_inputs_[r] == nullptr) continue;
    space_->download(host_inputs_[r]->data(), device_inputs_[r], input_bytes_);
    space_->download(host_outputs_[r]->data(), device_outputs_[r], output_bytes_);
  }
}

}  // namespace tandem
