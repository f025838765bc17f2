#include "backend/launch/launch.h"

#include <fmt/format.h>
#include <unistd.h>

#include <charconv>
#include <climits>
#include <cstdlib>
#include <mutex>
#include <string_view>
#include <utility>

#include "core/error.h"

#ifdef TANDEM_HAVE_MPI
#include <dlfcn.h>
#include <mpi.h>
#endif

namespace tandem::nccl {
namespace {

std::string host_name() {
  char buffer[256] = {};
  if (gethostname(buffer, sizeof(buffer) - 1) != 0) return "unknown-host";
  return buffer;
}

// A positive process count from an environment variable; 0 when unset or not a number.
int parse_count(const char* text) {
  if (text == nullptr) return 0;
  const std::string_view view(text);
  int value = 0;
  const auto [end, error] = std::from_chars(view.data(), view.data() + view.size(), value);
  if (error != std::errc() || end != view.data() + view.size() || value < 0) return 0;
  return value;
}

class SingleLaunch final : public Launch {
 public:
  SingleLaunch() {
    info_.kind = LaunchKind::kSingle;
    info_.host = host_name();
  }

  void broadcast(std::vector<std::byte>& /*bytes*/, int root) override {
    if (root != 0) fail(ErrorCode::kInvalidArgument, "launch: broadcast root {} in a single-process launch", root);
  }
  std::vector<std::vector<std::byte>> all_gather(const std::vector<std::byte>& bytes) override { return {bytes}; }
  std::vector<std::vector<std::byte>> gather_to_root(const std::vector<std::byte>& bytes) override { return {bytes}; }
  void barrier() override {}
  void abort_all(int /*code*/) override {}
};

#ifdef TANDEM_HAVE_MPI

void check_mpi(int status, const char* call, const char* file, int line) {
  if (status == MPI_SUCCESS) return;
  char message[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(status, message, &length) != MPI_SUCCESS) length = 0;
  fail(ErrorCode::kBackend, "{} failed at {}:{}: {}", call, file, line, std::string_view(message, length));
}
#define TANDEM_MPI_CHECK(call) check_mpi((call), #call, __FILE__, __LINE__)

// MPI counts are int: a payload past INT_MAX bytes cannot travel in one call.
int mpi_count(size_t bytes, const char* what) {
  if (bytes > static_cast<size_t>(INT_MAX)) {
    fail(ErrorCode::kInvalidArgument, "launch: {} of {} bytes exceeds MPI's limit of {} bytes", what, bytes, INT_MAX);
  }
  return static_cast<int>(bytes);
}

// One process per rank. Works on a duplicate of MPI_COMM_WORLD that returns errors instead of
// aborting, so a failure becomes an Error with MPI's message.
// libsimgrid exports the MPI API as well (SMPI). In a binary that links both, MPI_* bind to
// whichever library the dynamic linker meets first; SimGrid's MPI_Init aborts the process outside
// smpirun. app/CMakeLists.txt puts the real MPI first; this says so clearly if a build does not.
void require_real_mpi() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&MPI_Init_thread), &info) != 0 && info.dli_fname != nullptr &&
      std::string_view(info.dli_fname).find("simgrid") != std::string_view::npos) {
    fail(ErrorCode::kUnsupported,
         "MPI_Init_thread binds to SimGrid's MPI ({}), not the real MPI: link the MPI library before SimGrid",
         info.dli_fname);
  }
}

