// SPDX-License-Identifier: MIT
// examples/08_heat3d_mpi: a distributed 3-D heat equation (Jacobi) solver in double precision.
// The global field is a cube of edge N (x fastest, then y, then z), split into slabs of whole
// z-planes, one slab per rank, each with a ghost plane on either side. Every iteration starts a
// HaloExchange of the ghost planes, runs the OpenCL kernel on the planes that need no ghost,
// finishes the exchange, then runs the planes next to the ghosts.
//
// The update is the explicit heat step with the largest stable time step (alpha = 1/6), which is
// Jacobi's iteration for Laplace's equation: every point not on the global boundary becomes the
// mean of its six neighbours, summed in one fixed order, then divided by 6. There is no
// reduction in the update, so every point is the same arithmetic on the same inputs however the
// cube is split: the final field is bit for bit the same on any number of ranks. The boundary is
// fixed (Dirichlet): 1 on the face z = 0, 0 on the other five faces; the interior starts at
// ((7x + 13y + 29z) mod 64) / 64.
//
// Rank 0 prints the time per iteration and the share of it spent in the exchange (inside
// start() and finish(), the slowest rank), and as its last line
//   field checksum: <64-bit FNV-1a of the final global field, 16 hex digits>
// over the bytes of all N^3 doubles in global order (x fastest, z slowest), boundary included,
// in the host's byte order. With --iters 0 it is the initial field's checksum.
//   mpirun -np 4 build/examples/08_heat3d_mpi/08_heat3d_mpi --n 64 --iters 100
// Options: --n N (edge, 3 to 1024, default 64), --iters K (default 100), --report R (every R
// iterations, the largest change of an iteration over all ranks; default 0, off), --verify
// (rank 0 runs a host reference of the whole cube and compares every byte).
#include <mpi.h>
#include <clbuf/mpi.hpp>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace {

// FP_CONTRACT OFF: a fused multiply-add would round differently from the host reference.
const char* const kernel_source = R"(
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#pragma OPENCL FP_CONTRACT OFF
__kernel void jacobi(__global const double* in, __global double* out, ulong n, ulong first_plane) {
  const size_t plane = n * n;
  const size_t i = (first_plane + get_global_id(2)) * plane + (get_global_id(1) + 1) * n +
                   get_global_id(0) + 1;
  out[i] = (in[i - 1] + in[i + 1] + in[i - n] + in[i + n] + in[i - plane] + in[i + plane]) / 6.0;
}
)";

struct Settings {
  std::size_t n = 64;
  std::size_t iters = 100;
  std::size_t report = 0;
  bool verify = false;
};

/// Reads a whole decimal number in [low, high]; false for anything else.
bool parse_number(const std::string& text, std::size_t low, std::size_t high, std::size_t& out) {
  if (text.empty() || text.size() > 9 ||
      text.find_first_not_of("0123456789") != std::string::npos) {
    return false;
  }
  out = static_cast<std::size_t>(std::stoul(text));
  return out >= low && out <= high;
}

/// Every rank parses the same arguments, so every rank reaches the same verdict without talking
/// to the others: an error needs no message to stop the job. Returns the message, or "".
std::string parse(int argc, char** argv, int ranks, Settings& settings) {
  const std::string usage = "usage: 08_heat3d_mpi [--n N] [--iters K] [--report R] [--verify]";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--verify") {
      settings.verify = true;
      continue;
    }
    if (arg != "--n" && arg != "--iters" && arg != "--report") {
      return "unknown argument '" + arg + "'\n" + usage;
    }
    if (i + 1 == argc) return arg + " needs a value\n" + usage;
    const std::string value = argv[++i];
    if (arg == "--n" && !parse_number(value, 3, 1024, settings.n)) {
      return "--n must be a whole number from 3 to 1024 (got '" + value + "')";
    }
    if (arg == "--iters" && !parse_number(value, 0, 100000000, settings.iters)) {
      return "--iters must be a whole number from 0 to 100000000 (got '" + value + "')";
    }
    if (arg == "--report" && !parse_number(value, 0, 100000000, settings.report)) {
      return "--report must be a whole number from 0 to 100000000 (got '" + value + "')";
    }
  }
  if (static_cast<std::size_t>(ranks) > settings.n) {
    return std::to_string(ranks) + " ranks for --n " + std::to_string(settings.n) +
           ": every rank needs at least one z-plane, so run at most " + std::to_string(settings.n) +
           " ranks or make --n larger";
  }
  return "";
}

