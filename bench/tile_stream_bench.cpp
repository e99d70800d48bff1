// SPDX-License-Identifier: MIT
// What overlapping tiles buys (issue 43): clbuf::stream_tiles over an array with 3 tiles in flight
// against the same work tile after tile (1 in flight: each tile's upload, kernels and download
// before the next tile's upload) and against the sum of the parts, each timed alone over the
// same tiles: the host's copies into and out of the pinned chunks, the uploads, the kernels, the
// downloads. Best of --reps runs each, interleaved. Prints one line per variant, then the ratios:
//   overlapped / serial, overlapped / sum of parts, overlapped / largest part.
// --group N adds a row: the same stream over a DeviceGroup of the first N devices (the tiles
// dealt round robin) against the stream through the group's first device alone, best of --reps
// each, interleaved, and their ratio.
// Usage: tile_stream_bench [--mib N] [--tile-mib N] [--reps N] [--work N] [--in-flight N]
//                          [--copy-threads N] [--memory discrete|host|automatic] [--check]
//                          [--group N]
#include <clbuf/clbuf.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

const char* const kSource = R"CLC(
__kernel void work(__global const float* in, __global float* out, ulong count, int rounds) {
  size_t i = get_global_id(0);
  if (i >= count) return;
  float x = in[i];
  for (int r = 0; r < rounds; ++r) x = x * 0.999f + 0.5f;
  out[i] = x;
}
)CLC";

double now_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct Args {
  std::size_t mib = 64, tile_mib = 4, reps = 3, in_flight = 3, group = 0;
  unsigned copy_threads = 0;
  int work = 64;
  std::string memory = "discrete";
  bool check = false;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const char* next = i + 1 < argc ? argv[i + 1] : "0";
    if (arg == "--mib")
      a.mib = std::strtoul(next, nullptr, 10), ++i;
    else if (arg == "--tile-mib")
      a.tile_mib = std::strtoul(next, nullptr, 10), ++i;
    else if (arg == "--reps")
      a.reps = std::strtoul(next, nullptr, 10), ++i;
    else if (arg == "--work")
      a.work = std::atoi(next), ++i;
    else if (arg == "--memory")
      a.memory = next, ++i;
    else if (arg == "--in-flight")
      a.in_flight = std::strtoul(next, nullptr, 10), ++i;
    else if (arg == "--copy-threads")
      a.copy_threads = static_cast<unsigned>(std::atoi(next)), ++i;
    else if (arg == "--group")
      a.group = std::strtoul(next, nullptr, 10), ++i;
    else if (arg == "--check")
      a.check = true;
  }
  return a;
}

clbuf::MemoryModel model_of(const std::string& name) {
  if (name == "host") return clbuf::MemoryModel::host;
  if (name == "automatic") return clbuf::MemoryModel::automatic;
  return clbuf::MemoryModel::discrete;
}

struct Bench {
  clbuf::BufferManager& bm;
  cl::Kernel kernel;
  std::size_t count, tile;
  int work;
  std::vector<float> in, out;

  /// The stream with `in_flight` tiles in flight; its time in ms.
  double stream(std::size_t in_flight) {
    clbuf::TileStreamOptions options;
    options.tile_elements = tile;
    options.in_flight = in_flight;
    options.memory_budget_bytes = std::size_t{1} << 40;
    const double start = now_ms();
    clbuf::stream_tiles(
        bm, in.data(), out.data(), count,
        [&](const clbuf::Tile<float, float>& t) {
          kernel.setArg(0, t.in.native());
          kernel.setArg(1, t.out.native());
          kernel.setArg(2, static_cast<cl_ulong>(t.count));
          kernel.setArg(3, work);
          cl::Event done;
          t.queue.enqueueNDRangeKernel(kernel, cl::NullRange, cl::NDRange(t.count), cl::NullRange,
                                       &t.after, &done);
          return done;
        },
        options);
    return now_ms() - start;
  }

  /// The parts alone over the same tiles: host copies in and out, uploads, kernels, downloads.
  std::vector<double> parts() {
    std::vector<double> ms(5, 0.0);
    clbuf::PinnedBuffer<float> chunk = bm.allocate_pinned<float>(tile);
    clbuf::DeviceBuffer<float> a = bm.allocate<float>(tile), b = bm.allocate<float>(tile);
    cl::CommandQueue queue = bm.queue();
    for (std::size_t first = 0; first < count; first += tile) {
      const std::size_t n = std::min(tile, count - first);
      double t = now_ms();
      std::memcpy(chunk.data(), in.data() + first, n * sizeof(float));
      ms[0] += now_ms() - t;
      t = now_ms();
      queue.enqueueWriteBuffer(a.native(), CL_TRUE, 0, n * sizeof(float), chunk.data());
      ms[1] += now_ms() - t;
      kernel.setArg(0, a.native());
      kernel.setArg(1, b.native());
      kernel.setArg(2, static_cast<cl_ulong>(n));
      kernel.setArg(3, work);
      t = now_ms();
      queue.enqueueNDRangeKernel(kernel, cl::NullRange, cl::NDRange(n));
      queue.finish();
      ms[2] += now_ms() - t;
      t = now_ms();
      queue.enqueueReadBuffer(b.native(), CL_TRUE, 0, n * sizeof(float), chunk.data());
      ms[3] += now_ms() - t;
      t = now_ms();
      std::memcpy(out.data() + first, chunk.data(), n * sizeof(float));
      ms[4] += now_ms() - t;
    }
    return ms;
  }

