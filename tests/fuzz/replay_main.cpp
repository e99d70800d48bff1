// SPDX-License-Identifier: MIT
// Replays fuzz inputs without libFuzzer: each file named on the command line, and each regular
// file of each folder named there, goes once through the target's LLVMFuzzerTestOneInput, in name
// order. Every build links each fuzz target with this main() and replays its kept corpus
// (tests/fuzz/corpus/<target>/) as a CTest test, gcc builds too. A mismatch aborts, as under
// libFuzzer; a missing path or no input at all fails, so a lost corpus cannot pass unnoticed.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  std::vector<fs::path> inputs;
  for (int i = 1; i < argc; ++i) {
    const fs::path path(argv[i]);
    if (fs::is_directory(path)) {
      for (const fs::directory_entry& entry : fs::directory_iterator(path)) {
        if (entry.is_regular_file()) inputs.push_back(entry.path());
      }
    } else if (fs::is_regular_file(path)) {
      inputs.push_back(path);
    } else {
      std::fprintf(stderr, "replay: no such file or folder: %s\n", argv[i]);
      return 2;
    }
  }
  if (inputs.empty()) {
    std::fprintf(stderr, "replay: no inputs (usage: %s FILE_OR_FOLDER...)\n", argv[0]);
    return 2;
  }
  std::sort(inputs.begin(), inputs.end());
  for (const fs::path& input : inputs) {
    std::ifstream file(input, std::ios::binary);
    if (!file) {
      std::fprintf(stderr, "replay: cannot open %s\n", input.string().c_str());
      return 2;
    }
    const std::vector<char> bytes((std::istreambuf_iterator<char>(file)),
                                  std::istreambuf_iterator<char>());
    std::printf("replay: %s (%zu bytes)\n", input.string().c_str(), bytes.size());
    std::fflush(stdout);  // the input that aborts is the last one printed
    // A copy in memory of exactly its size, as libFuzzer passes it (ASan sees reads past it).
    std::vector<std::uint8_t> data(bytes.begin(), bytes.end());
    const std::uint8_t none = 0;
    LLVMFuzzerTestOneInput(data.empty() ? &none : data.data(), data.size());
  }
  std::printf("replay: %zu inputs passed\n", inputs.size());
  return 0;
}
