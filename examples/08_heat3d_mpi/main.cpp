// SPDX-License-Identifier: MIT
// examples/08_heat3d_mpi: a distributed 3-D heat equation (Jacobi) solver in double precision.
// The global field is a cube of edge N (x fastest, then y, then z). By default (--decomp blocks)
// it is split into a 3-D grid of blocks, one per rank, on a Cartesian communicator
// (MPI_Dims_create over all ranks, MPI_Cart_create, not periodic): each block is held with one
// ghost layer on every side, and its six faces (strided boxes, packed on the device) are
// exchanged by a HaloExchange built by clbuf::mpi::cartesian_faces(). With --decomp slab it is
// split into slabs of whole z-planes with a ghost plane on either side (contiguous, two
// Neighbours of one plane each). Every iteration starts the HaloExchange, runs the OpenCL kernel
// on the cells whose stencil needs no ghost cell, finishes the exchange, then runs the kernel on
// the shell of cells next to the ghosts.
//
// The update is the explicit heat step with the largest stable time step (alpha = 1/6), which is
// Jacobi's iteration for Laplace's equation: every point not on the global boundary becomes the
// mean of its six neighbours, summed in one fixed order, then divided by 6. There is no
// reduction in the update, so every point is the same arithmetic on the same inputs however the
// cube is split: the final field is bit for bit the same on any number of ranks and either
// decomposition. The boundary is fixed (Dirichlet): 1 on the face z = 0, 0 on the other five
// faces; the interior starts at ((7x + 13y + 29z) mod 64) / 64.
//
// Rank 0 prints the time per iteration and the share of it spent in the exchange (inside
// start() and finish(), the slowest rank), and as its last line
//   field checksum: <64-bit FNV-1a of the final global field, 16 hex digits>
// over the bytes of all N^3 doubles in global order (x fastest, z slowest), boundary included,
// in the host's byte order. With --iters 0 it is the initial field's checksum.
//   mpirun -np 4 build/examples/08_heat3d_mpi/08_heat3d_mpi --n 64 --iters 100
// Options: --n N (edge, 3 to 1024, default 64), --iters K (default 100), --decomp blocks|slab
// (default blocks), --report R (every R iterations, the largest change of an iteration over all
// ranks; default 0, off), --verify (rank 0 runs a host reference of the whole cube and compares
// every byte), --checkpoint DIR --checkpoint-every K (after every K-th iteration, each rank's
// field and the iteration count go to the clbuf::Checkpoint DIR: atomic and checksummed, the
// previous one kept until the new one is whole on every rank), --restart DIR (start from the
// checkpoint DIR, which must be of the same --n, --decomp and number of ranks; --iters still
// counts from the start of the computation, so `--iters 2K` straight and `--iters K
// --checkpoint D --checkpoint-every K` then `--restart D --iters 2K` print the same checksum).
#include <mpi.h>
#include <clbuf/mpi.hpp>
#include <clbuf/mpi/checkpoint.hpp>

#include "../heat3d_common.hpp"

#include <algorithm>
#include <array>
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

using heat3d::fnv1a;
using heat3d::hex;
using heat3d::host_reference;
using heat3d::initial_value;
using heat3d::kernel_source;
using heat3d::parse_number;

enum class Decomp { blocks, slab };

struct Settings {
  std::size_t n = 64;
  std::size_t iters = 100;
  std::size_t report = 0;
  bool verify = false;
  Decomp decomp = Decomp::blocks;
  std::string checkpoint;  // --checkpoint DIR
  std::size_t checkpoint_every = 0;
  std::string restart;  // --restart DIR
};

using Triple = std::array<std::size_t, 3>;  // x, y, z

