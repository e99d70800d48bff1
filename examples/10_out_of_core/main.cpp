// SPDX-License-Identifier: MIT
// Example 10: an array larger than the device memory it may use, streamed through the device.
//
// A grey image of `rows` rows of `width` 32-bit pixels is blurred along each row by a 5-tap
// binomial filter ((a + 4b + 6c + 4d + e) / 16, edges clamped to the row): integer arithmetic,
// so the device's result equals the host reference bit for bit. The example gives itself a
// device-memory budget a quarter of the image (input and output), and clbuf::stream_tiles cuts
// the image into tiles of whole rows that fit it, with up to three tiles in flight: one uploads
// while another's kernel runs and a third downloads. It prints
//   tiles: <k> in flight: <d>
//   checksum: <16 hex digits>          (FNV-1a of the output's bytes)
// and fails unless every pixel equals the host reference.
//
// Usage: 10_out_of_core [--width W] [--rows R] [--budget-fraction F]  (budget = image bytes / F)
#include <clbuf/clbuf.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

const char* const kBlur = R"CLC(
__kernel void blur_rows(__global const uint* in, __global uint* out, ulong width, ulong count) {
  size_t i = get_global_id(0);
  if (i >= count) return;
  size_t x = i % width, row = i - x;
  size_t l2 = x >= 2 ? x - 2 : 0, l1 = x >= 1 ? x - 1 : 0;
  size_t r1 = x + 1 < width ? x + 1 : width - 1, r2 = x + 2 < width ? x + 2 : width - 1;
  out[i] = (in[row + l2] + 4u * in[row + l1] + 6u * in[i] + 4u * in[row + r1] + in[row + r2]) >> 4;
}
)CLC";

/// The pixel at (x, row) of the image: a smooth gradient with a hash's noise, < 2^24.
std::uint32_t pixel(std::size_t i) {
  std::uint64_t h = i * 0x9E3779B97F4A7C15ull;
  h ^= h >> 29;
  return static_cast<std::uint32_t>((i * 7 + (h & 0xFFFF)) & 0xFFFFFF);
}

std::vector<std::uint32_t> host_reference(const std::vector<std::uint32_t>& in, std::size_t width) {
  std::vector<std::uint32_t> out(in.size());
  for (std::size_t row = 0; row < in.size(); row += width) {
    for (std::size_t x = 0; x < width; ++x) {
      const auto at = [&](std::size_t c) { return in[row + c]; };
      const std::size_t l2 = x >= 2 ? x - 2 : 0, l1 = x >= 1 ? x - 1 : 0;
      const std::size_t r1 = x + 1 < width ? x + 1 : width - 1;
      const std::size_t r2 = x + 2 < width ? x + 2 : width - 1;
      out[row + x] = (at(l2) + 4u * at(l1) + 6u * at(x) + 4u * at(r1) + at(r2)) >> 4;
    }
  }
  return out;
}

std::uint64_t fnv1a(const std::vector<std::uint32_t>& data) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  const auto* bytes = reinterpret_cast<const unsigned char*>(data.data());
  for (std::size_t i = 0; i < data.size() * sizeof(std::uint32_t); ++i) {
    h = (h ^ bytes[i]) * 0x100000001b3ull;
  }
  return h;
}

std::size_t number(const char* text, const char* name) {
  char* end = nullptr;
  const unsigned long long value = std::strtoull(text, &end, 10);
  if (end == text || *end != '\0' || value == 0) {
    throw std::invalid_argument(std::string(name) + " needs a positive number, not '" + text + "'");
  }
  return static_cast<std::size_t>(value);
}

int run(int argc, char** argv) {
  std::size_t width = 1024, rows = 2048, fraction = 4;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--width")
      width = number(argv[i + 1], "--width");
    else if (flag == "--rows")
      rows = number(argv[i + 1], "--rows");
    else if (flag == "--budget-fraction")
      fraction = number(argv[i + 1], "--budget-fraction");
    else
      throw std::invalid_argument("unknown argument '" + flag + "'");
  }
  const std::size_t count = width * rows;
  std::vector<std::uint32_t> image(count);
  for (std::size_t i = 0; i < count; ++i) image[i] = pixel(i);

  clbuf::BufferManager bm;
  cl::Program program(bm.context(), kBlur);
  program.build();
  cl::Kernel blur(program, "blur_rows");

  // The budget: a 1/fraction of the image's input and output; three tiles in flight, each of the
  // whole rows that fit the budget's third (plan_tiles says how many elements do).
  clbuf::TileStreamOptions options;
  options.memory_budget_bytes = 2 * count * sizeof(std::uint32_t) / fraction;
  options.in_flight = 3;
  const clbuf::TilePlan fits = clbuf::plan_tiles<std::uint32_t>(bm, count, options);
  if (fits.tile_elements < width) throw std::invalid_argument("the budget holds no row");
  options.tile_elements = fits.tile_elements / width * width;

  std::vector<std::uint32_t> blurred(count);
  const clbuf::TileReport report = clbuf::stream_tiles(
      bm, image.data(), blurred.data(), count,
      [&](const clbuf::Tile<std::uint32_t, std::uint32_t>& tile) {
        blur.setArg(0, tile.in.native());
        blur.setArg(1, tile.out.native());
        blur.setArg(2, static_cast<cl_ulong>(width));
        blur.setArg(3, static_cast<cl_ulong>(tile.count));
        cl::Event done;
        tile.queue.enqueueNDRangeKernel(blur, cl::NullRange, cl::NDRange(tile.count), cl::NullRange,
                                        &tile.after, &done);
        return done;
      },
      options);

  std::printf("image: %zu x %zu pixels (%zu MiB), device budget %zu KiB (%zu KiB used)\n", width,
              rows, count * sizeof(std::uint32_t) >> 20, options.memory_budget_bytes >> 10,
              report.plan.device_bytes >> 10);
  if (blurred != host_reference(image, width)) {
    std::fprintf(stderr, "the device's image differs from the host reference\n");
    return 1;
  }
  std::printf("matches the host reference\n");
  std::printf("tiles: %zu in flight: %zu\n", report.plan.tiles, report.plan.in_flight);
  std::printf("checksum: %016llx\n", static_cast<unsigned long long>(fnv1a(blurred)));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "10_out_of_core: %s\n", error.what());
    return 1;
  }
}
