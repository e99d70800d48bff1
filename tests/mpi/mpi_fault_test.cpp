// SPDX-License-Identifier: MIT
// clbuf::mpi's OpenCL kernels under fault injection (tests/fault/fault_hook.hpp), on every rank at
// once: HaloExchange's pack kernel and allreduce's device reduction, when the program does not
// build, when a launch is refused and when a kernel fails as it runs; a staged receive whose
// chunk write fails part-way, whose sender must still complete; and a staged send whose chunk read
// fails part-way, whose receiver must not wait for the rest. Every failure is a
// clbuf::Error naming the call, no rank is left waiting, the data is exact or unchanged, and the
// next call (faults off) works. Run under mpiexec on 2 and 3 ranks (label mpi).
#include "../fault/fault_hook.hpp"

#include <gtest/gtest.h>
#include <mpi.h>
#include <clbuf/mpi.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "case_watchdog.hpp"
#include "halo_grid.hpp"

namespace {

using clbuf_fault::state;
using halo_grid::Cart;
using halo_grid::halo_reference;

class MpiFault : public ::testing::Test {
 protected:
  void SetUp() override { manager_ = std::make_unique<clbuf::BufferManager>(); }
  void TearDown() override { state().disarm(); }

  /// A Communicator whose HaloExchange packs every box of two rows or more by the kernel.
  clbuf::mpi::Communicator kernel_communicator(MPI_Comm comm) {
    clbuf::mpi::Options options;
    options.halo_direct_max_bytes = 0;
    options.halo_kernel_max_row_bytes = SIZE_MAX;
    options.halo_kernel_min_rows = 0;
    return clbuf::mpi::Communicator(*manager_, comm, options);
  }

