// SPDX-License-Identifier: MIT
// examples/06_mpi_halo: a 1D heat equation (3-point stencil, periodic) on device buffers,
// split over the MPI ranks, with a persistent halo exchange that moves while the interior kernel
// runs. Rank 0 then runs the same solver alone (MPI_COMM_SELF) and checks that every cell of
// the distributed run is bit for bit the same.
//   mpirun -np 2 build/examples/06_mpi_halo/06_mpi_halo
#include <mpi.h>
#include <clbuf/mpi.hpp>

#include <cstddef>
#include <cstring>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

namespace {

const char* const kernel_source = R"(
__kernel void heat(__global const float* in, __global float* out, ulong first, float alpha) {
  const size_t i = first + get_global_id(0);
  out[i] = in[i] + alpha * (in[i - 1] - 2.0f * in[i] + in[i + 1]);
}
)";

/// The stencil kernel, built for the manager's device.
cl::Kernel build_kernel(clbuf::BufferManager& manager) {
  cl::Program program(manager.context(), kernel_source);
  if (program.build() != CL_SUCCESS) throw std::runtime_error("the heat kernel did not build");
  return cl::Kernel(program, "heat");
}

void launch(clbuf::BufferManager& manager, cl::Kernel& kernel, const clbuf::DeviceBuffer<float>& in,
            clbuf::DeviceBuffer<float>& out, std::size_t first, std::size_t count) {
  kernel.setArg(0, in.native());
  kernel.setArg(1, out.native());
  kernel.setArg(2, static_cast<cl_ulong>(first));
  kernel.setArg(3, 0.25f);
  manager.queue().enqueueNDRangeKernel(kernel, cl::NullRange, cl::NDRange(count));
  manager.queue().flush();
}

/// `steps` steps on this rank's `cells` cells of the global domain (ranks of `comm` in order,
/// periodic); returns this rank's cells.
std::vector<float> solve(clbuf::BufferManager& manager, MPI_Comm comm, std::size_t cells,
                         int steps) {
  clbuf::mpi::Communicator communicator(manager, comm);
  const int rank = communicator.rank();
  const int size = communicator.size();
  const int left = (rank + size - 1) % size;
  const int right = (rank + 1) % size;
  // [ghost | cells | ghost]; my first cell goes left (tag 1), my last right (tag 2)
  std::vector<float> initial(cells + 2, 0.0f);
  for (std::size_t i = 0; i < cells; ++i) {
    const std::size_t global = static_cast<std::size_t>(rank) * cells + i;
    initial[i + 1] = static_cast<float>((global * 7919) % 1000) / 1000.0f;
  }
  clbuf::DeviceBuffer<float> in = manager.upload(initial);
  clbuf::DeviceBuffer<float> out = manager.upload(initial);
  cl::Kernel kernel = build_kernel(manager);
  clbuf::mpi::HaloExchange<float> exchange_in(
      communicator, {{left, 1, 0, 1, 1, 2}, {right, cells, cells + 1, 1, 2, 1}});
  for (int step = 0; step < steps; ++step) {
    exchange_in.start(in);
    launch(manager, kernel, in, out, 2, cells - 2);  // the interior needs no ghost cell
    exchange_in.finish();
    launch(manager, kernel, in, out, 1, 1);  // the two edge cells do
    launch(manager, kernel, in, out, cells, 1);
    std::swap(in, out);
  }
  std::vector<float> all = manager.download(in);
  return std::vector<float>(all.begin() + 1, all.end() - 1);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int status = 1;
  try {
    clbuf::BufferManager manager(clbuf::mpi::local_device_selector());
    const std::size_t cells = 1 << 16;
    const int steps = 100;
    const std::vector<float> mine = solve(manager, MPI_COMM_WORLD, cells, steps);
    std::vector<float> everything(rank == 0 ? cells * static_cast<std::size_t>(size) : 0);
    MPI_Gather(mine.data(), static_cast<int>(cells), MPI_FLOAT, everything.data(),
               static_cast<int>(cells), MPI_FLOAT, 0, MPI_COMM_WORLD);
    if (rank == 0) {
      const std::vector<float> alone =
          solve(manager, MPI_COMM_SELF, cells * static_cast<std::size_t>(size), steps);
      const bool same =
          std::memcmp(alone.data(), everything.data(), alone.size() * sizeof(float)) == 0;
      std::cout << manager.device().name << " (" << clbuf::to_string(manager.memory_model())
                << "): " << size << " ranks x " << cells << " cells, " << steps << " steps: "
                << (same ? "matches the one-rank run" : "DIFFERS from the one-rank run") << "\n";
      status = same ? 0 : 1;
    }
  } catch (const std::exception& e) {
    std::cerr << "rank " << rank << ": " << e.what() << "\n";
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Bcast(&status, 1, MPI_INT, 0, MPI_COMM_WORLD);
  MPI_Finalize();
  return status;
}
