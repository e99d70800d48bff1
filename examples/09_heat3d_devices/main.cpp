// SPDX-License-Identifier: MIT
// examples/09_heat3d_devices: example 08's 3-D heat equation (Jacobi) solver on several devices
// of one process, with clbuf::DeviceGroup instead of MPI ranks. The cube of edge N (x fastest,
// then z slowest) is one ShardedBuffer split into slabs of whole z-planes over the group's
// devices (Partition::even(N * N)), each shard holding its planes with one ghost plane below and
// above; a ShardedHalo fills the ghost planes. Every iteration starts the exchange, runs the
// kernel on each device's planes whose stencil needs no ghost, finishes the exchange, then runs
// it on the planes next to the ghosts.
//
// The arithmetic is example 08's (kernel, initial field and checksum: ../heat3d_common.hpp), so
// the final field is bit for bit the same on any number of devices, and its last line
//   field checksum: <64-bit FNV-1a of the final field, 16 hex digits>
// equals example 08's (on any number of ranks). The line before names how many devices ran it:
//   devices: <count>
//   build/examples/09_heat3d_devices --n 64 --iters 100
// Options: --n N (edge, 3 to 1024, default 64), --iters K (default 100), --devices SEL (a
// DeviceGroup selector: default every device of the type clbuf would pick; "all", "cpu", "gpu",
// "0:0, 0:1", ...), --separate (a context per device: the exchange through pinned host memory;
// default: a context per platform, device copies), --max-shard-bytes B (at most B bytes a shard,
// ghost planes included: a device holds its slab as several shards, pieces of whole planes, the
// halo exchanged between them too; default: the device's max allocation; the same checksum at
// any B), --verify (a host reference of the whole cube, compared byte for byte).
#include <clbuf/clbuf.hpp>

#include "../heat3d_common.hpp"

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace {

using heat3d::fnv1a;
using heat3d::hex;
using heat3d::host_reference;
using heat3d::initial_field;
using heat3d::kernel_source;
using heat3d::parse_number;

struct Settings {
  std::size_t n = 64;
  std::size_t iters = 100;
  std::string devices;
  std::size_t max_shard_bytes = 0;  // 0: the device's max allocation
  bool separate = false;
  bool verify = false;
};

/// The message for bad arguments, or "".
std::string parse(int argc, char** argv, Settings& settings) {
  const std::string usage =
      "usage: 09_heat3d_devices [--n N] [--iters K] [--devices SEL] [--separate] "
      "[--max-shard-bytes B] [--verify]";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--verify" || arg == "--separate") {
      (arg == "--verify" ? settings.verify : settings.separate) = true;
      continue;
    }
    if (arg != "--n" && arg != "--iters" && arg != "--devices" && arg != "--max-shard-bytes") {
      return "unknown argument '" + arg + "'\n" + usage;
    }
    if (i + 1 == argc) return arg + " needs a value\n" + usage;
    const std::string value = argv[++i];
    if (arg == "--devices") settings.devices = value;
    if (arg == "--n" && !parse_number(value, 3, 1024, settings.n)) {
      return "--n must be a whole number from 3 to 1024 (got '" + value + "')";
    }
    if (arg == "--iters" && !parse_number(value, 0, 100000000, settings.iters)) {
      return "--iters must be a whole number from 0 to 100000000 (got '" + value + "')";
    }
    if (arg == "--max-shard-bytes" &&
        !parse_number(value, 0, std::size_t{1} << 50, settings.max_shard_bytes)) {
      return "--max-shard-bytes must be a whole number from 0 to 2^50 (got '" + value + "')";
    }
  }
  return "";
}

/// Planes [first, first + count) of a shard (local, ghost plane 0 included).
struct Planes {
  std::size_t first = 0;
  std::size_t count = 0;
};

/// One shard's part: its kernel and the planes it updates before and after the exchange.
struct Part {
  cl::Kernel kernel;
  Planes inner;               // need no ghost plane
  std::vector<Planes> shell;  // next to a ghost plane: after finish()
};

/// The solver: two fields (ping-pong) sharded alike, the halo plan, a kernel per device.
class Solver {
 public:
  Solver(clbuf::DeviceGroup& group, std::size_t n, std::size_t max_shard_bytes)
      : group_(group),
        n_(n),
        in_(group.scatter(initial_field(n), slabs(n, max_shard_bytes), 1)),
        out_(group.scatter(initial_field(n), slabs(n, max_shard_bytes), 1)),
        halo_(group, in_) {
    for (std::size_t i = 0; i < in_.shards(); ++i) parts_.push_back(part(i));
  }

  /// Slabs of whole z-planes, at most `max_shard_bytes` a shard (0: no cap but the device's).
  static clbuf::Partition slabs(std::size_t n, std::size_t max_shard_bytes) {
    return clbuf::Partition::even(n * n).max_shard_bytes(max_shard_bytes);
  }

  std::size_t shards() const { return in_.shards(); }

  /// One iteration: returns the seconds spent in start() and finish().
  double step() {
    auto clock = std::chrono::steady_clock::now();
    halo_.start(in_);
    double exchange = seconds_since(clock);
    for (std::size_t i = 0; i < parts_.size(); ++i) launch(i, parts_[i].inner);
    clock = std::chrono::steady_clock::now();
    halo_.finish();
    exchange += seconds_since(clock);
    for (std::size_t i = 0; i < parts_.size(); ++i) {
      for (const Planes& planes : parts_[i].shell) launch(i, planes);
    }
    std::swap(in_, out_);
    return exchange;
  }