/// Rank r's slab: `count` planes from global plane `first`; the remainder of N / ranks goes one
/// plane each to the lowest ranks.
struct Slab {
  std::size_t first = 0;
  std::size_t count = 0;
};

Slab slab_of(std::size_t n, std::size_t ranks, std::size_t rank) {
  return {rank * (n / ranks) + std::min(rank, n % ranks), n / ranks + (rank < n % ranks ? 1 : 0)};
}

double initial_value(std::size_t n, std::size_t x, std::size_t y, std::size_t z) {
  if (z == 0) return 1.0;
  if (x == 0 || y == 0 || x == n - 1 || y == n - 1 || z == n - 1) return 0.0;
  return static_cast<double>((7 * x + 13 * y + 29 * z) % 64) / 64.0;
}

/// Global planes [first, first + count) of the initial field.
std::vector<double> initial_planes(std::size_t n, std::size_t first, std::size_t count) {
  std::vector<double> field(count * n * n);
  std::size_t i = 0;
  for (std::size_t z = first; z < first + count; ++z) {
    for (std::size_t y = 0; y < n; ++y) {
      for (std::size_t x = 0; x < n; ++x) field[i++] = initial_value(n, x, y, z);
    }
  }
  return field;
}

/// The whole cube on the host, with the kernel's arithmetic in the kernel's order.
std::vector<double> host_reference(std::size_t n, std::size_t iters) {
  std::vector<double> in = initial_planes(n, 0, n);
  std::vector<double> out = in;
  const std::size_t plane = n * n;
  for (std::size_t step = 0; step < iters; ++step) {
    for (std::size_t z = 1; z + 1 < n; ++z) {
      for (std::size_t y = 1; y + 1 < n; ++y) {
        for (std::size_t x = 1; x + 1 < n; ++x) {
          const std::size_t i = z * plane + y * n + x;
          out[i] =
              (in[i - 1] + in[i + 1] + in[i - n] + in[i + n] + in[i - plane] + in[i + plane]) / 6.0;
        }
      }
    }
    std::swap(in, out);
  }
  return in;
}