class MpiLaunch final : public Launch {
 public:
  MpiLaunch() {
    require_real_mpi();
    int initialized = 0;
    TANDEM_MPI_CHECK(MPI_Initialized(&initialized));
    if (initialized == 0) {
      // Serialized: the executor may call from any thread, but never from two at once.
      int provided = 0;
      TANDEM_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided));
      owns_mpi_ = true;
    }
    TANDEM_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &world_));
    TANDEM_MPI_CHECK(MPI_Comm_set_errhandler(world_, MPI_ERRORS_RETURN));
    TANDEM_MPI_CHECK(MPI_Comm_rank(world_, &info_.rank));
    TANDEM_MPI_CHECK(MPI_Comm_size(world_, &info_.size));
    MPI_Comm local = MPI_COMM_NULL;
    TANDEM_MPI_CHECK(MPI_Comm_split_type(world_, MPI_COMM_TYPE_SHARED, info_.rank, MPI_INFO_NULL, &local));
    TANDEM_MPI_CHECK(MPI_Comm_rank(local, &info_.local_rank));
    TANDEM_MPI_CHECK(MPI_Comm_size(local, &info_.local_size));
    TANDEM_MPI_CHECK(MPI_Comm_free(&local));
    info_.kind = LaunchKind::kMpi;
    info_.host = host_name();
  }

  ~MpiLaunch() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized != 0) return;
    if (world_ != MPI_COMM_NULL) MPI_Comm_free(&world_);
    if (owns_mpi_) MPI_Finalize();
  }

  void broadcast(std::vector<std::byte>& bytes, int root) override {
    check_root(root);
    // Agree on the size first, so that a mismatch fails on every process instead of hanging some.
    long long sizes[2] = {static_cast<long long>(bytes.size()), -static_cast<long long>(bytes.size())};
    TANDEM_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, sizes, 2, MPI_LONG_LONG, MPI_MAX, world_));
    if (sizes[0] != -sizes[1]) {
      fail(ErrorCode::kInvalidArgument,
           "launch: broadcast sizes differ across processes ({} to {} bytes; rank {} has {})", -sizes[1], sizes[0],
           info_.rank, bytes.size());
    }
    TANDEM_MPI_CHECK(MPI_Bcast(bytes.data(), mpi_count(bytes.size(), "broadcast"), MPI_BYTE, root, world_));
  }

  std::vector<std::vector<std::byte>> all_gather(const std::vector<std::byte>& bytes) override {
    int own = mpi_count(bytes.size(), "all_gather payload");
    std::vector<int> sizes(static_cast<size_t>(info_.size));
    TANDEM_MPI_CHECK(MPI_Allgather(&own, 1, MPI_INT, sizes.data(), 1, MPI_INT, world_));
    const std::vector<int> offsets = offsets_of(sizes, "all_gather");
    std::vector<std::byte> all(static_cast<size_t>(offsets.back()));
    TANDEM_MPI_CHECK(
        MPI_Allgatherv(bytes.data(), own, MPI_BYTE, all.data(), sizes.data(), offsets.data(), MPI_BYTE, world_));
    return split(all, sizes, offsets);
  }

  std::vector<std::vector<std::byte>> gather_to_root(const std::vector<std::byte>& bytes) override {
    int own = mpi_count(bytes.size(), "gather_to_root payload");
    const bool root = info_.rank == 0;
    std::vector<int> sizes(root ? static_cast<size_t>(info_.size) : 0);
    TANDEM_MPI_CHECK(MPI_Gather(&own, 1, MPI_INT, sizes.data(), 1, MPI_INT, 0, world_));
    if (!root) {
      TANDEM_MPI_CHECK(MPI_Gatherv(bytes.data(), own, MPI_BYTE, nullptr, nullptr, nullptr, MPI_BYTE, 0, world_));
      return {};
    }
    const std::vector<int> offsets = offsets_of(sizes, "gather_to_root");
    std::vector<std::byte> all(static_cast<size_t>(offsets.back()));
    TANDEM_MPI_CHECK(
        MPI_Gatherv(bytes.data(), own, MPI_BYTE, all.data(), sizes.data(), offsets.data(), MPI_BYTE, 0, world_));
    return split(all, sizes, offsets);
  }

  void barrier() override { TANDEM_MPI_CHECK(MPI_Barrier(world_)); }

  void abort_all(int code) override { MPI_Abort(MPI_COMM_WORLD, code); }

 private:
  void check_root(int root) const {
    if (root < 0 || root >= info_.size) {
      fail(ErrorCode::kInvalidArgument, "launch: broadcast root {} out of range [0, {})", root, info_.size);
    }
  }

  // Displacements of each process's payload in the gathered bytes; one past the end last.
  static std::vector<int> offsets_of(const std::vector<int>& sizes, const char* what) {
    std::vector<int> offsets(sizes.size() + 1, 0);
    size_t total = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      total += static_cast<size_t>(sizes[i]);
      offsets[i + 1] = mpi_count(total, what);
    }
    return offsets;
  }

  static std::vector<std::vector<std::byte>> split(const std::vector<std::byte>& all, const std::vector<int>& sizes,
                                                   const std::vector<int>& offsets) {
    std::vector<std::vector<std::byte>> parts(sizes.size());
    for (size_t i = 0; i < sizes.size(); ++i) {
      parts[i].assign(all.begin() + offsets[i], all.begin() + offsets[i] + sizes[i]);
    }
    return parts;
  }

  MPI_Comm world_ = MPI_COMM_NULL;
  bool owns_mpi_ = false;
};

