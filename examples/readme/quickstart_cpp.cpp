// The README's C++ quick start, compiled and run by ctest as it stands:
// CMake copies the block after README.md's `<!-- ctest: readme_cpp -->`
// line into readme_cpp.inc, included as the body of run() below, with the
// helper the block names (copy_from_gpu, which writes each key's pattern).
// A README that no longer compiles, or that throws, fails ctest.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kvtier.hpp"

static int stored_blocks = 0;

// The GPU -> slot copy: the first bytes of the key's pattern.
static void copy_from_gpu(const std::string &key, void *slot) {
  stored_blocks++;
  auto *bytes = static_cast<unsigned char *>(slot);
  for (std::size_t i = 0; i < 64; i++) bytes[i] = static_cast<unsigned char>(key[i % key.size()] + i);
}

static void run() {
#include "readme_cpp.inc"
}

int main() {
  // The README's fs directory, from an earlier run.
  if (std::system("rm -rf /tmp/kvtier-quickstart-cpp") != 0) return EXIT_FAILURE;
  try {
    run();
  } catch (const kvtier::error &e) {
    std::fprintf(stderr, "readme_cpp: %s\n", e.what());
    return EXIT_FAILURE;
  }
  if (std::system("rm -rf /tmp/kvtier-quickstart-cpp") != 0) return EXIT_FAILURE;
  if (stored_blocks != 2) {
    std::fprintf(stderr, "readme_cpp: %d blocks stored, not 2\n", stored_blocks);
    return EXIT_FAILURE;
  }
  std::printf("readme_cpp: the README's C++ quick start stored 2 blocks\n");
  return EXIT_SUCCESS;
}