  bool correct() const {
    for (std::size_t i = 0; i < count; i += 997) {
      float x = in[i];
      for (int r = 0; r < work; ++r) x = x * 0.999f + 0.5f;
      if (std::abs(out[i] - x) > 1e-3f * std::max(1.0f, std::abs(x))) return false;
    }
    return true;
  }
};

/// The group row: the stream over `devices` devices against the first device alone.
int group_row(const Args& args, const clbuf::Options& options, Bench& bench) {
  std::vector<clbuf::DeviceInfo> devices = clbuf::list_devices();
  if (devices.size() < args.group) {
    std::printf(
        "group row skipped: --group %zu, %zu devices (POCL_DEVICES=\"pthread pthread\" "
        "makes two PoCL devices)\n",
        args.group, devices.size());
    return 0;
  }
  devices.resize(args.group);
  clbuf::DeviceGroup group(devices, options);
  std::vector<cl::Kernel> kernels;
  for (std::size_t d = 0; d < group.size(); ++d) {
    cl::Program program(group.manager(d).context(), kSource);
    program.build();
    kernels.emplace_back(program, "work");
  }
  clbuf::GroupTileOptions stream;
  stream.tile_elements = bench.tile;
  stream.in_flight = args.in_flight;
  stream.memory_budget_bytes = std::size_t{1} << 40;
  const auto fn = [&](const clbuf::Tile<float, float>& t) {
    cl::Kernel& kernel = kernels[t.device];
    kernel.setArg(0, t.in.native());
    kernel.setArg(1, t.out.native());
    kernel.setArg(2, static_cast<cl_ulong>(t.count));
    kernel.setArg(3, bench.work);
    cl::Event done;
    t.queue.enqueueNDRangeKernel(kernel, cl::NullRange, cl::NDRange(t.count), cl::NullRange,
                                 &t.after, &done);
    return done;
  };
  const auto timed = [&](bool all) {
    const double start = now_ms();
    if (all) {
      clbuf::stream_tiles(group, bench.in.data(), bench.out.data(), bench.count, fn, stream);
    } else {
      clbuf::stream_tiles(group.manager(0), bench.in.data(), bench.out.data(), bench.count, fn,
                          stream);
    }
    return now_ms() - start;
  };
  timed(true);  // warm: every device's pools filled
  double one = 1e300, many = 1e300;
  for (std::size_t r = 0; r < args.reps; ++r) {
    one = std::min(one, timed(false));
    if (args.check && !bench.correct()) return std::printf("WRONG (one device)\n"), 1;
    many = std::min(many, timed(true));
    if (args.check && !bench.correct()) return std::printf("WRONG (group)\n"), 1;
  }
  std::printf("group of %zu devices (%zu in flight each): one device %9.2f ms, group %9.2f ms\n",
              group.size(), args.in_flight, one, many);
  std::printf("ratio group/one %.3f\n", many / one);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);
  clbuf::Options options;
  options.memory = model_of(args.memory);
  options.copy_threads = args.copy_threads;
  clbuf::BufferManager bm(std::string(), options);
  cl::Program program(bm.context(), kSource);
  program.build();
  Bench bench{bm,
              cl::Kernel(program, "work"),
              (args.mib << 20) / sizeof(float),
              (args.tile_mib << 20) / sizeof(float),
              args.work,
              {},
              {}};
  bench.in.resize(bench.count);
  bench.out.resize(bench.count);
  for (std::size_t i = 0; i < bench.count; ++i) bench.in[i] = static_cast<float>(i % 1000);
  std::printf("device: %s (memory %s), %zu MiB in %zu MiB tiles, %d rounds a kernel\n",
              bm.device().name.c_str(), clbuf::to_string(bm.memory_model()), args.mib,
              args.tile_mib, args.work);
  const clbuf::MemoryReport fits = bm.memory_report();
  std::printf(
      "device memory %llu MiB, max allocation %llu MiB; an automatic stream of floats: "
      "%zu tiles in flight of %zu elements\n",
      static_cast<unsigned long long>(fits.device_memory_bytes >> 20),
      static_cast<unsigned long long>(fits.max_alloc_bytes >> 20), fits.stream.in_flight,
      fits.stream.tile_elements);
  double overlapped = 1e300, serial = 1e300;
  std::vector<double> parts(5, 1e300);
  bench.stream(args.in_flight);  // warm: kernels built, pools filled
  for (std::size_t r = 0; r < args.reps; ++r) {
    overlapped = std::min(overlapped, bench.stream(args.in_flight));
    if (args.check && !bench.correct()) return std::printf("WRONG (overlapped)\n"), 1;
    serial = std::min(serial, bench.stream(1));
    if (args.check && !bench.correct()) return std::printf("WRONG (serial)\n"), 1;
    const std::vector<double> p = bench.parts();
    for (std::size_t i = 0; i < p.size(); ++i) parts[i] = std::min(parts[i], p[i]);
  }
  const char* names[5] = {"copy in", "upload", "kernels", "download", "copy out"};
  double sum = 0, largest = 0;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    std::printf("part %-9s %9.2f ms\n", names[i], parts[i]);
    sum += parts[i];
    largest = std::max(largest, parts[i]);
  }
  std::printf("sum of parts   %9.2f ms\n", sum);
  std::printf("serial (1)     %9.2f ms\n", serial);
  std::printf("overlapped (%zu) %9.2f ms\n", args.in_flight, overlapped);
  std::printf("ratio overlapped/serial %.3f  overlapped/sum %.3f  overlapped/largest %.3f\n",
              overlapped / serial, overlapped / sum, overlapped / largest);
  if (args.group > 0) return group_row(args, options, bench);
  return 0;
}