std::uint64_t fnv1a(const std::vector<double>& field) {
  std::uint64_t hash = 0xcbf29ce484222325ULL;
  const unsigned char* bytes = reinterpret_cast<const unsigned char*>(field.data());
  for (std::size_t i = 0; i < field.size() * sizeof(double); ++i) {
    hash = (hash ^ bytes[i]) * 0x100000001b3ULL;
  }
  return hash;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

/// One rank's slab on the device: two fields (ping-pong), each [ghost | planes | ghost].
class Solver {
 public:
  Solver(clbuf::BufferManager& manager, clbuf::mpi::Communicator& comm, std::size_t n)
      : manager_(manager),
        comm_(comm),
        n_(n),
        plane_(n * n),
        slab_(slab_of(n, static_cast<std::size_t>(comm.size()),
                      static_cast<std::size_t>(comm.rank()))) {
    const int rank = comm.rank();
    const int below = rank > 0 ? rank - 1 : MPI_PROC_NULL;
    const int above = rank + 1 < comm.size() ? rank + 1 : MPI_PROC_NULL;
    // The first plane goes down with tag 1 and the last up with tag 2; one plan serves both
    // fields because HaloExchange takes the field at start().
    exchange_ = std::make_unique<clbuf::mpi::HaloExchange<double>>(
        comm, std::vector<clbuf::mpi::Neighbour>{
                  {below, plane_, 0, plane_, 1, 2},
                  {above, slab_.count * plane_, (slab_.count + 1) * plane_, plane_, 2, 1}});
    std::vector<double> start(plane_, 0.0);  // ghost planes: read only where a neighbour fills
    const std::vector<double> mine = initial_planes(n, slab_.first, slab_.count);
    start.insert(start.end(), mine.begin(), mine.end());
    start.resize(start.size() + plane_, 0.0);
    in_ = manager.upload(start);
    out_ = manager.upload(start);  // the fixed boundary is in both fields and never written

    // Local planes [lo, hi] are updated (global planes 1 .. N-2); those next to a neighbour's
    // ghost wait for the exchange, the rest overlap it.
    const std::size_t lo = slab_.first == 0 ? 2 : 1;
    const std::size_t hi = slab_.first + slab_.count == n ? slab_.count - 1 : slab_.count;
    interior_lo_ = below != MPI_PROC_NULL ? std::max<std::size_t>(lo, 2) : lo;
    interior_hi_ = above != MPI_PROC_NULL ? std::min(hi, slab_.count - 1) : hi;
    if (below != MPI_PROC_NULL && lo <= 1 && 1 <= hi) edges_.push_back(1);
    if (above != MPI_PROC_NULL && lo <= slab_.count && slab_.count <= hi &&
        (edges_.empty() || edges_.back() != slab_.count)) {
      edges_.push_back(slab_.count);
    }

    const cl::Device device = manager.queue().getInfo<CL_QUEUE_DEVICE>();
    if (device.getInfo<CL_DEVICE_DOUBLE_FP_CONFIG>() == 0) {
      throw std::runtime_error("the device has no double precision (cl_khr_fp64)");
    }
    cl::Program program(manager.context(), kernel_source);
    if (program.build() != CL_SUCCESS) {
      throw std::runtime_error("the jacobi kernel did not build: " +
                               program.getBuildInfo<CL_PROGRAM_BUILD_LOG>(device));
    }
    kernel_ = cl::Kernel(program, "jacobi");
  }

  /// One iteration; adds the seconds spent in start() and finish() (the latter also to `wait`).
  void step(double& exchange, double& wait) {
    auto clock = std::chrono::steady_clock::now();
    exchange_->start(in_);
    exchange += seconds_since(clock);
    if (interior_lo_ <= interior_hi_) launch(interior_lo_, interior_hi_ - interior_lo_ + 1);
    clock = std::chrono::steady_clock::now();
    exchange_->finish();
    const double waited = seconds_since(clock);
    exchange += waited;
    wait += waited;
    for (const std::size_t plane : edges_) launch(plane, 1);
    std::swap(in_, out_);
  }

  /// Runs every launch of step() once, untimed: PoCL compiles a kernel for each new launch size
  /// at its first enqueue. It writes what the first step() writes over again, so the field is
  /// unchanged.
  void warm_up() {
    if (interior_lo_ <= interior_hi_) launch(interior_lo_, interior_hi_ - interior_lo_ + 1);
    for (const std::size_t plane : edges_) launch(plane, 1);
    manager_.queue().finish();
  }

  /// The largest |change| of the last iteration over this rank's planes.
  double last_change() {
    const std::size_t count = slab_.count * plane_;
    std::vector<double> now(count);
    std::vector<double> before(count);
    manager_.download(in_, now.data(), count, plane_);
    manager_.download(out_, before.data(), count, plane_);
    double most = 0.0;
    for (std::size_t i = 0; i < count; ++i) most = std::max(most, std::fabs(now[i] - before[i]));
    return most;
  }

  /// The whole field on rank 0 (in global order), empty elsewhere.
  std::vector<double> gather() {
    const int tag = 3;
    clbuf::DeviceBuffer<double> mine = manager_.view(in_, plane_, slab_.count * plane_);
    if (comm_.rank() != 0) {
      comm_.send(mine, 0, tag);
      return {};
    }
    clbuf::DeviceBuffer<double> all = manager_.allocate<double>(n_ * plane_);
    manager_.copy_bytes(mine, all, mine.size_bytes(), 0, 0);
    for (int source = 1; source < comm_.size(); ++source) {
      const Slab theirs =
          slab_of(n_, static_cast<std::size_t>(comm_.size()), static_cast<std::size_t>(source));
      clbuf::DeviceBuffer<double> part =
          manager_.view(all, theirs.first * plane_, theirs.count * plane_);
      comm_.recv(part, source, tag);
    }
    return manager_.download(all);
  }

 private:
  void launch(std::size_t first_plane, std::size_t planes) {
    kernel_.setArg(0, in_.native());
    kernel_.setArg(1, out_.native());
    kernel_.setArg(2, static_cast<cl_ulong>(n_));
    kernel_.setArg(3, static_cast<cl_ulong>(first_plane));
    manager_.queue().enqueueNDRangeKernel(kernel_, cl::NullRange,
                                          cl::NDRange(n_ - 2, n_ - 2, planes));
    manager_.queue().flush();  // so the device computes while this thread moves the exchange
  }

  clbuf::BufferManager& manager_;
  clbuf::mpi::Communicator& comm_;
  std::size_t n_ = 0;
  std::size_t plane_ = 0;
  Slab slab_;
  std::unique_ptr<clbuf::mpi::HaloExchange<double>> exchange_;
  clbuf::DeviceBuffer<double> in_;
  clbuf::DeviceBuffer<double> out_;
  std::size_t interior_lo_ = 0;
  std::size_t interior_hi_ = 0;
  std::vector<std::size_t> edges_;
  cl::Kernel kernel_;
};

std::string hex(std::uint64_t value) {
  char text[17];
  std::snprintf(text, sizeof text, "%016" PRIx64, value);
  return text;
}

int run(const Settings& settings) {
  clbuf::BufferManager manager(clbuf::mpi::local_device_selector());
  clbuf::mpi::Communicator comm(manager);
  const int rank = comm.rank();
  Solver solver(manager, comm, settings.n);
  clbuf::DeviceBuffer<double> change = manager.allocate<double>(1);

  solver.warm_up();
  comm.barrier();
  const auto clock = std::chrono::steady_clock::now();
  double exchange = 0.0;
  double wait = 0.0;
  double reporting = 0.0;
  for (std::size_t iter = 1; iter <= settings.iters; ++iter) {
    solver.step(exchange, wait);
    if (settings.report != 0 && iter % settings.report == 0) {
      const auto report_clock = std::chrono::steady_clock::now();
      manager.upload(change, std::vector<double>{solver.last_change()});
      comm.allreduce(change, clbuf::mpi::Op::max);
      const double most = manager.download(change)[0];
      if (rank == 0) std::printf("iteration %zu: max |change| %.6e\n", iter, most);
      reporting += seconds_since(report_clock);
    }
  }
  manager.queue().finish();
  const double total = seconds_since(clock) - reporting;

  // The slowest rank decides the time per iteration.
  double local[3] = {total, exchange, wait};
  double slowest[3] = {0.0, 0.0, 0.0};
  MPI_Reduce(local, slowest, 3, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);

  const std::vector<double> field = solver.gather();
  if (rank != 0) return 0;
  const double iters = static_cast<double>(std::max<std::size_t>(settings.iters, 1));
  std::printf("%s (%s): %d ranks, %zu^3 doubles, %zu iterations\n", manager.device().name.c_str(),
              clbuf::to_string(manager.memory_model()), comm.size(), settings.n, settings.iters);
  std::printf(
      "time per iteration %.3f ms, exchange %.3f ms (%.0f%%) of which waiting in "
      "finish() %.3f ms\n",
      1e3 * slowest[0] / iters, 1e3 * slowest[1] / iters,
      slowest[0] > 0.0 ? 100.0 * slowest[1] / slowest[0] : 0.0, 1e3 * slowest[2] / iters);
  int status = 0;
  if (settings.verify) {
    const std::vector<double> reference = host_reference(settings.n, settings.iters);
    const bool same =
        std::memcmp(reference.data(), field.data(), field.size() * sizeof(double)) == 0;
    std::printf("%s the host reference\n", same ? "matches" : "DIFFERS from");
    status = same ? 0 : 1;
  }
  std::printf("field checksum: %s\n", hex(fnv1a(field)).c_str());
  std::fflush(stdout);
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  Settings settings;
  const std::string problem = parse(argc, argv, size, settings);
  if (!problem.empty()) {
    if (rank == 0) std::cerr << "08_heat3d_mpi: " << problem << "\n";
    MPI_Finalize();
    return 2;
  }
  int status = 1;
  try {
    status = run(settings);
  } catch (const std::exception& e) {
    std::cerr << "rank " << rank << ": " << e.what() << "\n";
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Bcast(&status, 1, MPI_INT, 0, MPI_COMM_WORLD);
  MPI_Finalize();
  return status;
}
