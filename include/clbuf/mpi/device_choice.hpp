// SPDX-License-Identifier: MIT
// clbuf::mpi's device choice per rank: local_device_selector() gives each rank of a node its own
// GPU (the rank among the node's ranks, modulo the GPUs), as a BufferManager selector.
#ifndef CLBUF_MPI_DEVICE_CHOICE_HPP
#define CLBUF_MPI_DEVICE_CHOICE_HPP

#include <mpi.h>
#include <clbuf/detail/mpi/wire.hpp>
#include <clbuf/device.hpp>
#include <clbuf/error.hpp>

#include <cstddef>
#include <iostream>
#include <string>
#include <vector>

namespace clbuf {
namespace mpi {

/// The device for this rank: "P:D" (BufferManager's selector grammar) of GPU number
/// local_rank % GPUs, where local_rank is the rank among the ranks of `comm` on this node
/// (MPI_Comm_split_type, MPI_COMM_TYPE_SHARED); CPU devices when there is no GPU. Collective
/// over `comm`. Prints a warning on stderr when more ranks than GPUs share a node (each small
/// transfer then waits for the GPU to switch processes: ~155 us instead of ~7 us on an H200).
/// @throws Error CL_DEVICE_NOT_FOUND when there is no device, or an MPI call's failure.
inline std::string local_device_selector(MPI_Comm comm = MPI_COMM_WORLD) {
  const char* op = "local_device_selector";
  MPI_Comm local = MPI_COMM_NULL;
  detail::check_mpi(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local), op,
                    "MPI_Comm_split_type");
  int local_rank = 0;
  int local_size = 1;
  MPI_Comm_rank(local, &local_rank);
  MPI_Comm_size(local, &local_size);
  MPI_Comm_free(&local);
  const std::vector<DeviceInfo> devices = list_devices();
  std::vector<const DeviceInfo*> pick;
  for (DeviceType type : {DeviceType::gpu, DeviceType::cpu}) {
    for (const DeviceInfo& device : devices) {
      if (device.type == type) pick.push_back(&device);
    }
    if (!pick.empty()) break;
  }
  if (pick.empty()) {
    for (const DeviceInfo& device : devices) pick.push_back(&device);
  }
  if (pick.empty()) clbuf::detail::fail(op, CL_DEVICE_NOT_FOUND, "no OpenCL device on this node");
  const DeviceInfo& chosen = *pick[static_cast<std::size_t>(local_rank) % pick.size()];
  if (chosen.type == DeviceType::gpu && static_cast<std::size_t>(local_size) > pick.size() &&
      static_cast<std::size_t>(local_rank) == pick.size()) {
    std::cerr << "clbuf::mpi: " << local_size << " ranks on this node share " << pick.size()
              << " GPU(s); ranks sharing a GPU wait for it to switch processes at every transfer "
                 "(run one rank per GPU)\n";
  }
  return std::to_string(chosen.platform_index) + ":" + std::to_string(chosen.device_index);
}

}  // namespace mpi
}  // namespace clbuf

#endif  // CLBUF_MPI_DEVICE_CHOICE_HPP
