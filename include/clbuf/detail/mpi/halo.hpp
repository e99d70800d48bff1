// SPDX-License-Identifier: MIT
// The geometry behind clbuf::mpi::HaloExchange's boxes and cartesian_faces(): the rect copies
// that pack a box of the field into a contiguous buffer and unpack one back, and the neighbours
// of a rank on an MPI Cartesian grid (MPI_Cart_get, MPI_Cart_rank) with the part of the field
// each direction sends and receives.
#ifndef CLBUF_DETAIL_MPI_HALO_HPP
#define CLBUF_DETAIL_MPI_HALO_HPP

#include <mpi.h>
#include <clbuf/detail/mpi/wire.hpp>
#include <clbuf/error.hpp>
#include <clbuf/rect.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace clbuf {
namespace mpi {
namespace detail {

/// The copy of a box (`size` from `origin` of a field laid out as `field`) into a contiguous
/// buffer of exactly its elements (x fastest).
inline Region pack_region(const Offset& origin, const Extents& size, const Extents& field) {
  Region region;
  region.size = size;
  region.src_origin = origin;
  region.src_extents = field;
  region.dst_extents = size;
  return region;
}

/// The reverse of pack_region(): a contiguous buffer of the box's elements into the box.
inline Region unpack_region(const Offset& origin, const Extents& size, const Extents& field) {
  Region region = pack_region(origin, size, field);
  std::swap(region.src_origin, region.dst_origin);
  std::swap(region.src_extents, region.dst_extents);
  return region;
}

/// How a box of a halo plan is named in messages: "neighbour 3 (rank 1) send box".
inline std::string halo_part(std::size_t index, int rank, const char* what) {
  return "neighbour " + std::to_string(index) + " (rank " +
         (rank == MPI_PROC_NULL ? std::string("MPI_PROC_NULL") : std::to_string(rank)) + ") " +
         what;
}

/// A rank's place on a Cartesian communicator (MPI_Cart_get), 1 to 3 dimensions.
struct CartesianGrid {
  int ndims = 0;
  int dims[3] = {1, 1, 1};
  int periods[3] = {0, 0, 0};
  int coords[3] = {0, 0, 0};
};

inline CartesianGrid cartesian_grid(const char* operation, MPI_Comm comm) {
  if (comm == MPI_COMM_NULL)
    clbuf::detail::fail(operation, CL_INVALID_VALUE, "the communicator is MPI_COMM_NULL");
  int topology = MPI_UNDEFINED;
  check_mpi(MPI_Topo_test(comm, &topology), operation, "MPI_Topo_test");
  if (topology != MPI_CART) {
    clbuf::detail::fail(
        operation, CL_INVALID_VALUE,
        "the communicator has no Cartesian topology (make it with MPI_Cart_create)");
  }
  CartesianGrid grid;
  check_mpi(MPI_Cartdim_get(comm, &grid.ndims), operation, "MPI_Cartdim_get");
  if (grid.ndims < 1 || grid.ndims > 3) {
    clbuf::detail::fail(operation, CL_INVALID_VALUE,
                        "the Cartesian communicator has " + std::to_string(grid.ndims) +
                            " dimensions; 1, 2 or 3 are supported");
  }
  check_mpi(MPI_Cart_get(comm, grid.ndims, grid.dims, grid.periods, grid.coords), operation,
            "MPI_Cart_get");
  return grid;
}

/// The rank one step along `step` (each -1, 0 or +1 per dimension) from this one: across a
/// periodic dimension's end it wraps, across a closed one it is MPI_PROC_NULL.
inline int cartesian_neighbour(const char* operation, MPI_Comm comm, const CartesianGrid& grid,
                               const int step[3]) {
  int coords[3] = {0, 0, 0};
  for (int d = 0; d < grid.ndims; ++d) {
    coords[d] = grid.coords[d] + step[d];
    if (coords[d] >= 0 && coords[d] < grid.dims[d]) continue;
    if (!grid.periods[d]) return MPI_PROC_NULL;
    coords[d] = (coords[d] + grid.dims[d]) % grid.dims[d];
  }
  int rank = MPI_PROC_NULL;
  check_mpi(MPI_Cart_rank(comm, coords, &rank), operation, "MPI_Cart_rank");
  return rank;
}

/// Along one axis of interior `n` and halo `h` (the field holds n + 2h): the cells sent toward
/// `step` (-1: the first h interior cells, +1: the last h, 0: the whole interior) or, when
/// `!send`, the ghost cells filled from `step` (-1: the h below the interior, +1: the h above,
/// 0: the interior's extent).
inline void halo_span(int step, std::size_t n, std::size_t h, bool send, std::size_t& origin,
                      std::size_t& size) {
  if (step == 0) {
    origin = h;
    size = n;
  } else {
    size = h;
    if (send) {
      origin = step < 0 ? h : n;
    } else {
      origin = step < 0 ? 0 : n + h;
    }
  }
}

/// The extents of the field cartesian_faces() plans: `interior` with `halo` ghost cells on both
/// sides of each of the first `ndims` axes (1 along the others).
/// @throws Error CL_INVALID_VALUE for an interior narrower than the halo along a decomposed axis
///         or wider than 1 along another, or extents that overflow size_t.
inline Extents halo_field(const char* operation, int ndims, const Extents& interior,
                          std::size_t halo) {
  const std::size_t n[3] = {interior.x, interior.y, interior.z};
  for (int d = 0; d < 3; ++d) {
    const char axis = "xyz"[d];
    if (d < ndims && n[d] < halo) {
      clbuf::detail::fail(operation, CL_INVALID_VALUE,
                          std::string("interior of ") + clbuf::detail::describe(interior) +
                              " elements is narrower than the halo of " + std::to_string(halo) +
                              " along " + axis);
    }
    if (d >= ndims && n[d] != 1) {
      clbuf::detail::fail(operation, CL_INVALID_VALUE,
                          std::string("interior of ") + clbuf::detail::describe(interior) +
                              " elements on a communicator of " + std::to_string(ndims) +
                              " dimensions: its extent along " + axis + " must be 1");
    }
  }
  std::size_t whole[3] = {1, 1, 1};
  for (int d = 0; d < ndims; ++d) {
    if (halo > SIZE_MAX / 4 || n[d] > SIZE_MAX - 2 * halo) {
      clbuf::detail::fail(operation, CL_INVALID_VALUE, "the field's extents overflow size_t");
    }
    whole[d] = n[d] + 2 * halo;
  }
  return Extents{whole[0], whole[1], whole[2]};
}

/// The box of a halo field (interior `interior`, `halo` ghost cells along the first `ndims`
/// axes) sent toward `step` (`send`) or filled from it (!send), halo_span() along each axis.
inline void halo_box(const int step[3], const Extents& interior, std::size_t halo, int ndims,
                     bool send, Offset& origin, Extents& size) {
  const std::size_t n[3] = {interior.x, interior.y, interior.z};
  std::size_t* origins[3] = {&origin.x, &origin.y, &origin.z};
  std::size_t* sizes[3] = {&size.x, &size.y, &size.z};
  for (int d = 0; d < ndims; ++d) halo_span(step[d], n[d], halo, send, *origins[d], *sizes[d]);
}

/// A direction's number, 0 to 26 ((x + 1) + 3 (y + 1) + 9 (z + 1)); the message sent toward a
/// direction carries it, so two messages between the same pair of ranks never share a tag.
inline int direction_code(const int step[3]) noexcept {
  return (step[0] + 1) + 3 * (step[1] + 1) + 9 * (step[2] + 1);
}

}  // namespace detail
}  // namespace mpi
}  // namespace clbuf

#endif  // CLBUF_DETAIL_MPI_HALO_HPP
