// SPDX-License-Identifier: MIT
// clbuf::mpi: device buffers as MPI messages, on a plain host-memory MPI (Open MPI 4.1 as
// Debian ships it). Optional: include it and link the CMake target clbuf::mpi (clbuf + MPI).
//
// No MPI recognises a cl_mem, so clbuf moves the bytes itself, by the path the manager's
// memory_model() calls for: a CPU device hands MPI the buffer's own host memory (zero copy);
// unified memory is mapped around MPI; a discrete GPU pipelines through pinned chunks (4 MiB,
// two per direction), the DMA of one chunk overlapping MPI's transfer of the other. Both ends
// must use clbuf::mpi: a message is a header, then its payload inline or in chunks
// (docs/mpi.md); Path::whole instead speaks plain MPI (one message of the raw bytes, MPI's own
// collectives) to peers without clbuf.
//
// The API is in clbuf/mpi/, one concern a header: options.hpp (Op, Path, Options),
// device_choice.hpp (local_device_selector), requests.hpp (Request, Persistent, wait_all),
// communicator.hpp (Communicator), halo.hpp (Box, Neighbour, cartesian_faces, HaloExchange). The
// protocol under it (headers, tags, streams, progress) is in clbuf/detail/mpi/.
#ifndef CLBUF_MPI_HPP
#define CLBUF_MPI_HPP

#include <clbuf/mpi/checkpoint.hpp>
#include <clbuf/mpi/communicator.hpp>
#include <clbuf/mpi/device_choice.hpp>
#include <clbuf/mpi/halo.hpp>
#include <clbuf/mpi/options.hpp>
#include <clbuf/mpi/requests.hpp>

#endif  // CLBUF_MPI_HPP
