// SPDX-License-Identifier: MIT
// Halo exchanges on Cartesian grids, the reference the MPI tests check against (mpi_test,
// mpi_fault_test). Include after <clbuf/mpi.hpp> (or the fault hook and then it).
#ifndef CLBUF_TESTS_MPI_HALO_GRID_HPP
#define CLBUF_TESTS_MPI_HALO_GRID_HPP

#include <mpi.h>

#include <clbuf/mpi.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <random>
#include <vector>

namespace halo_grid {

/// The test run's seed (CLBUF_TEST_SEED, else random; the same on every rank: main() sets it).
inline std::uint32_t g_seed = 0;

/// Sets g_seed on every rank (after MPI_Init): CLBUF_TEST_SEED, else rank 0's random choice,
/// broadcast; rank 0 prints it.
inline void share_seed() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (const char* seed = std::getenv("CLBUF_TEST_SEED")) {
    g_seed = static_cast<std::uint32_t>(std::strtoul(seed, nullptr, 10));
  } else if (rank == 0) {
    g_seed = std::random_device()();
  }
  MPI_Bcast(&g_seed, 1, MPI_UINT32_T, 0, MPI_COMM_WORLD);
  if (rank == 0) std::cout << "[ seed     ] " << g_seed << " (CLBUF_TEST_SEED to repeat)\n";
}

// Each rank's interior cell holds the value of its global cell (unique per cell, round and seed,
// exact in float); a ghost cell must end up holding the value of the global cell it mirrors
// (across a periodic boundary, wrapped), or keep the sentinel at a closed boundary and, without
// edges and corners, beyond them. The reference is built here from MPI_Cart_coords alone.

/// A Cartesian communicator over MPI_COMM_WORLD (no reordering); `periodic` bit d makes
/// dimension d periodic. Freed by the destructor.
struct Cart {
  /// The ranks of `parent` (every rank, or MPI_COMM_SELF: this rank alone) as a grid.
  Cart(int dimensions, unsigned periodic_mask, MPI_Comm parent = MPI_COMM_WORLD)
      : ndims(dimensions) {
    int size = 1;
    MPI_Comm_size(parent, &size);
    for (int d = 0; d < ndims; ++d) dims[d] = 0;  // free: MPI_Dims_create chooses
    MPI_Dims_create(size, ndims, dims);
    int periods[3] = {0, 0, 0};
    for (int d = 0; d < ndims; ++d) periods[d] = static_cast<int>((periodic_mask >> d) & 1U);
    MPI_Cart_create(parent, ndims, dims, periods, 0, &comm);
    int rank = 0;
    MPI_Comm_rank(comm, &rank);
    MPI_Cart_coords(comm, rank, ndims, coords);
    for (int d = 0; d < ndims; ++d) periodic[d] = periods[d] != 0;
  }
  Cart(const Cart&) = delete;
  Cart& operator=(const Cart&) = delete;
  ~Cart() { MPI_Comm_free(&comm); }
  int ndims;
  int dims[3] = {1, 1, 1};
  int coords[3] = {0, 0, 0};
  bool periodic[3] = {false, false, false};
  MPI_Comm comm = MPI_COMM_NULL;
};

constexpr double kSentinel = -7;

/// The value of global cell g of a grid of `global` cells in round `round`: 1 + its index, offset
/// by round and seed, below 2^24 (exact in float) for grids of up to 100000 cells.
template <class T>
T cell_value(const std::size_t g[3], const std::size_t global[3], std::uint32_t round) {
  const std::size_t index = g[0] + global[0] * (g[1] + global[1] * g[2]);
  return static_cast<T>(1 + index + 100000 * (round % 50 + g_seed % 64));
}

/// The local field (interior + ghosts, x fastest) as it must be after an exchange (`exchanged`),
/// or before it: the interior filled, every ghost cell the sentinel.
template <class T>
std::vector<T> halo_reference(const Cart& cart, const clbuf::Extents& interior, std::size_t h,
                              bool edges, std::uint32_t round, bool exchanged) {
  const std::size_t n[3] = {interior.x, interior.y, interior.z};
  std::size_t whole[3] = {1, 1, 1};
  std::size_t global[3] = {1, 1, 1};
  for (int d = 0; d < 3; ++d) {
    whole[d] = d < cart.ndims ? n[d] + 2 * h : 1;
    global[d] = n[d] * static_cast<std::size_t>(cart.dims[d]);
  }
  std::vector<T> field(whole[0] * whole[1] * whole[2]);
  std::size_t at = 0;
  for (std::size_t k = 0; k < whole[2]; ++k) {
    for (std::size_t j = 0; j < whole[1]; ++j) {
      for (std::size_t i = 0; i < whole[0]; ++i, ++at) {
        const std::size_t local[3] = {i, j, k};
        long long g[3] = {0, 0, 0};
        int ghosts = 0;
        bool inside = true;
        for (int d = 0; d < 3; ++d) {
          const long long shift = d < cart.ndims ? static_cast<long long>(h) : 0;
          const long long size = static_cast<long long>(global[d]);
          g[d] = static_cast<long long>(cart.coords[d]) * static_cast<long long>(n[d]) +
                 static_cast<long long>(local[d]) - shift;
          if (static_cast<long long>(local[d]) < shift ||
              static_cast<long long>(local[d]) >= shift + static_cast<long long>(n[d])) {
            ++ghosts;
          }
          if (g[d] < 0 || g[d] >= size) {
            if (cart.periodic[d]) {
              g[d] = (g[d] + size) % size;
            } else {
              inside = false;
            }
          }
        }
        const bool filled = ghosts == 0 || (exchanged && inside && (ghosts == 1 || edges));
        const std::size_t cell[3] = {static_cast<std::size_t>(g[0]), static_cast<std::size_t>(g[1]),
                                     static_cast<std::size_t>(g[2])};
        field[at] = filled ? cell_value<T>(cell, global, round)
                           : static_cast<T>(static_cast<long long>(kSentinel));
      }
    }
  }
  return field;
}

}  // namespace halo_grid

#endif  // CLBUF_TESTS_MPI_HALO_GRID_HPP