  std::unique_ptr<clbuf::BufferManager> manager_;
};

// The x faces of a 2-D field with one cell a row: the boxes the kernel packs.
const clbuf::Extents kInterior{3, 40, 1};

// A device that cannot build the pack kernel (no compiler, a failed build) packs by rect copies:
// the exchange is exact, and the build is not tried again.
TEST_F(MpiFault, PackKernelThatDoesNotBuildLeavesRectCopies) {
  Cart cart(2, 3U);
  clbuf::mpi::Communicator comm = kernel_communicator(cart.comm);
  clbuf::mpi::HaloExchange<float> halo(comm,
                                       clbuf::mpi::cartesian_faces(cart.comm, kInterior, 1, false));
  state().arm(clbuf_fault::BuildProgram, 1, /*keep_failing=*/true);
  for (std::uint32_t round = 1; round <= 2; ++round) {
    clbuf::DeviceBuffer<float> field =
        manager_->upload(halo_reference<float>(cart, kInterior, 1, false, round, false));
    const std::uint64_t copies = manager_->stats().copy.operations;
    halo.start(field);
    halo.finish();
    EXPECT_GT(manager_->stats().copy.operations, copies) << "round " << round;
    EXPECT_EQ(halo_reference<float>(cart, kInterior, 1, false, round, true),
              manager_->download(field))
        << "round " << round;
  }
  EXPECT_EQ(state().calls[clbuf_fault::BuildProgram], 1) << "the build is tried once";
  EXPECT_EQ(state().calls[clbuf_fault::EnqueueNDRangeKernel], 0);
}

// A pack kernel the driver refuses to launch: start() throws a clbuf::Error naming the call before
// any message is posted (on every rank alike, so none waits), and the exchange is reusable.
TEST_F(MpiFault, PackKernelLaunchRefusedIsAnErrorAndTheExchangeGoesOn) {
  Cart cart(2, 3U);
  clbuf::mpi::Communicator comm = kernel_communicator(cart.comm);
  clbuf::mpi::HaloExchange<float> halo(comm,
                                       clbuf::mpi::cartesian_faces(cart.comm, kInterior, 1, false));
  const std::vector<float> before = halo_reference<float>(cart, kInterior, 1, false, 3, false);
  clbuf::DeviceBuffer<float> field = manager_->upload(before);
  state().arm(clbuf_fault::EnqueueNDRangeKernel, 1, /*keep_failing=*/false);
  try {
    halo.start(field);
    ADD_FAILURE() << "start() did not throw";
  } catch (const clbuf::Error& e) {
    EXPECT_EQ(e.code(), CL_OUT_OF_RESOURCES);
    EXPECT_NE(std::string(e.what()).find("HaloExchange::start"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("clEnqueueNDRangeKernel"), std::string::npos) << e.what();
  }
  state().disarm();
  EXPECT_EQ(before, manager_->download(field)) << "a failed start() wrote into the field";
  halo.start(field);
  halo.finish();
  EXPECT_EQ(halo_reference<float>(cart, kInterior, 1, false, 3, true), manager_->download(field));
}

// A start() that fails on one rank alone (its pack kernel refused) still completes the exchange's
// messages: it takes its neighbours' boxes without unpacking them (its field is unchanged) and
// sends each neighbour a notice in place of its own box, so that their finish() throws a
// clbuf::Error naming it instead of waiting for ever; the next exchange is exact everywhere.
TEST_F(MpiFault, AStartThatFailsOnOneRankIsAnErrorOnItsNeighboursNotAHang) {
  Cart cart(2, 3U);
  clbuf::mpi::Communicator comm = kernel_communicator(cart.comm);
  clbuf::mpi::HaloExchange<float> halo(comm,
                                       clbuf::mpi::cartesian_faces(cart.comm, kInterior, 1, false));
  const std::vector<float> before = halo_reference<float>(cart, kInterior, 1, false, 4, false);
  clbuf::DeviceBuffer<float> field = manager_->upload(before);
  const int rank = comm.rank();
  if (rank == 0) state().arm(clbuf_fault::EnqueueNDRangeKernel, 1, /*keep_failing=*/false);
  try {
    halo.start(field);
    ASSERT_NE(rank, 0) << "start() did not throw on the rank whose launch was refused";
    halo.finish();
    ADD_FAILURE() << "finish() did not throw on rank " << rank << ", a neighbour of rank 0";
  } catch (const clbuf::Error& e) {
    const std::string what = e.what();
    if (rank == 0) {
      EXPECT_EQ(e.code(), CL_OUT_OF_RESOURCES) << what;
      EXPECT_NE(what.find("clEnqueueNDRangeKernel"), std::string::npos) << what;
    } else {
      EXPECT_EQ(e.code(), CL_SUCCESS) << what;
      EXPECT_NE(what.find("rank 0"), std::string::npos) << what;
      EXPECT_NE(what.find("failed before it could send"), std::string::npos) << what;
    }
  }
  state().disarm();
  if (rank == 0) {
    EXPECT_EQ(before, manager_->download(field)) << "a failed start() wrote into the field";
  }
  halo.start(field);
  halo.finish();
  EXPECT_EQ(halo_reference<float>(cart, kInterior, 1, false, 4, true), manager_->download(field));
}

// A pack kernel that fails as it runs (its event's status negative): its box is not sent, a notice
// goes in its place. The rank whose pack failed gets a clbuf::Error with the kernel's status, from
// start() (a box of one envelope, as here, is read once its pack has ended); the neighbour that
// got the notice fails naming that rank instead of unpacking a box that was never packed (before
// the fix it took the box silently), and a rank whose boxes all came is exact. On every rank at
// once, then on rank 0 alone (periodic along x only, so that every box goes to another rank); no
// rank waits, and the next exchange is exact.
TEST_F(MpiFault, PackKernelFailingOnTheDeviceIsAnErrorAndItsBoxIsNotSent) {
  Cart cart(2, 1U);
  clbuf::mpi::Communicator comm = kernel_communicator(cart.comm);
  clbuf::mpi::HaloExchange<float> halo(comm,
                                       clbuf::mpi::cartesian_faces(cart.comm, kInterior, 1, false));
  const int rank = comm.rank();
  std::uint32_t round = 4;
  for (const bool everywhere : {true, false}) {
    const std::vector<float> before =
        halo_reference<float>(cart, kInterior, 1, false, round, false);
    clbuf::DeviceBuffer<float> field = manager_->upload(before);
    const bool armed = everywhere || rank == 0;
    if (armed) state().arm(clbuf_fault::EnqueueNDRangeKernel, 1, false, /*failing_on_device=*/true);
    int told = 0;  // a neighbour's failure, named
    try {
      halo.start(field);
      halo.finish();
      // A rank none of whose boxes came from the failed pack completes, exact.
      EXPECT_FALSE(armed) << "no error on rank " << rank;
      EXPECT_EQ(halo_reference<float>(cart, kInterior, 1, false, round, true),
                manager_->download(field))
          << "rank " << rank;
    } catch (const clbuf::Error& e) {
      const std::string what = e.what();
      if (armed) {
        EXPECT_EQ(e.code(), CL_OUT_OF_RESOURCES) << what;
        EXPECT_NE(what.find("failed on the device"), std::string::npos) << what;
      } else {
        EXPECT_EQ(e.code(), CL_SUCCESS) << what;
        EXPECT_NE(what.find("rank 0"), std::string::npos) << what;
        EXPECT_NE(what.find("failed before it could send"), std::string::npos) << what;
        told = 1;
      }
    }
    if (armed) {
      EXPECT_EQ(state().fired, 1);
    }
    state().disarm();
    int neighbours_told = 0;
    MPI_Allreduce(&told, &neighbours_told, 1, MPI_INT, MPI_SUM, cart.comm);
    if (!everywhere) {
      EXPECT_GE(neighbours_told, 1) << "the neighbour of the box whose pack failed";
    }
    ++round;
  }
  clbuf::DeviceBuffer<float> next =
      manager_->upload(halo_reference<float>(cart, kInterior, 1, false, round, false));
  halo.start(next);
  halo.finish();
  EXPECT_EQ(halo_reference<float>(cart, kInterior, 1, false, round, true),
            manager_->download(next));
}

// allreduce on the device: a reduction kernel that does not build is a clbuf::Error naming
// clBuildProgram on every rank (each reduces its own part: none waits), the buffer unchanged.
TEST_F(MpiFault, AllreduceKernelThatDoesNotBuildIsAnErrorAndChangesNothing) {
  clbuf::mpi::Options options;
  options.device_reduce_bytes = 0;  // every reduction on the device
  clbuf::mpi::Communicator comm(*manager_, MPI_COMM_WORLD, options);
  std::vector<std::int32_t> mine(1000);
  for (std::size_t i = 0; i < mine.size(); ++i) {
    mine[i] = static_cast<std::int32_t>(i) * (comm.rank() + 1);
  }
  clbuf::DeviceBuffer<std::int32_t> buffer = manager_->upload(mine);
  state().arm(clbuf_fault::BuildProgram, 1, /*keep_failing=*/false);
  try {
    comm.allreduce(buffer);
    ADD_FAILURE() << "allreduce did not throw";
  } catch (const clbuf::Error& e) {
    EXPECT_EQ(e.code(), CL_BUILD_PROGRAM_FAILURE);
    EXPECT_NE(std::string(e.what()).find("clBuildProgram"), std::string::npos) << e.what();
  }
  state().disarm();
  EXPECT_EQ(mine, manager_->download(buffer)) << "a failed allreduce changed the buffer";
  comm.allreduce(buffer);
  const int ranks = comm.size();
  std::vector<std::int32_t> sum(mine.size());
  for (std::size_t i = 0; i < sum.size(); ++i) {
    sum[i] = static_cast<std::int32_t>(i) * ranks * (ranks + 1) / 2;
  }
  EXPECT_EQ(sum, manager_->download(buffer));
}

// allreduce on the device needs a receiving buffer of its own. A rank that cannot get one (its
// clCreateBuffer refused) rejects the call at the agreement, so that every rank throws (the others
// "rank 0 rejected its arguments") instead of that rank leaving the ring while its neighbours wait
// for it for ever (as before the fix). The buffers are unchanged; the next allreduce is exact.
TEST_F(MpiFault, AllreduceThatCannotGetItsBufferOnOneRankIsAnErrorOnEveryRank) {
  clbuf::BufferManager manager;  // a pool of its own, empty: the allocation asks the driver
  clbuf::mpi::Options options;
  options.device_reduce_bytes = 0;  // every reduction on the device
  clbuf::mpi::Communicator comm(manager, MPI_COMM_WORLD, options);
  std::vector<std::int32_t> mine(1000);
  for (std::size_t i = 0; i < mine.size(); ++i) {
    mine[i] = static_cast<std::int32_t>(i) * (comm.rank() + 1);
  }
  clbuf::DeviceBuffer<std::int32_t> buffer = manager.upload(mine);
  manager.finish();
  if (comm.rank() == 0) state().arm(clbuf_fault::CreateBuffer, 1, /*keep_failing=*/true);
  try {
    comm.allreduce(buffer);
    ADD_FAILURE() << "allreduce did not throw on rank " << comm.rank();
  } catch (const clbuf::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(comm.rank() == 0 ? "clCreateBuffer" : "rank 0 rejected"), std::string::npos)
        << what;
  }
  state().disarm();
  EXPECT_EQ(mine, manager.download(buffer)) << "a failed allreduce changed the buffer";
  comm.allreduce(buffer);
  const int ranks = comm.size();
  std::vector<std::int32_t> sum(mine.size());
  for (std::size_t i = 0; i < sum.size(); ++i) {
    sum[i] = static_cast<std::int32_t>(i) * ranks * (ranks + 1) / 2;
  }
  EXPECT_EQ(sum, manager.download(buffer));
}

// A staged receive whose third chunk's device write fails, refused by the driver or failing on
// the device: the receiver gets a clbuf::Error naming the write; the rest of the message is still
// received (and dropped), so the sender's blocking send completes instead of waiting forever; the
// pinned budget stays whole, and the next message between the pair arrives exactly.
TEST_F(MpiFault, AStagedReceiveThatFailsPartWayLetsTheSenderComplete) {
  clbuf::mpi::Options options;
  options.chunk_bytes = 64 << 10;
  options.depth = 2;
  options.path = clbuf::mpi::Path::staged;
  clbuf::mpi::Communicator comm(*manager_, MPI_COMM_WORLD, options);
  const std::size_t n = 8 * (64 << 10) / sizeof(float);  // eight chunks
  std::vector<float> data(n);
  for (std::size_t i = 0; i < n; ++i) data[i] = static_cast<float>(i % 1000) + 0.5f;
  for (const bool on_device : {false, true}) {
    if (comm.rank() == 0) {
      comm.send(manager_->upload(data), 1, 3);  // returns: the receiver drained the rest
      comm.send(manager_->upload(data), 1, 4);
    } else if (comm.rank() == 1) {
      clbuf::DeviceBuffer<float> in = manager_->allocate<float>(n);
      manager_->finish();
      state().arm(clbuf_fault::EnqueueWriteBuffer, 3, /*keep_failing=*/false, on_device);
      try {
        comm.recv(in, 0, 3);
        ADD_FAILURE() << "recv did not throw (on the device: " << on_device << ")";
      } catch (const clbuf::Error& e) {
        EXPECT_NE(std::string(e.what()).find("clEnqueueWriteBuffer"), std::string::npos)
            << e.what();
      }
      state().disarm();
      clbuf::DeviceBuffer<float> next = manager_->allocate<float>(n);
      comm.recv(next, 0, 4);
      EXPECT_EQ(data, manager_->download(next)) << "on the device: " << on_device;
      EXPECT_LE(comm.peak_pinned_bytes(), 2 * 2 * options.chunk_bytes) << "the receive budget";
    }
  }
}

// A staged send whose chunk read fails part-way (the first read or the third; refused by the
// driver or failing on the device): the sender gets a clbuf::Error naming the read, and the
// receiver is not left waiting for chunks that never come: they arrive empty and its receive
// fails naming the sender (code CL_SUCCESS: nothing failed in its OpenCL), whether it receives
// staged, mapped or straight into a host block. A mapped receive hands the buffer back before it
// reports (its Request's stream may outlive the wait). The pinned budgets hold and the next
// message between the pair arrives exactly.
TEST_F(MpiFault, AStagedSendThatFailsPartWayIsAnErrorOnBothRanks) {
  struct Case {
    long read;  // which clEnqueueReadBuffer of the send fails
    bool on_device;
  };
  const std::size_t chunk = 64 << 10;
  const std::size_t n = 8 * chunk / sizeof(float);  // eight chunks
  std::vector<float> data(n);
  for (std::size_t i = 0; i < n; ++i) data[i] = static_cast<float>(i % 1000) + 0.25f;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const std::pair<clbuf::mpi::Path, const char*> receivers[] = {
      {clbuf::mpi::Path::staged, "staged"},
      {clbuf::mpi::Path::map, "mapped"},
      {clbuf::mpi::Path::zero_copy, "straight"}};
  for (const auto& [receiver, name] : receivers) {
    clbuf::mpi::Options options;
    options.chunk_bytes = chunk;
    options.depth = 2;
    options.path = rank == 0 ? clbuf::mpi::Path::staged : receiver;
    clbuf::mpi::Communicator comm(*manager_, MPI_COMM_WORLD, options);
    for (const Case c : {Case{1, false}, Case{3, false}, Case{1, true}, Case{3, true}}) {
      const std::string where = "read " + std::to_string(c.read) +
                                (c.on_device ? " failing on the device, " : " refused, ") + name +
                                " receiver";
      if (rank == 0) {
        const clbuf::DeviceBuffer<float> out = manager_->upload(data);
        manager_->finish();
        state().arm(clbuf_fault::EnqueueReadBuffer, c.read, /*keep_failing=*/false, c.on_device);
        try {
          comm.send(out, 1, 3);
          ADD_FAILURE() << "send did not throw (" << where << ")";
        } catch (const clbuf::Error& e) {
          EXPECT_NE(std::string(e.what()).find("clEnqueueReadBuffer"), std::string::npos)
              << where << ": " << e.what();
        }
        state().disarm();
        comm.send(out, 1, 4);
        EXPECT_LE(comm.peak_pinned_bytes(), 2 * 2 * chunk) << "the send budget; " << where;
      } else if (rank == 1) {
        clbuf::DeviceBuffer<float> in = manager_->allocate<float>(n);
        try {
          comm.irecv(in, 0, 3).wait();
          ADD_FAILURE() << "recv did not throw (" << where << ")";
        } catch (const clbuf::Error& e) {
          EXPECT_EQ(e.code(), CL_SUCCESS) << where << ": " << e.what();
          EXPECT_NE(std::string(e.what()).find("rank 0 (tag 3) failed part-way"), std::string::npos)
              << where << ": " << e.what();
        }
        EXPECT_EQ(in.native().getInfo<CL_MEM_MAP_COUNT>(), 0u) << "left mapped; " << where;
        clbuf::DeviceBuffer<float> next = manager_->allocate<float>(n);
        comm.recv(next, 0, 4);
        EXPECT_EQ(data, manager_->download(next)) << where;
        EXPECT_LE(comm.peak_pinned_bytes(), 2 * 2 * chunk) << "the receive budget; " << where;
      }
    }
  }
}

// A send that fails before MPI has any of its message (the read of a small message, or the map
// of a large one, refused by the driver, or failing on the device) sends a notice in its place:
// the receive fails naming the sender (code CL_SUCCESS: nothing failed in its own OpenCL) and
// leaves its buffer unchanged, instead of waiting for ever; under Path::whole, whose messages are
// raw bytes, the notice is an empty message and the receive fails on its size. The sender gets
// the clbuf::Error of what failed. The notice is taken by that receive, not left behind: the next
// message with the same tag arrives exactly. Blocking send and isend alike.
TEST_F(MpiFault, ASendThatFailsBeforeItPostsIsAnErrorOnTheReceiverNotAHang) {
  const bool host_blocks = manager_->memory_model() == clbuf::MemoryModel::host;
  struct Case {
    const char* name;
    clbuf::mpi::Path path;
    std::size_t count;  // floats
    int site;           // what fails on the sender
  };
  // A small message's payload is read by the manager (a CPU device's host block is copied after
  // clFinish); a large one is mapped, under Path::whole too (a host block: clFinish).
  const int small_site = host_blocks ? clbuf_fault::Finish : clbuf_fault::EnqueueReadBuffer;
  const int whole_site = host_blocks ? clbuf_fault::Finish : clbuf_fault::EnqueueMapBuffer;
  const Case cases[] = {
      {"small", clbuf::mpi::Path::automatic, 100, small_site},
      {"large, mapped", clbuf::mpi::Path::map, 3 * 4096, clbuf_fault::EnqueueMapBuffer},
      {"large, Path::whole", clbuf::mpi::Path::whole, 3 * 4096, whole_site},
  };
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  for (const Case& c : cases) {
    clbuf::mpi::Options options;
    options.chunk_bytes = 4096;
    options.path = c.path;
    clbuf::mpi::Communicator comm(*manager_, MPI_COMM_WORLD, options);
    std::vector<float> data(c.count);
    for (std::size_t i = 0; i < c.count; ++i) data[i] = static_cast<float>(i % 997) + 0.75f;
    const std::vector<float> unchanged(c.count, -2.0f);
    for (const bool async : {false, true}) {
      for (const bool on_device : {false, true}) {
        if (on_device && c.site == clbuf_fault::Finish) continue;  // clFinish has no event
        const std::string where = std::string(c.name) + (async ? ", isend" : ", send") +
                                  (on_device ? ", failing on the device" : ", refused");
        if (rank == 0) {
          const clbuf::DeviceBuffer<float> out = manager_->upload(data);
          manager_->finish();
          state().arm(c.site, 1, /*keep_failing=*/false, on_device);
          try {
            if (async) {
              comm.isend(out, 1, 5).wait();
            } else {
              comm.send(out, 1, 5);
            }
            ADD_FAILURE() << "the send did not throw (" << where << ")";
          } catch (const clbuf::Error& e) {
            EXPECT_NE(std::string(e.what()).find(clbuf_fault::site_name(c.site)), std::string::npos)
                << where << ": " << e.what();
          }
          EXPECT_EQ(state().fired, 1) << where;
          state().disarm();
          comm.send(out, 1, 5);
        } else if (rank == 1) {
          clbuf::DeviceBuffer<float> in = manager_->upload(unchanged);
          try {
            if (async) {
              comm.irecv(in, 0, 5).wait();
            } else {
              comm.recv(in, 0, 5);
            }
            ADD_FAILURE() << "the receive did not throw (" << where << ")";
          } catch (const clbuf::Error& e) {
            const std::string what = e.what();
            if (c.path == clbuf::mpi::Path::whole) {
              EXPECT_EQ(e.code(), CL_INVALID_VALUE) << where << ": " << what;
              EXPECT_NE(what.find("sent 0 bytes"), std::string::npos) << where << ": " << what;
            } else {
              EXPECT_EQ(e.code(), CL_SUCCESS) << where << ": " << what;
              EXPECT_NE(what.find("rank 0 (tag 5) failed before it could send"), std::string::npos)
                  << where << ": " << what;
            }
          }
          EXPECT_EQ(unchanged, manager_->download(in))
              << "a notice wrote into the buffer; " << where;
          comm.recv(in, 0, 5);
          EXPECT_EQ(data, manager_->download(in)) << "the message after the notice; " << where;
        }
      }
    }
  }
}

// A box that goes straight from the field to pinned memory (a discrete device) and whose read
// fails once queued (its wait fails) is not sent: its neighbour gets a notice in its place, and
// its exchange fails naming the rank instead of unpacking a box that was never read. The rank
// whose read failed gets that read's clbuf::Error; the next exchange is exact on every rank.
// Periodic along x only, so that every box goes to another rank.
TEST_F(MpiFault, AStraightBoxWhoseReadFailsIsAnErrorOnItsNeighbourNotStaleGhosts) {
  Cart cart(2, 1U);
  clbuf::Options device_options;
  device_options.memory = clbuf::MemoryModel::discrete;
  clbuf::BufferManager manager("", device_options);
  clbuf::mpi::Options options;
  options.halo_direct_max_bytes = SIZE_MAX;  // every box straight
  options.halo_kernel_max_row_bytes = 0;     // none by the kernel
  clbuf::mpi::Communicator comm(manager, cart.comm, options);
  clbuf::mpi::HaloExchange<float> halo(comm,
                                       clbuf::mpi::cartesian_faces(cart.comm, kInterior, 1, false));
  clbuf::DeviceBuffer<float> field =
      manager.upload(halo_reference<float>(cart, kInterior, 1, false, 6, false));
  manager.finish();
  const int rank = comm.rank();
  if (rank == 0) state().arm(clbuf_fault::WaitForEvents, 1, /*keep_failing=*/false);
  int told = 0;  // this rank's finish() named rank 0's failure
  try {
    halo.start(field);
    halo.finish();
    EXPECT_NE(rank, 0) << "no error on the rank whose read failed";
  } catch (const clbuf::Error& e) {
    const std::string what = e.what();
    if (rank == 0) {
      EXPECT_NE(what.find("download_rect_async"), std::string::npos) << what;
    } else {
      EXPECT_EQ(e.code(), CL_SUCCESS) << what;
      EXPECT_NE(what.find("rank 0"), std::string::npos) << what;
      EXPECT_NE(what.find("failed before it could send"), std::string::npos) << what;
      told = 1;
    }
  }
  if (rank == 0) {
    EXPECT_EQ(state().fired, 1);
  }
  state().disarm();
  int neighbours_told = 0;
  MPI_Allreduce(&told, &neighbours_told, 1, MPI_INT, MPI_SUM, cart.comm);
  // At least the neighbour of the box that was not read; the other one too where its box had not
  // gone yet when start() failed (a failed start() sends no more boxes).
  EXPECT_GE(neighbours_told, 1) << "the neighbour of the box that was not read";
  clbuf::DeviceBuffer<float> next =
      manager.upload(halo_reference<float>(cart, kInterior, 1, false, 7, false));
  halo.start(next);
  halo.finish();
  EXPECT_EQ(halo_reference<float>(cart, kInterior, 1, false, 7, true), manager.download(next));
}

// A start() that fails before it sends (a straight box's read refused) while an earlier exchange
// with the same tags still holds its boxes back for their reads: the earlier exchange's boxes go
// before the failed one's notices, so that each neighbour takes the earlier boxes as the earlier
// exchange's (exact, no error) and the notices as the failed exchange's (its finish() fails).
// Before the fix the notices overtook the held-back boxes: the neighbour's earlier exchange failed
// and the later one took the earlier boxes silently. (Reported by a review, 2026-12-05.)
TEST_F(MpiFault, AFailedStartsNoticesFollowAnEarlierExchangesHeldBackBoxes) {
  Cart cart(2, 1U);
  clbuf::Options device_options;
  device_options.memory = clbuf::MemoryModel::discrete;  // boxes go straight, after their reads
  clbuf::BufferManager manager("", device_options);
  clbuf::mpi::Options options;
  options.halo_direct_max_bytes = SIZE_MAX;
  options.halo_kernel_max_row_bytes = 0;
  clbuf::mpi::Communicator comm(manager, cart.comm, options);
  const std::vector<clbuf::mpi::Neighbour> plan =
      clbuf::mpi::cartesian_faces(cart.comm, kInterior, 1, false);
  clbuf::mpi::HaloExchange<float> earlier(comm, plan);
  clbuf::mpi::HaloExchange<float> failing(comm, plan);
  clbuf::DeviceBuffer<float> first =
      manager.upload(halo_reference<float>(cart, kInterior, 1, false, 8, false));
  const std::vector<float> second_before =
      halo_reference<float>(cart, kInterior, 1, false, 9, false);
  clbuf::DeviceBuffer<float> second = manager.upload(second_before);
  manager.finish();
  if (comm.rank() == 0) {
    // The earlier exchange's reads wait behind a user event that another thread completes.
    cl_int err = CL_SUCCESS;
    cl::UserEvent gate(manager.context(), &err);
    ASSERT_EQ(err, CL_SUCCESS);
    cl::CommandQueue queue = manager.queue();
    const std::vector<cl::Event> wait{gate};
    ASSERT_EQ(queue.enqueueMarkerWithWaitList(&wait), CL_SUCCESS);
    queue.flush();
    earlier.start(first);  // its boxes are held back until their reads complete
    std::thread opener([gate]() mutable {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      gate.setStatus(CL_COMPLETE);
    });
    state().arm(clbuf_fault::EnqueueReadBufferRect, 1, /*keep_failing=*/false);
    try {
      failing.start(second);
      ADD_FAILURE() << "start() did not throw";
    } catch (const clbuf::Error& e) {
      EXPECT_NE(std::string(e.what()).find("clEnqueueReadBufferRect"), std::string::npos)
          << e.what();
    }
    state().disarm();
    opener.join();
    earlier.finish();
    EXPECT_EQ(second_before, manager.download(second)) << "a failed start() wrote into the field";
  } else {
    earlier.start(first);
    failing.start(second);
    earlier.finish();  // the earlier boxes, not a notice
    try {
      failing.finish();
      ADD_FAILURE() << "finish() did not throw on rank " << comm.rank();
    } catch (const clbuf::Error& e) {
      EXPECT_EQ(e.code(), CL_SUCCESS) << e.what();
      EXPECT_NE(std::string(e.what()).find("rank 0"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("failed before it could send"), std::string::npos)
          << e.what();
    }
  }
  EXPECT_EQ(halo_reference<float>(cart, kInterior, 1, false, 8, true), manager.download(first))
      << "the earlier exchange, rank " << comm.rank();
  failing.start(second);  // the pair works on, exact
  failing.finish();
  EXPECT_EQ(halo_reference<float>(cart, kInterior, 1, false, 9, true), manager.download(second));
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  ::testing::InitGoogleTest(&argc, argv);
  halo_grid::share_seed();
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  case_watchdog::install(rank);
  const int failed = RUN_ALL_TESTS();
  int any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any;
}