/// How many blocks along x, y and z. Slabs: 1 x 1 x P. Blocks: MPI_Dims_create's factors of P
/// (non-increasing), the most along z, the fewest along x: the faces normal to z and y are rows
/// of contiguous elements, the faces normal to x one element a row, so x is split last.
Triple grid_of(Decomp decomp, int ranks) {
  if (decomp == Decomp::slab) return {1, 1, static_cast<std::size_t>(ranks)};
  int dims[3] = {0, 0, 0};
  MPI_Dims_create(ranks, 3, dims);
  return {static_cast<std::size_t>(dims[2]), static_cast<std::size_t>(dims[1]),
          static_cast<std::size_t>(dims[0])};
}

/// Every rank parses the same arguments, so every rank reaches the same verdict without talking
/// to the others: an error needs no message to stop the job. Returns the message, or "".
std::string parse(int argc, char** argv, int ranks, Settings& settings) {
  const std::string usage =
      "usage: 08_heat3d_mpi [--n N] [--iters K] [--decomp blocks|slab] [--report R] [--verify]\n"
      "                     [--checkpoint DIR --checkpoint-every K] [--restart DIR]";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--verify") {
      settings.verify = true;
      continue;
    }
    if (arg != "--n" && arg != "--iters" && arg != "--report" && arg != "--decomp" &&
        arg != "--checkpoint" && arg != "--checkpoint-every" && arg != "--restart") {
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
    if (arg == "--checkpoint") settings.checkpoint = value;
    if (arg == "--restart") settings.restart = value;
    if (arg == "--checkpoint-every" &&
        !parse_number(value, 1, 100000000, settings.checkpoint_every)) {
      return "--checkpoint-every must be a whole number from 1 to 100000000 (got '" + value + "')";
    }
    if (arg == "--decomp") {
      if (value != "blocks" && value != "slab") {
        return "--decomp must be blocks or slab (got '" + value + "')";
      }
      settings.decomp = value == "slab" ? Decomp::slab : Decomp::blocks;
    }
  }
  if (settings.checkpoint.empty() != (settings.checkpoint_every == 0)) {
    return "--checkpoint DIR and --checkpoint-every K go together\n" + usage;
  }
  const std::string n = std::to_string(settings.n);
  if (settings.decomp == Decomp::slab) {
    if (static_cast<std::size_t>(ranks) > settings.n) {
      return std::to_string(ranks) + " ranks for --n " + n +
             ": every rank needs at least one z-plane, so run at most " + n +
             " ranks or make --n larger";
    }
    return "";
  }
  const Triple grid = grid_of(settings.decomp, ranks);
  const std::size_t most = std::max({grid[0], grid[1], grid[2]});
  if (most > settings.n) {
    return std::to_string(ranks) + " ranks for --n " + n +
           ": too many ranks for N: --decomp blocks splits the cube into " +
           std::to_string(grid[0]) + " x " + std::to_string(grid[1]) + " x " +
           std::to_string(grid[2]) +
           " blocks (x, y, z; MPI_Dims_create), and a block needs at least one cell along each "
           "axis; make --n at least " +
           std::to_string(most) + " or run fewer ranks";
  }
  return "";
}

