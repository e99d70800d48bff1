// SPDX-License-Identifier: MIT
// mpi_bench: clbuf::mpi against MPI on host memory in the same job, and against the
// download / MPI_Send / MPI_Recv / upload that OpenCL applications write by hand. Two ranks (more
// wait). Methods, interleaved per size (A B C D, several samples, the median reported):
//   host       MPI on 4 KiB-page memory (aligned_alloc, touched first)
//   host_huge  MPI on huge-page memory (madvise(MADV_HUGEPAGE)): what clbuf allocates for a CPU
//              device, so the fair anchor of its zero-copy path
//   clbuf      Communicator::send / recv of a DeviceBuffer<unsigned char>
//   naive      download -> MPI_Send, MPI_Recv -> upload, by hand
// Patterns: ping-pong (half the round trip: latency for small sizes, bandwidth for large) and
// stream (a window of sends, then a 1-byte ack). Before timing, every method's message is
// checked end to end against random bytes (rank 0 sends, rank 1 compares); --smoke stops after
// the checks and fails on any mismatch. No time is asserted anywhere.
//
//   mpirun -np 2 mpi_bench [--sizes 4,64,4K,64K,1M,4M,16M,64M,256M] [--target-s 0.2]
//          [--samples 5] [--device SEL | --device0 SEL --device1 SEL] [--memory MODEL]
//          [--chunk BYTES] [--depth N] [--whole] [--no-verify] [--csv PATH] [--smoke]
// --whole: the Communicator on Path::whole (a message is one MPI message of its raw bytes, no
// header), to measure what the checked wire format costs small messages.
// The allreduce table follows (float sum, every rank): MPI_Allreduce on huge-page memory against
// Communicator::allreduce and download / MPI_Allreduce / upload; --no-verify skips the
// collectives' agreement (Options::verify_collectives).
//
// The halo exchange (--halo, or any --halo-* option: these tables instead of the ones above;
// any number of ranks, all of them in it): a 2-D (square block, 4 faces) and a 3-D (cube block,
// 6 faces) decomposition over MPI_Cart_create of every rank (MPI_Dims_create), periodic, halo 1,
// float, no edges or corners, the block sized so that one face holds the --halo-sizes bytes
// (2-D: a row or column of n floats; 3-D: n x n floats, n rounded down). Methods, interleaved
// (each sample in another order, a fixed shuffle):
//   host       MPI on a host array (huge pages): MPI_Type_create_subarray per face,
//              MPI_Irecv / MPI_Isend of every face, MPI_Waitall
//   host_pack  the same array, faces packed by hand (memcpy per row) into contiguous buffers,
//              MPI_Irecv / MPI_Isend of MPI_FLOAT, MPI_Waitall, unpacked by hand
//   clbuf      HaloExchange<float> with cartesian_faces() on a DeviceBuffer: start(); finish()
//   naive      by hand on the device field: MPI_Irecv of every face, then each face
//              download_rect (blocking) and MPI_Isend, MPI_Waitall, each ghost face upload_rect
// and, for the overlap line under each row (the timeline of issue 21, item 2):
//   kernel     the interior work alone: a 7-point (2-D: 5-point) average of the field into
//              another buffer over the cells whose stencil needs no ghost, then clFinish
//   overlap    start(); that kernel; finish(); clFinish: "both" against exchange + kernel
//              (1.00: one after the other; max / sum: the shorter one entirely hidden)
// Median us per exchange of the slowest rank; ratios are clbuf's speed over the other method's
// (above 1: clbuf faster). Each configuration is checked first: every method's whole field
// after one exchange against a reference built from global coordinates (--smoke: the checks
// alone, at 1K and 8K faces, after the point-to-point checks). A block whose field exceeds
// --halo-max-field bytes a rank (256M; about 4x that is in use at the check) is skipped.
//   mpirun -np 4 mpi_bench --halo [--halo-sizes 16K,64K,256K,1M,4M] [--halo-dims 2,3]
//          [--halo-max-field 256M] [--halo-direct-max BYTES] [--halo-kernel-max-row BYTES]
//          [--target-s 0.2] [--samples 5] [--csv PATH]
// --halo-direct-max sets Options::halo_direct_max_bytes (boxes that go straight between the
// field and pinned memory on a discrete device; 0: every box through the pack buffers),
// --halo-kernel-max-row Options::halo_kernel_max_row_bytes (boxes of rows of at most that many
// bytes packed by a kernel instead of a rect copy; 0: never).
#include <mpi.h>
#include <clbuf/mpi.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace {

using Clock = std::chrono::steady_clock;

std::size_t parse_size(const std::string& text) {
  std::size_t end = 0;
  const unsigned long long value = std::stoull(text, &end);
  const std::string unit = text.substr(end);
  const std::size_t scale = unit == "K"   ? 1024
                            : unit == "M" ? 1024 * 1024
                            : unit == "G" ? 1u << 30
                                          : 1;
  return static_cast<std::size_t>(value) * scale;
}