#endif  // TANDEM_HAVE_MPI

std::unique_ptr<Launch> launch_from_environment() {
  const std::optional<LauncherSeen> seen = detect_launcher(&std::getenv);
  if (!seen) return single_launch();
#ifdef TANDEM_HAVE_MPI
  return std::make_unique<MpiLaunch>();
#else
  fail(ErrorCode::kUnsupported,
       "{}={}: this process was started by a multi-process launcher, but this build of tandem has no MPI "
       "(install an MPI, e.g. libopenmpi-dev, and reconfigure)",
       seen->variable, seen->size);
#endif
}

}  // namespace

std::string LaunchInfo::describe() const {
  if (kind == LaunchKind::kSingle) return fmt::format("single process on {}", host);
  return fmt::format("mpi rank {} of {} (local {} of {} on {})", rank, size, local_rank, local_size, host);
}

bool mpi_available() {
#ifdef TANDEM_HAVE_MPI
  return true;
#else
  return false;
#endif
}

std::optional<LauncherSeen> detect_launcher(const EnvLookup& env) {
  // Variables that name the world size directly, most specific first: Open MPI's mpirun, MPICH /
  // Intel MPI (PMI-1 and -2), srun --mpi=pmix (PMIX_RANK shows PMIx; Slurm gives the size), then a
  // bare srun step (SLURM_STEP_NUM_TASKS is set inside a step only, unlike SLURM_NTASKS, which a
  // batch script's single process also sees).
  if (const int size = parse_count(env("OMPI_COMM_WORLD_SIZE")); size > 0) {
    return size > 1 ? std::optional<LauncherSeen>({"OMPI_COMM_WORLD_SIZE", size}) : std::nullopt;
  }
  if (const int size = parse_count(env("PMI_SIZE")); size > 0) {
    return size > 1 ? std::optional<LauncherSeen>({"PMI_SIZE", size}) : std::nullopt;
  }
  if (env("PMIX_RANK") != nullptr) {
    for (const char* variable : {"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"}) {
      if (const int size = parse_count(env(variable)); size > 0) {
        return size > 1 ? std::optional<LauncherSeen>({std::string("PMIX_RANK with ") + variable, size}) : std::nullopt;
      }
    }
  }
  if (const int size = parse_count(env("SLURM_STEP_NUM_TASKS")); size > 1) {
    return LauncherSeen{"SLURM_STEP_NUM_TASKS", size};
  }
  return std::nullopt;
}

Launch& current_launch() {
  // Created once, destroyed (MPI finalised) with the other statics at exit. A failed creation is
  // retried by the next call.
  static std::mutex mutex;
  static std::unique_ptr<Launch> launch;
  std::lock_guard lock(mutex);
  if (!launch) launch = launch_from_environment();
  return *launch;
}

std::unique_ptr<Launch> single_launch() { return std::make_unique<SingleLaunch>(); }

int device_for_local_rank(int local_rank, int device_count) {
  if (device_count < 1) {
    fail(ErrorCode::kUnsupported, "no CUDA device: local rank {} needs a GPU and {} are visible", local_rank,
         device_count);
  }
  if (local_rank < 0) fail(ErrorCode::kInvalidArgument, "launch: local rank {} is negative", local_rank);
  return local_rank % device_count;
}

}  // namespace tandem::nccl