/// Part `part` of `parts` of [0, n): n / parts cells, one more on the lowest n mod parts parts.
/// Returns {first, count}.
std::array<std::size_t, 2> split(std::size_t n, std::size_t parts, std::size_t part) {
  return {part * (n / parts) + std::min(part, n % parts), n / parts + (part < n % parts ? 1 : 0)};
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

/// A box of the local field: `size` cells from `origin` (local coordinates).
struct Span3 {
  Triple origin{};
  Triple size{};
  bool empty() const { return size[0] == 0 || size[1] == 0 || size[2] == 0; }
};

/// The boxes that cover `update` less `inner` (a box inside it, or empty): for z, then y, then
/// x, the layers of `update` below and above `inner`, each over what is left of the others.
std::vector<Span3> shell(const Span3& update, const Span3& inner) {
  if (update.empty()) return {};
  if (inner.empty()) return {update};
  std::vector<Span3> boxes;
  Span3 rest = update;
  for (int axis = 2; axis >= 0; --axis) {
    const std::size_t a = static_cast<std::size_t>(axis);
    const std::size_t low = update.origin[a];
    const std::size_t high = update.origin[a] + update.size[a];  // one past
    const std::size_t inner_low = inner.origin[a];
    const std::size_t inner_high = inner.origin[a] + inner.size[a];
    if (low < inner_low) {
      Span3 box = rest;
      box.origin[a] = low;
      box.size[a] = inner_low - low;
      boxes.push_back(box);
    }
    if (inner_high < high) {
      Span3 box = rest;
      box.origin[a] = inner_high;
      box.size[a] = high - inner_high;
      boxes.push_back(box);
    }
    rest.origin[a] = inner_low;
    rest.size[a] = inner.size[a];
  }
  return boxes;
}

/// One rank's part of the cube: its cells (`first` and `count`, global, per axis) and the local
/// field that holds them with `ghost` ghost layers below and above along each axis.
struct Part {
  Triple first{};
  Triple count{};
  Triple ghost{};
  Triple field{};
  std::array<bool, 3> below{};  // a neighbour's cells lie below (their ghost layer is filled)
  std::array<bool, 3> above{};
  std::size_t elements() const { return field[0] * field[1] * field[2]; }
  std::size_t cells() const { return count[0] * count[1] * count[2]; }
};

/// The part of the rank at grid coordinates `coords` (x, y, z).
Part part_of(Decomp decomp, std::size_t n, const Triple& grid, const Triple& coords) {
  Part part;
  for (std::size_t a = 0; a < 3; ++a) {
    const auto [first, count] = split(n, grid[a], coords[a]);
    part.first[a] = first;
    part.count[a] = count;
    // Slabs keep whole planes: ghost layers along z only.
    part.ghost[a] = decomp == Decomp::blocks || a == 2 ? 1 : 0;
    part.field[a] = count + 2 * part.ghost[a];
    part.below[a] = coords[a] > 0;
    part.above[a] = coords[a] + 1 < grid[a];
  }
  return part;
}

/// The coordinates (x, y, z) of `rank` on the grid: slab r is z = r; a block's are
/// MPI_Cart_coords' on `cart` (dimension 0 is x).
Triple coords_of(Decomp decomp, MPI_Comm cart, int rank) {
  if (decomp == Decomp::slab) return {0, 0, static_cast<std::size_t>(rank)};
  int coords[3] = {0, 0, 0};
  MPI_Cart_coords(cart, rank, 3, coords);
  return {static_cast<std::size_t>(coords[0]), static_cast<std::size_t>(coords[1]),
          static_cast<std::size_t>(coords[2])};
}

/// The copy of a part's cells out of its local field: into a contiguous buffer of just those
/// cells (`pack`) or to their place in the global cube (`!pack`).
clbuf::Region cells_region(const Part& part, std::size_t n, bool pack) {
  clbuf::Region region;
  region.size = {part.count[0], part.count[1], part.count[2]};
  region.src_origin = {part.ghost[0], part.ghost[1], part.ghost[2]};
  region.src_extents = {part.field[0], part.field[1], part.field[2]};
  if (pack) {
    region.dst_extents = region.size;
  } else {
    region.dst_origin = {part.first[0], part.first[1], part.first[2]};
    region.dst_extents = {n, n, n};
  }
  return region;
}

/// One rank's part on the device: two fields (ping-pong) of part.field cells each.
class Solver {
 public:
  Solver(clbuf::BufferManager& manager, clbuf::mpi::Communicator& comm, MPI_Comm cart,
         const Settings& settings)
      : manager_(manager),
        comm_(comm),
        cart_(cart),
        decomp_(settings.decomp),
        n_(settings.n),
        grid_(grid_of(settings.decomp, comm.size())),
        part_(part_of(decomp_, n_, grid_, coords_of(decomp_, cart, comm.rank()))) {
    if (decomp_ == Decomp::slab) {
      // The first plane goes down with tag 1 and the last up with tag 2; one plan serves both
      // fields because HaloExchange takes the field at start().
      const int rank = comm.rank();
      const int below = part_.below[2] ? rank - 1 : MPI_PROC_NULL;
      const int above = part_.above[2] ? rank + 1 : MPI_PROC_NULL;
      const std::size_t plane = n_ * n_;
      const std::size_t planes = part_.count[2];
      exchange_ = std::make_unique<clbuf::mpi::HaloExchange<double>>(
          comm, std::vector<clbuf::mpi::Neighbour>{
                    {below, plane, 0, plane, 1, 2},
                    {above, planes * plane, (planes + 1) * plane, plane, 2, 1}});
    } else {
      // The six faces, one ghost layer: no edges or corners for a 7-point stencil.
      exchange_ = std::make_unique<clbuf::mpi::HaloExchange<double>>(
          comm, clbuf::mpi::cartesian_faces(cart, {part_.count[0], part_.count[1], part_.count[2]},
                                            1, false, 0));
    }

    // Every cell of the field, ghosts included, starts at its global initial value (0 outside
    // the cube): ghost cells are read only once a neighbour has filled them.
    std::vector<double> start(part_.elements());
    std::size_t next = 0;
    for (std::size_t z = 0; z < part_.field[2]; ++z) {
      for (std::size_t y = 0; y < part_.field[1]; ++y) {
        for (std::size_t x = 0; x < part_.field[0]; ++x) {
          const Triple local = {x, y, z};
          Triple global{};
          bool inside = true;
          for (std::size_t a = 0; a < 3; ++a) {
            global[a] = part_.first[a] + local[a] - part_.ghost[a];  // wraps below 0: outside
            inside = inside && local[a] + part_.first[a] >= part_.ghost[a] && global[a] < n_;
          }
          start[next++] = inside ? initial_value(n_, global[0], global[1], global[2]) : 0.0;
        }
      }
    }
    in_ = manager.upload(start);
    out_ = manager.upload(start);  // the fixed boundary is in both fields and never written

    // Along each axis the cells updated are the part's cells off the global boundary
    // (global 1 .. N-2); those next to a neighbour's ghost layer wait for the exchange (the
    // shell), the rest (the interior) overlap it.
    Span3 update;
    Span3 inner;
    for (std::size_t a = 0; a < 3; ++a) {
      const std::size_t last = part_.first[a] + part_.count[a];  // one past, global
      const std::size_t low = std::max<std::size_t>(part_.first[a], 1);
      const std::size_t high = std::min(last, n_ - 1);
      if (low >= high) {
        update.size[a] = 0;
        continue;
      }
      update.origin[a] = low - part_.first[a] + part_.ghost[a];
      update.size[a] = high - low;
      const std::size_t inner_low = std::max(low, part_.first[a] + (part_.below[a] ? 1 : 0));
      const std::size_t inner_high = std::min(high, last - (part_.above[a] ? 1 : 0));
      inner.origin[a] = inner_low - part_.first[a] + part_.ghost[a];
      inner.size[a] = inner_low < inner_high ? inner_high - inner_low : 0;
    }
    if (!update.empty() && !inner.empty()) inner_ = inner;
    shell_ = shell(update, inner);

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
    if (!inner_.empty()) launch(inner_);
    clock = std::chrono::steady_clock::now();
    exchange_->finish();
    const double waited = seconds_since(clock);
    exchange += waited;
    wait += waited;
    for (const Span3& box : shell_) launch(box);
    std::swap(in_, out_);
  }

  /// Runs every launch of step() once, untimed: PoCL compiles a kernel for each new launch size
  /// at its first enqueue. It writes what the first step() writes over again, so the field is
  /// unchanged.
  void warm_up() {
    if (!inner_.empty()) launch(inner_);
    for (const Span3& box : shell_) launch(box);
    manager_.queue().finish();
  }

  /// The field of the current iteration (ghosts included; they are refilled before being read).
  clbuf::DeviceBuffer<double>& field() { return in_; }

  /// The largest |change| of the last iteration over this rank's cells.
  double last_change() {
    const clbuf::Region region = cells_region(part_, n_, true);
    std::vector<double> now(part_.cells());
    std::vector<double> before(part_.cells());
    manager_.download_rect(in_, now, region);
    manager_.download_rect(out_, before, region);
    double most = 0.0;
    for (std::size_t i = 0; i < now.size(); ++i) {
      most = std::max(most, std::fabs(now[i] - before[i]));
    }
    return most;
  }

  /// The whole field on rank 0 (in global order), empty elsewhere: every other rank sends its
  /// cells packed (a rect copy on the device), rank 0 places each part by its coordinates.
  std::vector<double> gather() {
    const int tag = 3;
    if (comm_.rank() != 0) {
      clbuf::DeviceBuffer<double> mine = manager_.allocate<double>(part_.cells());
      manager_.copy_rect(in_, mine, cells_region(part_, n_, true));
      comm_.send(mine, 0, tag);
      return {};
    }
    clbuf::DeviceBuffer<double> all = manager_.allocate<double>(n_ * n_ * n_);
    manager_.copy_rect(in_, all, cells_region(part_, n_, false));
    for (int source = 1; source < comm_.size(); ++source) {
      const Part theirs = part_of(decomp_, n_, grid_, coords_of(decomp_, cart_, source));
      clbuf::DeviceBuffer<double> cells = manager_.allocate<double>(theirs.cells());
      comm_.recv(cells, source, tag);
      clbuf::Region region = cells_region(theirs, n_, false);
      region.src_origin = {};
      region.src_extents = region.size;
      manager_.copy_rect(cells, all, region);
    }
    return manager_.download(all);
  }

 private:
  void launch(const Span3& box) {
    kernel_.setArg(0, in_.native());
    kernel_.setArg(1, out_.native());
    kernel_.setArg(2, static_cast<cl_ulong>(part_.field[0]));
    kernel_.setArg(3, static_cast<cl_ulong>(part_.field[0] * part_.field[1]));
    kernel_.setArg(4, static_cast<cl_ulong>(box.origin[0]));
    kernel_.setArg(5, static_cast<cl_ulong>(box.origin[1]));
    kernel_.setArg(6, static_cast<cl_ulong>(box.origin[2]));
    manager_.queue().enqueueNDRangeKernel(kernel_, cl::NullRange,
                                          cl::NDRange(box.size[0], box.size[1], box.size[2]));
    manager_.queue().flush();  // so the device computes while this thread moves the exchange
  }

  clbuf::BufferManager& manager_;
  clbuf::mpi::Communicator& comm_;
  MPI_Comm cart_ = MPI_COMM_NULL;
  Decomp decomp_ = Decomp::blocks;
  std::size_t n_ = 0;
  Triple grid_{};
  Part part_;
  std::unique_ptr<clbuf::mpi::HaloExchange<double>> exchange_;
  clbuf::DeviceBuffer<double> in_;
  clbuf::DeviceBuffer<double> out_;
  Span3 inner_;               // the cells that need no ghost (empty: none)
  std::vector<Span3> shell_;  // the other cells updated, launched after finish()
  cl::Kernel kernel_;
};

/// The Cartesian communicator of the blocks (MPI_COMM_NULL for slabs), freed at the end.
class Cart {
 public:
  explicit Cart(const Settings& settings, int ranks) {
    if (settings.decomp != Decomp::blocks) return;
    const Triple grid = grid_of(settings.decomp, ranks);
    int dims[3] = {static_cast<int>(grid[0]), static_cast<int>(grid[1]), static_cast<int>(grid[2])};
    int periods[3] = {0, 0, 0};  // closed: MPI_PROC_NULL beyond the global faces
    // No reordering: the Cartesian rank is MPI_COMM_WORLD's, so rank 0 prints.
    MPI_Cart_create(MPI_COMM_WORLD, 3, dims, periods, 0, &comm_);
  }
  Cart(const Cart&) = delete;
  Cart& operator=(const Cart&) = delete;
  ~Cart() {
    if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  }
  MPI_Comm get() const { return comm_; }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
};

/// The checkpoint of a run: each rank's field and a record of {iteration, n, decomposition}.
class Checkpoints {
 public:
  Checkpoints(clbuf::BufferManager& manager, clbuf::mpi::Communicator& comm, Solver& solver,
              const Settings& settings, const std::string& folder)
      : manager_(manager),
        settings_(settings),
        record_(manager.allocate<std::uint64_t>(3)),
        checkpoint_(manager, folder, clbuf::mpi::checkpoint_ranks(comm)) {
    checkpoint_.add("field", solver.field()).add("record", record_);
  }

  void save(std::size_t iter) {
    manager_.upload(
        record_, std::vector<std::uint64_t>{iter, settings_.n, settings_.decomp == Decomp::blocks});
    checkpoint_.save();
  }

  /// Loads the checkpoint; returns its iteration. @throws std::runtime_error for one of another
  /// run (--n, --decomp); clbuf::Error for a missing or damaged one.
  std::size_t load() {
    checkpoint_.load();
    const std::vector<std::uint64_t> record = manager_.download(record_);
    if (record[1] != settings_.n || record[2] != (settings_.decomp == Decomp::blocks)) {
      throw std::runtime_error("the checkpoint is of another --n or --decomp than this run's");
    }
    return static_cast<std::size_t>(record[0]);
  }

 private:
  clbuf::BufferManager& manager_;
  const Settings& settings_;
  clbuf::DeviceBuffer<std::uint64_t> record_;
  clbuf::Checkpoint checkpoint_;
};

int run(const Settings& settings, int ranks) {
  const Cart cart(settings, ranks);
  clbuf::BufferManager manager(clbuf::mpi::local_device_selector());
  clbuf::mpi::Communicator comm(manager,
                                settings.decomp == Decomp::blocks ? cart.get() : MPI_COMM_WORLD);
  const int rank = comm.rank();
  Solver solver(manager, comm, cart.get(), settings);
  clbuf::DeviceBuffer<double> change = manager.allocate<double>(1);

  solver.warm_up();
  std::unique_ptr<Checkpoints> saving;
  if (!settings.checkpoint.empty()) {
    saving = std::make_unique<Checkpoints>(manager, comm, solver, settings, settings.checkpoint);
  }
  std::size_t first = 1;
  if (!settings.restart.empty()) {
    first = Checkpoints(manager, comm, solver, settings, settings.restart).load() + 1;
    if (first - 1 > settings.iters) {
      throw std::runtime_error("the checkpoint is of iteration " + std::to_string(first - 1) +
                               ", past --iters " + std::to_string(settings.iters));
    }
    if (comm.rank() == 0) std::printf("restarted from iteration %zu\n", first - 1);
  }
  comm.barrier();
  const auto clock = std::chrono::steady_clock::now();
  double exchange = 0.0;
  double wait = 0.0;
  double reporting = 0.0;
  for (std::size_t iter = first; iter <= settings.iters; ++iter) {
    solver.step(exchange, wait);
    if (saving && iter % settings.checkpoint_every == 0) {
      const auto save_clock = std::chrono::steady_clock::now();
      saving->save(iter);
      reporting += seconds_since(save_clock);
    }
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
  const Triple grid = grid_of(settings.decomp, comm.size());
  std::printf("%s (%s): %d ranks, %zu^3 doubles, %zu iterations, %s %zu x %zu x %zu (x, y, z)\n",
              manager.device().name.c_str(), clbuf::to_string(manager.memory_model()), comm.size(),
              settings.n, settings.iters, settings.decomp == Decomp::blocks ? "blocks" : "slabs",
              grid[0], grid[1], grid[2]);
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
    status = run(settings, size);
  } catch (const std::exception& e) {
    std::cerr << "rank " << rank << ": " << e.what() << "\n";
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Bcast(&status, 1, MPI_INT, 0, MPI_COMM_WORLD);
  MPI_Finalize();
  return status;
}