  std::vector<double> field() { return group_.gather(in_); }

  static double seconds_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }

 private:
  /// The jacobi program for device d, built once.
  cl::Program& program(std::size_t d) {
    auto built = programs_.find(d);
    if (built != programs_.end()) return built->second;
    const cl::Device device = group_.manager(d).queue().getInfo<CL_QUEUE_DEVICE>();
    if (device.getInfo<CL_DEVICE_DOUBLE_FP_CONFIG>() == 0) {
      throw std::runtime_error("device " + std::to_string(d) + " has no double precision");
    }
    cl::Program program(group_.manager(d).context(), kernel_source);
    if (program.build({device}) != CL_SUCCESS) {
      throw std::runtime_error("the jacobi kernel did not build: " +
                               program.getBuildInfo<CL_PROGRAM_BUILD_LOG>(device));
    }
    return programs_.emplace(d, program).first->second;
  }

  /// Shard i's kernel and planes: those off the cube's faces z = 0 and z = N - 1.
  Part part(std::size_t i) {
    Part result;
    result.kernel = cl::Kernel(program(in_.device(i)), "jacobi");
    const std::size_t plane = n_ * n_;
    const std::size_t first = in_.offset(i) / plane;  // global z of local plane 1
    const std::size_t count = in_.count(i) / plane;
    const std::size_t low = std::max<std::size_t>(first, 1);   // global, updated
    const std::size_t high = std::min(first + count, n_ - 1);  // one past
    if (low >= high) return result;
    const std::size_t inner_low = std::max(low, first + 1);  // not next to a ghost
    const std::size_t inner_high = std::min(high, first + count - 1);
    if (inner_low < inner_high) {
      result.inner = {inner_low - first + 1, inner_high - inner_low};
      if (low < inner_low) result.shell.push_back({low - first + 1, inner_low - low});
      if (inner_high < high) result.shell.push_back({inner_high - first + 1, high - inner_high});
    } else {
      result.shell.push_back({low - first + 1, high - low});
    }
    return result;
  }

  void launch(std::size_t i, const Planes& planes) {
    if (planes.count == 0 || n_ < 3) return;
    cl::Kernel& kernel = parts_[i].kernel;
    kernel.setArg(0, in_.shard(i).native());
    kernel.setArg(1, out_.shard(i).native());
    kernel.setArg(2, static_cast<cl_ulong>(n_));
    kernel.setArg(3, static_cast<cl_ulong>(n_ * n_));
    kernel.setArg(4, static_cast<cl_ulong>(1));
    kernel.setArg(5, static_cast<cl_ulong>(1));
    kernel.setArg(6, static_cast<cl_ulong>(planes.first));
    cl::CommandQueue queue = group_.manager(in_.device(i)).queue();
    queue.enqueueNDRangeKernel(kernel, cl::NullRange, cl::NDRange(n_ - 2, n_ - 2, planes.count));
    queue.flush();  // each device computes while the host starts the next
  }

  clbuf::DeviceGroup& group_;
  std::size_t n_;
  clbuf::ShardedBuffer<double> in_;
  clbuf::ShardedBuffer<double> out_;
  clbuf::ShardedHalo<double> halo_;
  std::vector<Part> parts_;
  std::map<std::size_t, cl::Program> programs_;  // by device
};

int run(const Settings& settings) {
  clbuf::DeviceGroup group(
      settings.devices, clbuf::Options(),
      settings.separate ? clbuf::ContextSharing::per_device : clbuf::ContextSharing::per_platform);
  Solver solver(group, settings.n, settings.max_shard_bytes);
  const auto clock = std::chrono::steady_clock::now();
  double exchange = 0.0;
  for (std::size_t iter = 0; iter < settings.iters; ++iter) exchange += solver.step();
  group.finish();
  const double total = Solver::seconds_since(clock);
  const std::vector<double> field = solver.field();
  const double iters = static_cast<double>(std::max<std::size_t>(settings.iters, 1));
  std::printf("%s: %zu^3 doubles, %zu iterations, slabs of z-planes, %s\n",
              group.manager(0).device().name.c_str(), settings.n, settings.iters,
              settings.separate ? "a context per device" : "a context per platform");
  std::printf("shards: %zu\n", solver.shards());
  std::printf("time per iteration %.3f ms, exchange %.3f ms (%.0f%%)\n", 1e3 * total / iters,
              1e3 * exchange / iters, total > 0.0 ? 100.0 * exchange / total : 0.0);
  int status = 0;
  if (settings.verify) {
    const std::vector<double> reference = host_reference(settings.n, settings.iters);
    const bool same =
        std::memcmp(reference.data(), field.data(), field.size() * sizeof(double)) == 0;
    std::printf("%s the host reference\n", same ? "matches" : "DIFFERS from");
    status = same ? 0 : 1;
  }
  std::printf("devices: %zu\n", group.size());
  std::printf("field checksum: %s\n", hex(fnv1a(field)).c_str());
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  Settings settings;
  const std::string problem = parse(argc, argv, settings);
  if (!problem.empty()) {
    std::cerr << "09_heat3d_devices: " << problem << "\n";
    return 2;
  }
  try {
    return run(settings);
  } catch (const std::exception& e) {
    std::cerr << "09_heat3d_devices: " << e.what() << "\n";
    return 1;
  }
}
