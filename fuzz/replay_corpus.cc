// Runs a fuzz target's LLVMFuzzerTestOneInput on files, without libFuzzer: the seed corpus (and any
// crash input added to it) as a regular test, so that CI replays every target on every commit in a
// normal build. A crash or an abort in the target fails the test; tandem::Error is the target's own
// business (it catches it).
//
//   fuzz_replay_<target> PATH...   (a file, or a folder whose files are each one input)
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

void run_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
}

}  // namespace

int main(int argc, char** argv) {
  size_t inputs = 0;
  for (int i = 1; i < argc; ++i) {
    const std::filesystem::path path(argv[i]);
    if (std::filesystem::is_directory(path)) {
      for (const auto& entry : std::filesystem::directory_iterator(path)) {
        if (!entry.is_regular_file()) continue;
        run_file(entry.path());
        ++inputs;
      }
    } else {
      run_file(path);
      ++inputs;
    }
  }
  if (inputs == 0) {
    std::fprintf(stderr, "no inputs in the paths given\n");
    return 1;
  }
  std::printf("%zu inputs ran\n", inputs);
  return 0;
}