std::string size_name(std::size_t bytes) {
  if (bytes >= (1u << 20) && bytes % (1u << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
  if (bytes >= 1024 && bytes % 1024 == 0) return std::to_string(bytes >> 10) + " KiB";
  return std::to_string(bytes) + " B";
}

/// Host memory for the anchors: 2 MiB-aligned, touched, huge pages asked for when `huge`.
struct HostBlock {
  HostBlock(std::size_t bytes, bool huge) : size(std::max<std::size_t>(bytes, 1)) {
    const std::size_t align = std::size_t{2} << 20;
    const std::size_t rounded = (size + align - 1) / align * align;
    data = static_cast<unsigned char*>(std::aligned_alloc(align, rounded));
    if (data == nullptr) throw std::runtime_error("out of host memory");
#if defined(__linux__) && defined(MADV_HUGEPAGE) && defined(MADV_NOHUGEPAGE)
    ::madvise(data, rounded, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
#else
    (void)huge;
#endif
    std::memset(data, 1, rounded);
  }
  HostBlock(const HostBlock&) = delete;
  HostBlock& operator=(const HostBlock&) = delete;
  ~HostBlock() { std::free(data); }
  unsigned char* data = nullptr;
  std::size_t size = 0;
};

std::vector<unsigned char> random_bytes(std::size_t bytes, std::uint64_t seed) {
  std::vector<unsigned char> out(bytes);
  std::uint64_t x = seed * 0x9E3779B97F4A7C15ULL + 1;
  for (std::size_t i = 0; i < bytes; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    out[i] = static_cast<unsigned char>(x | 1u);
  }
  return out;
}

/// One method: how rank 0 sends and rank 1 receives a message of `bytes` (and back).
struct Method {
  std::string name;
  std::function<void(int peer)> send;
  std::function<void(int peer)> recv;
  std::function<void(const std::vector<unsigned char>&)> load;  // set the message's contents
  std::function<std::vector<unsigned char>()> contents;
};

void send_bytes(const void* data, std::size_t bytes, int peer, int tag) {
  MPI_Send(data, static_cast<int>(bytes), MPI_BYTE, peer, tag, MPI_COMM_WORLD);
}
void recv_bytes(void* data, std::size_t bytes, int peer, int tag) {
  MPI_Recv(data, static_cast<int>(bytes), MPI_BYTE, peer, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
}

struct Result {
  double pingpong_s = 0;
  double stream_s = 0;  // per message
};

// ---- The halo exchange (--halo): a block of a periodic Cartesian grid of every rank, float,
// halo 1, faces only (no edges or corners).

constexpr float kGhost = -1.0f;  // a ghost cell before the exchange

/// The value of global cell `index`: a hash below 2^24 + 1 (exact in float), never kGhost.
float halo_value(std::uint64_t index) {
  std::uint64_t x = index * 0x9E3779B97F4A7C15ULL + 0x632BE59BD9B4E019ULL;
  x ^= x >> 29;
  return static_cast<float>((x & 0xFFFFFFu) + 1u);
}

/// A rank's place on the grid and its block: `n` interior cells along each of `ndims` axes, one
/// ghost layer on both sides of each.
struct HaloGrid {
  int ndims = 0;
  int dims[3] = {1, 1, 1};
  int coords[3] = {0, 0, 0};
  std::size_t n = 0;
  std::size_t whole[3] = {1, 1, 1};  // the field's extents
  std::size_t cells() const { return whole[0] * whole[1] * whole[2]; }
};

/// The local field built from global coordinates alone: the interior, and (`exchanged`) every
/// face ghost cell holding the value of the global cell it mirrors across the periodic grid;
/// ghost cells beyond edges and corners (and all of them before the exchange) hold kGhost.
std::vector<float> halo_field(const HaloGrid& grid, bool exchanged) {
  std::size_t global[3] = {1, 1, 1};
  for (int d = 0; d < grid.ndims; ++d) global[d] = grid.n * static_cast<std::size_t>(grid.dims[d]);
  std::vector<float> field(grid.cells(), kGhost);
  std::size_t at = 0;
  for (std::size_t k = 0; k < grid.whole[2]; ++k) {
    for (std::size_t j = 0; j < grid.whole[1]; ++j) {
      for (std::size_t i = 0; i < grid.whole[0]; ++i, ++at) {
        const std::size_t local[3] = {i, j, k};
        std::size_t g[3] = {0, 0, 0};
        int ghosts = 0;
        for (int d = 0; d < grid.ndims; ++d) {
          const std::size_t first = static_cast<std::size_t>(grid.coords[d]) * grid.n;
          if (local[d] == 0) {
            ++ghosts;
            g[d] = (first + global[d] - 1) % global[d];
          } else if (local[d] == grid.n + 1) {
            ++ghosts;
            g[d] = (first + grid.n) % global[d];
          } else {
            g[d] = first + local[d] - 1;
          }
        }
        if (ghosts == 0 || (exchanged && ghosts == 1)) {
          field[at] = halo_value(g[0] + global[0] * (g[1] + global[1] * g[2]));
        }
      }
    }
  }
  return field;
}

/// A box of the field as an MPI datatype (what a host MPI user writes): a subarray of floats.
MPI_Datatype box_type(const clbuf::mpi::Box& box) {
  const int sizes[3] = {static_cast<int>(box.field.z), static_cast<int>(box.field.y),
                        static_cast<int>(box.field.x)};
  const int subsizes[3] = {static_cast<int>(box.size.z), static_cast<int>(box.size.y),
                           static_cast<int>(box.size.x)};
  const int starts[3] = {static_cast<int>(box.origin.z), static_cast<int>(box.origin.y),
                         static_cast<int>(box.origin.x)};
  MPI_Datatype type = MPI_DATATYPE_NULL;
  MPI_Type_create_subarray(3, sizes, subsizes, starts, MPI_ORDER_C, MPI_FLOAT, &type);
  MPI_Type_commit(&type);
  return type;
}

std::size_t box_elements(const clbuf::mpi::Box& box) {
  return box.size.x * box.size.y * box.size.z;
}

/// Copies a box of `field` into contiguous `out` (`pack`), or contiguous `out` into the box.
void host_pack(float* field, const clbuf::mpi::Box& box, float* out, bool pack) {
  const std::size_t row = box.size.x;
  for (std::size_t z = 0; z < box.size.z; ++z) {
    for (std::size_t y = 0; y < box.size.y; ++y) {
      float* cells = field + box.origin.x +
                     box.field.x * ((box.origin.y + y) + box.field.y * (box.origin.z + z));
      float* packed = out + row * (y + box.size.y * z);
      if (row == 1) {
        if (pack) {
          *packed = *cells;
        } else {
          *cells = *packed;
        }
      } else if (pack) {
        std::memcpy(packed, cells, row * sizeof(float));
      } else {
        std::memcpy(cells, packed, row * sizeof(float));
      }
    }
  }
}

clbuf::Region box_region(const clbuf::mpi::Box& box, bool pack) {
  clbuf::Region region;
  region.size = box.size;
  if (pack) {
    region.src_origin = box.origin;
    region.src_extents = box.field;
    region.dst_extents = box.size;
  } else {
    region.src_extents = box.size;
    region.dst_origin = box.origin;
    region.dst_extents = box.field;
  }
  return region;
}

/// The overlap timeline's interior work: a 7-point (2-D: 5-point) average of the field into
/// `out` over the cells whose stencil needs no ghost, what a solver runs between start() and
/// finish(). Built once per manager with the OpenCL C API.
class InteriorKernel {
 public:
  explicit InteriorKernel(clbuf::BufferManager& manager)
      : context_(manager.context()), queue_(manager.queue()) {
    static const char* source = R"CLC(
__kernel void interior(__global const float* f, __global float* out, uint wx, uint wy, uint wz) {
  const size_t x = get_global_id(0) + 2;
  const size_t y = get_global_id(1) + 2;
  const size_t z = get_global_id(2) + (wz > 1 ? 2 : 0);
  const size_t i = x + wx * (y + wy * z);
  float s = f[i - 1] + f[i + 1] + f[i - wx] + f[i + wx];
  if (wz > 1) s += f[i - wx * wy] + f[i + wx * wy];
  out[i] = s * (wz > 1 ? 1.0f / 6.0f : 0.25f);
})CLC";
    cl_int err = CL_SUCCESS;
    program_ = clCreateProgramWithSource(context_(), 1, &source, nullptr, &err);
    check(err, "clCreateProgramWithSource");
    check(clBuildProgram(program_, 0, nullptr, nullptr, nullptr, nullptr), "clBuildProgram");
    kernel_ = clCreateKernel(program_, "interior", &err);
    check(err, "clCreateKernel");
  }
  InteriorKernel(const InteriorKernel&) = delete;
  InteriorKernel& operator=(const InteriorKernel&) = delete;
  ~InteriorKernel() {
    if (kernel_ != nullptr) clReleaseKernel(kernel_);
    if (program_ != nullptr) clReleaseProgram(program_);
  }

  /// Enqueues it on the manager's queue over a field of whole[0] x whole[1] x whole[2] cells.
  void enqueue(const clbuf::DeviceBuffer<float>& field, clbuf::DeviceBuffer<float>& out,
               const std::size_t whole[3]) {
    const cl_mem in_mem = field.native()();
    const cl_mem out_mem = out.native()();
    const cl_uint w[3] = {static_cast<cl_uint>(whole[0]), static_cast<cl_uint>(whole[1]),
                          static_cast<cl_uint>(whole[2])};
    check(clSetKernelArg(kernel_, 0, sizeof(cl_mem), &in_mem), "clSetKernelArg");
    check(clSetKernelArg(kernel_, 1, sizeof(cl_mem), &out_mem), "clSetKernelArg");
    for (cl_uint a = 0; a < 3; ++a) {
      check(clSetKernelArg(kernel_, 2 + a, sizeof(cl_uint), &w[a]), "clSetKernelArg");
    }
    const std::size_t global[3] = {whole[0] - 4, whole[1] - 4, whole[2] > 1 ? whole[2] - 4 : 1};
    check(
        clEnqueueNDRangeKernel(queue_(), kernel_, 3, nullptr, global, nullptr, 0, nullptr, nullptr),
        "clEnqueueNDRangeKernel");
    check(clFlush(queue_()), "clFlush");
  }
  void finish() { check(clFinish(queue_()), "clFinish"); }

 private:
  static void check(cl_int err, const char* call) {
    if (err != CL_SUCCESS) {
      throw std::runtime_error(std::string("mpi_bench: ") + call +
                               " failed: " + std::to_string(err));
    }
  }
  cl::Context context_;
  cl::CommandQueue queue_;
  cl_program program_ = nullptr;
  cl_kernel kernel_ = nullptr;
};

struct HaloSettings {
  std::vector<std::size_t> sizes;  // bytes of one face
  std::vector<int> dims;           // 2 and/or 3
  std::size_t max_field = std::size_t{256} << 20;
  double target_s = 0.2;
  int samples = 5;
  bool smoke = false;
  std::string csv_path;
};

/// The halo tables (or, with `smoke`, only the checks): every rank takes part. Returns 0, or 1
/// when a method's ghost cells differ from the reference on any rank.
int run_halo(clbuf::BufferManager& manager, const clbuf::mpi::Options& mpi_options,
             const HaloSettings& settings, std::ofstream& csv) {
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int status = 0;
  for (int ndims : settings.dims) {
    HaloGrid grid;
    grid.ndims = ndims;
    int periods[3] = {1, 1, 1};
    for (int d = 0; d < ndims; ++d) grid.dims[d] = 0;  // MPI_Dims_create chooses
    MPI_Dims_create(size, ndims, grid.dims);
    MPI_Comm cart = MPI_COMM_NULL;
    MPI_Cart_create(MPI_COMM_WORLD, ndims, grid.dims, periods, 0, &cart);
    int cart_rank = 0;
    MPI_Comm_rank(cart, &cart_rank);
    MPI_Cart_coords(cart, cart_rank, ndims, grid.coords);
    {  // the Communicator's duplicates freed before cart
      clbuf::mpi::Communicator comm(manager, cart, mpi_options);
      // kernel and overlap: the timeline of issue 21 (interior work alone, and between start()
      // and finish()); not columns of the table, a line of their own after it.
      const char* names[] = {"host", "host_pack", "clbuf", "naive", "kernel", "overlap"};
      constexpr std::size_t kMethods = 6;
      InteriorKernel interior(manager);
      if (rank == 0) {
        std::printf(
            "\nhalo exchange, %d-D: %s ranks (MPI_Dims_create, periodic), %s blocks, "
            "halo 1, float, %d faces a rank (no edges or corners); median us per exchange of "
            "the slowest rank%s\n",
            ndims,
            (std::to_string(grid.dims[0]) + "x" + std::to_string(grid.dims[1]) +
             (ndims == 3 ? "x" + std::to_string(grid.dims[2]) : std::string()))
                .c_str(),
            ndims == 2 ? "square" : "cube", 2 * ndims, settings.smoke ? ": checks only" : "");
        if (!settings.smoke) {
          std::printf("%-9s | %-20s | %-9s | %-9s | %-9s | %-9s | %s\n", "face", "block a rank",
                      "host", "host_pack", "clbuf", "naive",
                      "clbuf / host, host_pack, naive | clbuf in start()");
        }
      }
      for (std::size_t face_bytes : settings.sizes) {
        const std::size_t face_floats = std::max<std::size_t>(face_bytes / sizeof(float), 1);
        grid.n = ndims == 2 ? face_floats
                            : static_cast<std::size_t>(std::sqrt(static_cast<double>(face_floats)));
        while (ndims == 3 && (grid.n + 1) * (grid.n + 1) <= face_floats) ++grid.n;
        while (ndims == 3 && grid.n * grid.n > face_floats) --grid.n;
        for (int d = 0; d < 3; ++d) grid.whole[d] = d < ndims ? grid.n + 2 : 1;
        const std::size_t real_face = (ndims == 2 ? grid.n : grid.n * grid.n) * sizeof(float);
        const std::size_t field_bytes = grid.cells() * sizeof(float);
        char block[64];
        std::snprintf(block, sizeof block, "%zu^%d (%.1f MiB)", grid.n, ndims,
                      static_cast<double>(field_bytes) / (1u << 20));
        if (field_bytes > settings.max_field) {
          if (rank == 0) {
            std::printf(
                "%-9s | %-20s | skipped: the field is %.0f MiB a rank, above "
                "--halo-max-field %s\n",
                size_name(real_face).c_str(), block, static_cast<double>(field_bytes) / (1u << 20),
                size_name(settings.max_field).c_str());
            std::fflush(stdout);
          }
          continue;
        }
        const std::vector<clbuf::mpi::Neighbour> plan = clbuf::mpi::cartesian_faces(
            cart, clbuf::Extents{grid.n, grid.n, ndims == 3 ? grid.n : 1}, 1);
        // host and host_pack: a host array (huge pages, as clbuf's own on a CPU device)
        HostBlock host(field_bytes, true);
        float* cells = reinterpret_cast<float*>(host.data);
        std::vector<MPI_Datatype> send_types, recv_types;
        std::vector<std::vector<float>> send_faces, recv_faces;
        for (const clbuf::mpi::Neighbour& nb : plan) {
          send_types.push_back(box_type(*nb.send_box));
          recv_types.push_back(box_type(*nb.recv_box));
          send_faces.emplace_back(box_elements(*nb.send_box));
          recv_faces.emplace_back(box_elements(*nb.recv_box));
        }
        std::vector<MPI_Request> requests(2 * plan.size());
        // Tags: the plan's, moved apart per method (all on `cart`; clbuf's Communicator has its
        // own duplicates).
        const auto host_exchange = [&] {
          std::size_t r = 0;
          for (std::size_t i = 0; i < plan.size(); ++i) {
            MPI_Irecv(cells, 1, recv_types[i], plan[i].rank, plan[i].recv_tag, cart,
                      &requests[r++]);
          }
          for (std::size_t i = 0; i < plan.size(); ++i) {
            MPI_Isend(cells, 1, send_types[i], plan[i].rank, plan[i].send_tag, cart,
                      &requests[r++]);
          }
          MPI_Waitall(static_cast<int>(r), requests.data(), MPI_STATUSES_IGNORE);
        };
        const auto faces_exchange = [&](int tag_base) {
          std::size_t r = 0;
          for (std::size_t i = 0; i < plan.size(); ++i) {
            MPI_Irecv(recv_faces[i].data(), static_cast<int>(recv_faces[i].size()), MPI_FLOAT,
                      plan[i].rank, tag_base + plan[i].recv_tag, cart, &requests[r++]);
          }
          return r;
        };
        const auto faces_send = [&](std::size_t i, int tag_base, std::size_t r) {
          MPI_Isend(send_faces[i].data(), static_cast<int>(send_faces[i].size()), MPI_FLOAT,
                    plan[i].rank, tag_base + plan[i].send_tag, cart, &requests[r]);
        };
        const auto host_pack_exchange = [&] {
          std::size_t r = faces_exchange(32);
          for (std::size_t i = 0; i < plan.size(); ++i) {
            host_pack(cells, *plan[i].send_box, send_faces[i].data(), true);
            faces_send(i, 32, r++);
          }
          MPI_Waitall(static_cast<int>(r), requests.data(), MPI_STATUSES_IGNORE);
          for (std::size_t i = 0; i < plan.size(); ++i) {
            host_pack(cells, *plan[i].recv_box, recv_faces[i].data(), false);
          }
        };
        clbuf::DeviceBuffer<float> field = manager.allocate<float>(grid.cells());
        clbuf::mpi::HaloExchange<float> halo(comm, plan);
        double clbuf_start_s = 0;  // time inside start() (the packs, the messages posted)
        const auto clbuf_exchange = [&] {
          const auto started = Clock::now();
          halo.start(field);
          clbuf_start_s += std::chrono::duration<double>(Clock::now() - started).count();
          halo.finish();
        };
        // naive: each face downloaded (download_rect: packed by the copy), sent, received, and
        // uploaded into its ghost cells (upload_rect), all blocking, by hand
        const auto naive_exchange = [&] {
          std::size_t r = faces_exchange(64);
          for (std::size_t i = 0; i < plan.size(); ++i) {
            manager.download_rect(field, send_faces[i].data(), send_faces[i].size(),
                                  box_region(*plan[i].send_box, true));
            faces_send(i, 64, r++);
          }
          MPI_Waitall(static_cast<int>(r), requests.data(), MPI_STATUSES_IGNORE);
          for (std::size_t i = 0; i < plan.size(); ++i) {
            manager.upload_rect(field, recv_faces[i].data(), recv_faces[i].size(),
                                box_region(*plan[i].recv_box, false));
          }
        };
        clbuf::DeviceBuffer<float> smooth = manager.allocate<float>(grid.cells());
        const auto kernel_alone = [&] {
          interior.enqueue(field, smooth, grid.whole);
          interior.finish();
        };
        const auto overlapped = [&] {
          halo.start(field);
          interior.enqueue(field, smooth, grid.whole);
          halo.finish();
          interior.finish();
        };
        const std::function<void()> exchanges[kMethods] = {host_exchange,  host_pack_exchange,
                                                           clbuf_exchange, naive_exchange,
                                                           kernel_alone,   overlapped};
        // Every method once on a fresh field, its result against the reference.
        {
          const std::vector<float> before = halo_field(grid, false);
          const std::vector<float> expected = halo_field(grid, true);
          for (std::size_t m = 0; m < kMethods; ++m) {
            if (m == 4) continue;  // the kernel alone exchanges nothing
            const bool on_host = m < 2;
            if (on_host) {
              std::memcpy(cells, before.data(), field_bytes);
            } else {
              manager.upload(field, before);
            }
            exchanges[m]();
            std::vector<float> after(grid.cells());
            if (on_host) {
              std::memcpy(after.data(), cells, field_bytes);
            } else {
              manager.download(field, after.data(), after.size());
            }
            const auto wrong = std::mismatch(after.begin(), after.end(), expected.begin());
            if (wrong.first != after.end()) {
              const std::size_t at = static_cast<std::size_t>(wrong.first - after.begin());
              std::fprintf(stderr,
                           "mpi_bench: halo %d-D, face %s: %s wrong on rank %d at cell %zu "
                           "(%zu, %zu, %zu): %g, expected %g\n",
                           ndims, size_name(real_face).c_str(), names[m], rank, at,
                           at % grid.whole[0], at / grid.whole[0] % grid.whole[1],
                           at / grid.whole[0] / grid.whole[1], static_cast<double>(*wrong.first),
                           static_cast<double>(*wrong.second));
              status = 1;
            }
          }
        }
        int bad = status;
        MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        status = bad;
        if (settings.smoke || status != 0) {
          if (rank == 0) {
            std::printf("%-9s | %-20s | %s\n", size_name(real_face).c_str(), block,
                        status == 0 ? "every method's ghost cells exact" : "MISMATCH");
            std::fflush(stdout);
          }
        } else {
          std::vector<std::vector<double>> times(kMethods);
          std::vector<double> start_share;  // clbuf: start()'s share of the exchange, rank 0
          for (int sample = 0; sample < settings.samples + 1; ++sample) {  // 0: warm-up, sizing
            // Each sample in its own order (a fixed shuffle, the same on every rank): in one
            // fixed order clbuf right after host_pack measured 1.5x slower at 1 MiB faces.
            std::size_t order[kMethods] = {0, 1, 2, 3, 4, 5};
            if (sample > 0) {
              std::shuffle(order, order + kMethods, std::mt19937(static_cast<unsigned>(sample)));
            }
            for (const std::size_t m : order) {
              int reps = 1;
              if (sample > 0) {
                reps = static_cast<int>(std::clamp(
                    settings.target_s / settings.samples / std::max(times[m].back(), 1e-7), 1.0,
                    10000.0));
              }
              MPI_Bcast(&reps, 1, MPI_INT, 0, MPI_COMM_WORLD);
              MPI_Barrier(MPI_COMM_WORLD);
              clbuf_start_s = 0;
              const auto start = Clock::now();
              for (int r = 0; r < reps; ++r) exchanges[m]();
              const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
              if (m == 2 && sample > 0) start_share.push_back(clbuf_start_s / elapsed);
              double per = elapsed / reps;
              MPI_Allreduce(MPI_IN_PLACE, &per, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
              if (sample == 0) times[m].clear();
              times[m].push_back(per);
            }
          }
          if (rank == 0) {
            double median[kMethods];
            for (std::size_t m = 0; m < kMethods; ++m) {
              std::vector<double> v(times[m].begin() + 1, times[m].end());
              std::sort(v.begin(), v.end());
              median[m] = v[v.size() / 2];
            }
            std::sort(start_share.begin(), start_share.end());
            std::printf(
                "%-9s | %-20s | %-9.1f | %-9.1f | %-9.1f | %-9.1f | %.2fx, %.2fx, %.2fx | %.0f "
                "%%\n",
                size_name(real_face).c_str(), block, median[0] * 1e6, median[1] * 1e6,
                median[2] * 1e6, median[3] * 1e6, median[0] / median[2], median[1] / median[2],
                median[3] / median[2], start_share[start_share.size() / 2] * 100);
            // 1.00: exchange and interior one after the other; max/sum: all of the shorter hidden.
            std::printf(
                "%-9s | overlap: exchange %.1f us, interior kernel %.1f us, both %.1f us "
                "= %.2f of their sum (%.2f would hide the shorter entirely)\n",
                "", median[2] * 1e6, median[4] * 1e6, median[5] * 1e6,
                median[5] / (median[2] + median[4]),
                std::max(median[2], median[4]) / (median[2] + median[4]));
            std::fflush(stdout);
            if (csv.is_open()) {
              for (std::size_t m = 0; m < kMethods; ++m) {
                csv << real_face << ",halo" << ndims << "d_" << names[m] << "," << median[m] * 1e6
                    << ",,\n";
              }
            }
          }
        }
        for (std::size_t i = 0; i < plan.size(); ++i) {
          MPI_Type_free(&send_types[i]);
          MPI_Type_free(&recv_types[i]);
        }
      }
      if (rank == 0 && !settings.smoke) {
        std::cout << "pinned staging memory (" << ndims << "-D): peak " << comm.peak_pinned_bytes()
                  << " B in use\n";
      }
    }
    MPI_Comm_free(&cart);
  }
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::vector<std::size_t> sizes;
  double target_s = 0.2;
  int samples = 5;
  bool smoke = false;
  std::string device, device0, device1, memory, csv_path;
  clbuf::mpi::Options mpi_options;
  bool halo_only = false;
  HaloSettings halo;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--sizes") {
      std::stringstream list(next());
      for (std::string item; std::getline(list, item, ',');) sizes.push_back(parse_size(item));
    } else if (arg == "--target-s") {
      target_s = std::stod(next());
    } else if (arg == "--samples") {
      samples = std::max(1, std::stoi(next()));
    } else if (arg == "--smoke") {
      smoke = true;
    } else if (arg == "--device") {
      device = next();
    } else if (arg == "--device0") {
      device0 = next();
    } else if (arg == "--device1") {
      device1 = next();
    } else if (arg == "--memory") {
      memory = next();
    } else if (arg == "--chunk") {
      mpi_options.chunk_bytes = parse_size(next());
    } else if (arg == "--depth") {
      mpi_options.depth = std::stoul(next());
    } else if (arg == "--whole") {  // Path::whole: no header, one MPI message of the raw bytes
      mpi_options.path = clbuf::mpi::Path::whole;
    } else if (arg == "--no-verify") {
      mpi_options.verify_collectives = false;
    } else if (arg == "--csv") {
      csv_path = next();
    } else if (arg == "--halo") {
      halo_only = true;
    } else if (arg == "--halo-sizes") {
      halo_only = true;
      std::stringstream list(next());
      for (std::string item; std::getline(list, item, ',');) {
        halo.sizes.push_back(parse_size(item));
      }
    } else if (arg == "--halo-dims") {
      halo_only = true;
      std::stringstream list(next());
      for (std::string item; std::getline(list, item, ',');) {
        const int d = std::stoi(item);
        if (d != 2 && d != 3) throw std::invalid_argument("--halo-dims takes 2 and 3");
        halo.dims.push_back(d);
      }
    } else if (arg == "--halo-max-field") {
      halo.max_field = parse_size(next());
    } else if (arg == "--halo-direct-max") {  // Options::halo_direct_max_bytes (0: never)
      mpi_options.halo_direct_max_bytes = parse_size(next());
    } else if (arg == "--halo-kernel-max-row") {  // Options::halo_kernel_max_row_bytes (0: never)
      mpi_options.halo_kernel_max_row_bytes = parse_size(next());
    } else {
      if (rank == 0) std::cerr << "unknown argument " << arg << "\n";
      MPI_Finalize();
      return 2;
    }
  }
  if (sizes.empty()) {
    sizes = smoke ? std::vector<std::size_t>{0, 4, 4096, 65536, (1u << 20) + 3, 9u << 20}
                  : std::vector<std::size_t>{4,        64,        4096,      65536,     1u << 20,
                                             4u << 20, 16u << 20, 64u << 20, 256u << 20};
  }
  if (halo.sizes.empty()) {
    halo.sizes =
        smoke ? std::vector<std::size_t>{1024, 8192}
              : std::vector<std::size_t>{16u << 10, 64u << 10, 256u << 10, 1u << 20, 4u << 20};
  }
  if (halo.dims.empty()) halo.dims = {2, 3};
  halo.target_s = target_s;
  halo.samples = samples;
  halo.smoke = smoke;
  if (halo_only) sizes.clear();  // the halo tables alone
  if (size < 2 && !halo_only) {
    std::cerr << "mpi_bench needs 2 ranks (mpirun -np 2)\n";
    MPI_Finalize();
    return 2;
  }
  int status = 0;
  try {
    std::string selector = device;
    if (rank == 0 && !device0.empty()) selector = device0;
    if (rank == 1 && !device1.empty()) selector = device1;
    if (selector.empty()) selector = clbuf::mpi::local_device_selector();
    clbuf::Options options;
    if (memory == "host") options.memory = clbuf::MemoryModel::host;
    if (memory == "unified") options.memory = clbuf::MemoryModel::unified;
    if (memory == "discrete") options.memory = clbuf::MemoryModel::discrete;
    clbuf::BufferManager manager(selector, options);
    clbuf::mpi::Communicator comm(manager, MPI_COMM_WORLD, mpi_options);
    const bool active = rank < 2;
    const int peer = rank == 0 ? 1 : 0;
    if (rank == 0 && !halo_only) {
      std::cout << "mpi_bench: 2 ranks; rank 0 on " << manager.device().name << " ("
                << clbuf::to_string(manager.memory_model()) << "), chunk "
                << size_name(comm.options().chunk_bytes) << " x " << comm.options().depth
                << "; one way: half a ping-pong round trip; GB/s = 1e9 B/s\n";
    }
    std::ofstream csv;
    if (rank == 0 && !csv_path.empty()) {
      csv.open(csv_path);
      csv << "bytes,method,pingpong_us,pingpong_gbs,stream_gbs\n";
    }
    if (rank == 0 && !smoke && !halo_only) {
      std::printf("%-9s | %-22s | %-22s | %-22s | %-22s | %s\n", "size", "host (pp / stream)",
                  "host_huge", "clbuf", "naive", "clbuf / host, host_huge, naive (pp; stream)");
    }
    for (std::size_t bytes : sizes) {
      HostBlock plain(bytes, false);
      HostBlock huge(bytes, true);
      HostBlock staging(bytes, false);  // the naive method's host copy
      clbuf::DeviceBuffer<unsigned char> buffer = manager.allocate<unsigned char>(bytes);
      std::vector<Method> methods;
      const auto host_method = [&](const char* name, HostBlock& block) {
        Method m;
        m.name = name;
        m.send = [&block, bytes](int to) { send_bytes(block.data, bytes, to, 1); };
        m.recv = [&block, bytes](int from) { recv_bytes(block.data, bytes, from, 1); };
        m.load = [&block](const std::vector<unsigned char>& v) {
          if (!v.empty()) std::memcpy(block.data, v.data(), v.size());
        };
        m.contents = [&block, bytes] {
          return std::vector<unsigned char>(block.data, block.data + bytes);
        };
        return m;
      };
      methods.push_back(host_method("host", plain));
      methods.push_back(host_method("host_huge", huge));
      Method clbuf_method;
      clbuf_method.name = "clbuf";
      clbuf_method.send = [&](int to) { comm.send(buffer, to, 1); };
      clbuf_method.recv = [&](int from) { comm.recv(buffer, from, 1); };
      clbuf_method.load = [&](const std::vector<unsigned char>& v) {
        if (!v.empty()) manager.upload(buffer, v);
      };
      clbuf_method.contents = [&] { return manager.download(buffer); };
      methods.push_back(clbuf_method);
      Method naive;
      naive.name = "naive";
      naive.send = [&](int to) {
        manager.download(buffer, staging.data, bytes);
        send_bytes(staging.data, bytes, to, 2);
      };
      naive.recv = [&](int from) {
        recv_bytes(staging.data, bytes, from, 2);
        manager.upload(buffer, staging.data, bytes);
      };
      naive.load = clbuf_method.load;
      naive.contents = clbuf_method.contents;
      methods.push_back(naive);

      // End-to-end check of every method: rank 0's random bytes arrive at rank 1 exactly.
      for (std::size_t m = 0; m < methods.size(); ++m) {
        const std::vector<unsigned char> expected = random_bytes(bytes, bytes * 7 + m);
        if (!active) continue;
        if (rank == 0) {
          methods[m].load(expected);
          methods[m].send(peer);
        } else {
          methods[m].load(random_bytes(bytes, bytes * 7 + m + 100));
          methods[m].recv(peer);
          if (methods[m].contents() != expected) {
            std::cerr << "mpi_bench: " << methods[m].name << " delivered wrong bytes at " << bytes
                      << " B\n";
            status = 1;
          }
        }
      }
      MPI_Allreduce(MPI_IN_PLACE, &status, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
      if (rank == 0 && smoke) {
        std::cout << size_name(bytes) << ": " << (status == 0 ? "every method exact" : "MISMATCH")
                  << "\n";
      }
      if (smoke || status != 0) continue;

      std::vector<Result> results(methods.size());
      std::vector<std::vector<double>> pp(methods.size()), st(methods.size());
      const int window = static_cast<int>(std::clamp<std::size_t>(
          (std::size_t{64} << 20) / std::max<std::size_t>(bytes, 1), 1, 16));
      for (int sample = 0; sample < samples + 1; ++sample) {  // sample 0: warm-up and sizing
        for (std::size_t m = 0; m < methods.size(); ++m) {
          int reps = 1;
          if (sample > 0) {
            // rank 0 sizes the sample from the warm-up; rank 1 follows
            double per = pp[m].empty() ? 1e-3 : pp[m].back();
            reps = static_cast<int>(
                std::clamp(target_s / samples / std::max(per * 2, 1e-7), 1.0, 100000.0));
          }
          MPI_Bcast(&reps, 1, MPI_INT, 0, MPI_COMM_WORLD);
          MPI_Barrier(MPI_COMM_WORLD);
          if (!active) continue;
          auto start = Clock::now();
          for (int r = 0; r < reps; ++r) {
            if (rank == 0) {
              methods[m].send(peer);
              methods[m].recv(peer);
            } else {
              methods[m].recv(peer);
              methods[m].send(peer);
            }
          }
          const double one_way =
              std::chrono::duration<double>(Clock::now() - start).count() / reps / 2;
          if (sample == 0) pp[m].clear();
          pp[m].push_back(one_way);
          // stream: `window` messages one way, then an ack
          const int stream_reps = std::max(1, reps / window / 2);
          unsigned char ack = 0;
          MPI_Barrier(MPI_COMM_WORLD);
          start = Clock::now();
          for (int r = 0; r < stream_reps; ++r) {
            if (m == 2) {  // clbuf: a window of requests in flight
              std::vector<clbuf::mpi::Request> requests;
              for (int w = 0; w < window; ++w) {
                requests.push_back(rank == 0 ? comm.isend(buffer, peer, 3)
                                             : comm.irecv(buffer, peer, 3));
              }
              clbuf::mpi::wait_all(requests);
            } else if (m < 2) {
              std::vector<MPI_Request> requests(static_cast<std::size_t>(window));
              HostBlock& block = m == 0 ? plain : huge;
              for (int w = 0; w < window; ++w) {
                if (rank == 0) {
                  MPI_Isend(block.data, static_cast<int>(bytes), MPI_BYTE, peer, 3, MPI_COMM_WORLD,
                            &requests[static_cast<std::size_t>(w)]);
                } else {
                  MPI_Irecv(block.data, static_cast<int>(bytes), MPI_BYTE, peer, 3, MPI_COMM_WORLD,
                            &requests[static_cast<std::size_t>(w)]);
                }
              }
              MPI_Waitall(window, requests.data(), MPI_STATUSES_IGNORE);
            } else {  // naive: each message downloaded then sent, received then uploaded
              for (int w = 0; w < window; ++w) {
                if (rank == 0) {
                  methods[m].send(peer);
                } else {
                  methods[m].recv(peer);
                }
              }
            }
            if (rank == 0) {
              recv_bytes(&ack, 1, peer, 4);
            } else {
              send_bytes(&ack, 1, peer, 4);
            }
          }
          const double per_message =
              std::chrono::duration<double>(Clock::now() - start).count() / stream_reps / window;
          if (sample == 0) st[m].clear();
          st[m].push_back(per_message);
        }
      }
      if (rank != 0) continue;
      const auto median = [](std::vector<double> v) {
        if (v.size() > 1) v.erase(v.begin());  // the warm-up
        std::sort(v.begin(), v.end());
        return v[v.size() / 2];
      };
      for (std::size_t m = 0; m < methods.size(); ++m) {
        results[m].pingpong_s = median(pp[m]);
        results[m].stream_s = median(st[m]);
      }
      const auto gbs = [bytes](double s) { return static_cast<double>(bytes) / s / 1e9; };
      const auto cell = [&](const Result& r) {
        char text[64];
        if (bytes < 65536) {
          std::snprintf(text, sizeof text, "%.2f us / %.2f GB/s", r.pingpong_s * 1e6,
                        gbs(r.stream_s));
        } else {
          std::snprintf(text, sizeof text, "%.2f / %.2f GB/s", gbs(r.pingpong_s), gbs(r.stream_s));
        }
        return std::string(text);
      };
      std::printf("%-9s | %-22s | %-22s | %-22s | %-22s |", size_name(bytes).c_str(),
                  cell(results[0]).c_str(), cell(results[1]).c_str(), cell(results[2]).c_str(),
                  cell(results[3]).c_str());
      for (std::size_t m : {std::size_t{0}, std::size_t{1}, std::size_t{3}}) {
        std::printf(" %.2fx;%.2fx", results[m].pingpong_s / results[2].pingpong_s,
                    results[m].stream_s / results[2].stream_s);
      }
      if (bytes < 65536) {
        std::printf("  (+%.2f us over host_huge)",
                    (results[2].pingpong_s - results[1].pingpong_s) * 1e6);
      }
      std::printf("\n");
      std::fflush(stdout);
      if (csv.is_open()) {
        for (std::size_t m = 0; m < methods.size(); ++m) {
          csv << bytes << "," << methods[m].name << "," << results[m].pingpong_s * 1e6 << ","
              << gbs(results[m].pingpong_s) << "," << gbs(results[m].stream_s) << "\n";
        }
      }
    }
    // allreduce (float sum) of the same bytes: MPI_Allreduce on huge-page host memory, clbuf's
    // allreduce (MPI on host memory below Options::device_reduce_bytes, a ring with an OpenCL
    // kernel from it), and download / MPI_Allreduce / upload by hand. Every rank takes part.
    if (!smoke && !halo_only && status == 0) {
      if (rank == 0) {
        std::printf("\nallreduce, float sum, %d ranks (GB/s of the vector; median)\n", size);
        std::printf("%-9s | %-10s | %-10s | %-10s | %s\n", "size", "host_huge", "clbuf", "naive",
                    "clbuf / host_huge, naive");
      }
      for (std::size_t bytes : sizes) {
        const std::size_t count = bytes / sizeof(float);
        if (count == 0) continue;
        HostBlock host(count * sizeof(float), true);
        std::vector<float> values(count, 1.0f);
        std::memcpy(host.data, values.data(), count * sizeof(float));
        clbuf::DeviceBuffer<float> buffer = manager.upload(values);
        std::vector<float> staging(count);
        const std::vector<std::function<void()>> ops = {
            [&] {
              MPI_Allreduce(MPI_IN_PLACE, host.data, static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                            MPI_COMM_WORLD);
            },
            [&] { comm.allreduce(buffer, clbuf::mpi::Op::sum); },
            [&] {
              manager.download(buffer, staging.data(), count);
              MPI_Allreduce(MPI_IN_PLACE, staging.data(), static_cast<int>(count), MPI_FLOAT,
                            MPI_SUM, MPI_COMM_WORLD);
              manager.upload(buffer, staging.data(), count);
            }};
        std::vector<std::vector<double>> times(ops.size());
        for (int sample = 0; sample < samples + 1; ++sample) {
          for (std::size_t m = 0; m < ops.size(); ++m) {
            int reps = 1;
            if (sample > 0) {
              reps = static_cast<int>(
                  std::clamp(target_s / samples / std::max(times[m].back(), 1e-7), 1.0, 10000.0));
            }
            MPI_Bcast(&reps, 1, MPI_INT, 0, MPI_COMM_WORLD);
            MPI_Barrier(MPI_COMM_WORLD);
            const auto start = Clock::now();
            for (int r = 0; r < reps; ++r) ops[m]();
            double per = std::chrono::duration<double>(Clock::now() - start).count() / reps;
            MPI_Bcast(&per, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
            if (sample == 0) times[m].clear();
            times[m].push_back(per);
          }
        }
        if (rank != 0) continue;
        double median[3];
        for (std::size_t m = 0; m < ops.size(); ++m) {
          std::vector<double> v(times[m].begin() + 1, times[m].end());
          std::sort(v.begin(), v.end());
          median[m] = v[v.size() / 2];
        }
        const double b = static_cast<double>(count * sizeof(float));
        std::printf("%-9s | %-10.2f | %-10.2f | %-10.2f | %.2fx, %.2fx\n", size_name(bytes).c_str(),
                    b / median[0] / 1e9, b / median[1] / 1e9, b / median[2] / 1e9,
                    median[0] / median[1], median[2] / median[1]);
        if (csv.is_open()) {
          csv << bytes << ",allreduce_host_huge,," << b / median[0] / 1e9 << ",\n"
              << bytes << ",allreduce_clbuf,," << b / median[1] / 1e9 << ",\n"
              << bytes << ",allreduce_naive,," << b / median[2] / 1e9 << ",\n";
        }
      }
    }
    if (rank == 0 && !smoke && !halo_only) {
      std::cout << "pinned staging memory: peak " << comm.peak_pinned_bytes() << " B in use, "
                << comm.pinned_bytes() << " B allocated at the end\n";
    }
    if (halo_only || smoke) {
      if (rank == 0) {
        std::cout << "mpi_bench halo: " << size << " ranks; rank 0 on " << manager.device().name
                  << " (" << clbuf::to_string(manager.memory_model()) << "), chunk "
                  << size_name(comm.options().chunk_bytes) << " x " << comm.options().depth << "\n";
      }
      const int halo_status = run_halo(manager, mpi_options, halo, csv);
      status = std::max(status, halo_status);
    }
  } catch (const std::exception& e) {
    std::cerr << "rank " << rank << ": " << e.what() << "\n";
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return status;
}
