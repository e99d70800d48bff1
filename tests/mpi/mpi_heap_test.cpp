// SPDX-License-Identifier: MIT
// Out of host memory inside clbuf::mpi: the Nth C++ heap allocation clbuf makes while a workload
// of Communicator and HaloExchange calls runs fails, for every N the workload reaches, on every
// MemoryModel (so on every Path: zero_copy, map, staged). README "Errors": each such failure is a
// clbuf::Error with CL_OUT_OF_HOST_MEMORY or is absorbed with exact data, never std::bad_alloc;
// a message a failed call left behind is still received whole or reported, and the Communicator
// and its manager still work afterwards. The workload runs on MPI_COMM_SELF, every message to
// this rank itself, so that a failure cannot leave another process waiting: every message is
// sent before it is received, and a receive that failed before it took its message, or a send
// that failed (leaving a notice or the rest of its message), is followed by a receive that takes
// what was left (the test finds it with MPI_Iprobe). Allocations inside OpenCL calls are
// not counted (as tests/fault/heap_fault_test.cpp; MPI allocates with malloc). CTest runs it
// under mpiexec -np 1 (label mpi); under more ranks each runs the sweep on its own.
#define CL_HPP_TARGET_OPENCL_VERSION 120
#define CL_HPP_MINIMUM_OPENCL_VERSION 120
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS
#include <CL/opencl.hpp>

#include "../support/failing_heap.hpp"

#include <gtest/gtest.h>
#include <mpi.h>
#include <clbuf/mpi.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <mutex>
#include <numeric>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "../support/device_test.hpp"
#include "halo_grid.hpp"

namespace {

using clbuf::MemoryModel;
using Data = std::vector<std::uint32_t>;
using Buffer = std::optional<clbuf::DeviceBuffer<std::uint32_t>>;

constexpr std::size_t small = 100;          // 400 bytes: one message (the envelope)
constexpr std::size_t large = 20000;        // 80,000 bytes: five chunks of 16 KiB
const clbuf::Extents kInterior{12, 10, 1};  // a 2-D halo field (one cell of halo each side)

Data counting(std::size_t n, std::uint32_t from) {
  Data data(n);
  std::iota(data.begin(), data.end(), from);
  return data;
}

/// One trial: a BufferManager and a Communicator on this rank alone, every call of the
/// workload once, in steps; what the completed steps received is checked afterwards. Its data
/// and buffers are made before allocations are counted.
struct Trial : heap_fault::Steps {
  explicit Trial(MemoryModel model) : cart(2, 3U, MPI_COMM_SELF) {
    options.memory = model;  // host: Path::zero_copy, unified: map, discrete: staged
    options.staging_threshold_bytes = 8192;
    options.staging_chunk_bytes = 4096;
    options.staging_chunks = 3;
    mpi_options.chunk_bytes = 16384;
    mpi_options.device_reduce_bytes = 1024;  // the large allreduce reduces on the device
    a = counting(small, 1);
    big = counting(large, 1000);
    field_before = halo_grid::halo_reference<std::uint32_t>(cart, kInterior, 1, false, 1, false);
    field_after = halo_grid::halo_reference<std::uint32_t>(cart, kInterior, 1, false, 1, true);
    add("Communicator", [this] { comm.emplace(*m, MPI_COMM_SELF, mpi_options); });
    add("send, recv: MPI_PROC_NULL", [this] {
      comm->send(*out_small, MPI_PROC_NULL, 1);
      comm->recv(*in_small, MPI_PROC_NULL, 1);
    });
    message("send, recv: small, blocking", 5, in_small, [this](int tag) {
      comm->send(*out_small, 0, tag);  // one envelope: MPI buffers it, so send() returns
      return clbuf::mpi::Request();
    });
    message("isend, recv: small", 2, in_small,
            [this](int tag) { return comm->isend(*out_small, 0, tag); });
    message("isend, recv: large", 3, in_big,
            [this](int tag) { return comm->isend(*out_big, 0, tag); });
    message("send_init, recv: large", 4, in_big2, [this](int tag) {
      persistent.emplace(comm->send_init(*out_big, 0, tag));
      persistent->start();
      return clbuf::mpi::Request();
    });
    exchange("sendrecv: small", 6, out_small, in_small);  // in_small holds `a` either way
    exchange("sendrecv: large", 7, out_big, in_big);      // checked after broadcast (also big)
    add("broadcast", [this] { comm->broadcast(*in_big, 0); });
    add("allreduce: small (on the host)",
        [this] { comm->allreduce(*reduce_small, clbuf::mpi::Op::max); });
    add("allreduce: large (on the device)", [this] { comm->allreduce(*reduce_big); });
    add("ibroadcast", [this] { comm->ibroadcast(*in_small, 0).wait(); });
    add("iallreduce", [this] { comm->iallreduce(*reduce_small, clbuf::mpi::Op::min).wait(); });
    add("scatter", [this] { comm->scatter(*out_big, *scattered, 0); });
    add("gather", [this] { comm->gather(*scattered, *gathered, 0); });
    add("barrier", [this] { comm->barrier(); });
    add("cartesian_faces, HaloExchange", [this] {
      halo.emplace(*comm, clbuf::mpi::cartesian_faces(cart.comm, kInterior, 1, false));
    });
    add("HaloExchange::start", [this] { halo->start(*field); });
    add("HaloExchange::finish", [this] { halo->finish(); });
  }

  halo_grid::Cart cart;  // MPI_COMM_SELF, periodic: every face goes to this rank
  clbuf::Options options;
  clbuf::mpi::Options mpi_options;
  Data a, big, field_before, field_after;
  std::optional<clbuf::BufferManager> m;
  std::optional<clbuf::mpi::Communicator> comm;
  std::optional<clbuf::mpi::Persistent> persistent;
  std::optional<clbuf::mpi::HaloExchange<std::uint32_t>> halo;
  Buffer out_small, in_small, out_big, in_big, in_big2, reduce_small, reduce_big, scattered,
      gathered, field;
  std::vector<std::function<void()>> steps;

  void add(const char* name, std::function<void()> step) {
    names.push_back(name);
    steps.push_back(std::move(step));
  }

  /// A message to this rank: `start(tag)` sends it, then a blocking recv into `in` takes it.
  /// When the receive fails before it took the message (MPI_Iprobe still finds it), one made
  /// unarmed takes it, so that the send completes; when the send fails, one made unarmed takes
  /// what it left: the notice a send sends in its message's place when it fails before posting
  /// (the receive this rank would have posted fails on it), or the rest of a message.
  template <class Start>
  void message(const char* name, int tag, Buffer& in, Start start) {
    add(name, [this, tag, &in, start] {
      std::optional<clbuf::mpi::Request> started;
      try {
        started.emplace(start(tag));
      } catch (...) {
        heap_fault::armed = false;
        take_left_message(tag, in->size());
        throw;
      }
      clbuf::mpi::Request sent = std::move(*started);
      try {
        comm->recv(*in, 0, tag);
      } catch (...) {
        heap_fault::armed = false;
        take_left_message(tag, in->size());
        throw;
      }
      sent.wait();
      if (persistent) persistent->wait();
    });
  }

  /// A sendrecv with this rank: its receive is posted first, so a send that fails before it
  /// posts leaves its notice to that receive; what a failed call left, one made unarmed takes.
  void exchange(const char* name, int tag, Buffer& out, Buffer& in) {
    add(name, [this, tag, &out, &in] {
      try {
        comm->sendrecv(*out, 0, *in, 0, tag);
      } catch (...) {
        heap_fault::armed = false;
        take_left_message(tag, in->size());
        throw;
      }
    });
  }

  /// Takes a message with `tag` that is still waiting, if any; true when there was one.
  bool take_left_message(int tag, std::size_t n) {
    int pending = 0;
    MPI_Iprobe(0, tag, comm->native(), &pending, MPI_STATUS_IGNORE);
    if (pending == 0) return false;
    clbuf::DeviceBuffer<std::uint32_t> sink = m->allocate<std::uint32_t>(n);
    try {
      comm->recv(sink, 0, tag);
    } catch (const clbuf::Error&) {  // NOLINT(bugprone-empty-catch): a sender that failed
    }                                // part-way says so; the message is taken either way
    return true;
  }

  void prepare() {
    m.emplace("", options);
    out_small.emplace(m->upload(a));
    in_small.emplace(m->allocate<std::uint32_t>(small));
    out_big.emplace(m->upload(big));
    in_big.emplace(m->allocate<std::uint32_t>(large));
    in_big2.emplace(m->allocate<std::uint32_t>(large));
    reduce_small.emplace(m->upload(a));
    reduce_big.emplace(m->upload(big));
    scattered.emplace(m->allocate<std::uint32_t>(large));
    gathered.emplace(m->allocate<std::uint32_t>(large));
    field.emplace(m->upload(field_before));
  }

  /// The workload, armed.
  void run() {
    heap_fault::armed = true;
    for (done = 0; done < steps.size(); ++done) steps[done]();
    heap_fault::armed = false;
  }

  /// Unarmed, after the run: what each completed step received is exact, the buffers no step
  /// writes are unchanged, and the Communicator still moves a message. Returns the first
  /// difference, or "".
  std::string check() {
    const auto holds = [&](const Buffer& buffer, const Data& expected) {
      return m->download(*buffer) == expected;
    };
    if (!holds(out_small, a) || !holds(out_big, big)) return "a buffer that was sent changed";
    if (completed("isend, recv: small") && !holds(in_small, a)) return "the small message differs";
    if (completed("sendrecv: large") && !holds(in_big, big)) return "sendrecv's message differs";
    if (completed("broadcast") && !holds(in_big, big)) return "the large message differs";
    if (completed("send_init, recv: large") && !holds(in_big2, big)) {
      return "the persistent send's message differs";
    }
    if (completed("iallreduce") && !holds(reduce_small, a)) return "the small allreduce differs";
    if (completed("allreduce: large (on the device)") && !holds(reduce_big, big)) {
      return "the large allreduce differs";
    }
    if (completed("scatter") && !holds(scattered, big)) return "scatter differs";
    if (completed("gather") && !holds(gathered, big)) return "gather differs";
    if (completed("HaloExchange::finish") && !holds(field, field_after)) {
      return "the halo exchange left other ghost cells";
    }
    if (!completed("HaloExchange::start") && !holds(field, field_before)) {
      return "the field changed before its exchange, or in a start() that failed";
    }
    if (comm) {  // no message was left behind (a notice or header nothing took)
      int left = 0;
      MPI_Status status;
      MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm->native(), &left, &status);
      if (left != 0) return "a message was left behind, tag " + std::to_string(status.MPI_TAG);
    }
    if (halo) {  // the exchange works again, exact
      halo->start(*field);
      halo->finish();
      if (!holds(field, field_after)) return "the next halo exchange differs";
    }
    if (comm) {  // the Communicator still works: a large message to this rank, exact
      clbuf::DeviceBuffer<std::uint32_t> again = m->allocate<std::uint32_t>(large);
      clbuf::mpi::Request sent = comm->isend(*out_big, 0, 99);
      comm->recv(again, 0, 99);
      sent.wait();
      if (m->download(again) != big) return "a message after the failure differs";
    }
    return "";
  }

  ~Trial() {
    heap_fault::armed = false;
    halo.reset();
    persistent.reset();
    comm.reset();
  }
};

/// Aborts the process, naming the trial, when one takes more than `limit`: a failure that left
/// a message waiting would otherwise hang the test until CTest's time-out, unnamed.
class Watchdog {
 public:
  explicit Watchdog(std::chrono::seconds limit)
      : thread_([this, limit] {
          std::unique_lock<std::mutex> lock(mutex_);
          while (!stop_) {
            const long seen = trial_;
            if (!wake_.wait_for(lock, limit, [&] { return stop_ || trial_ != seen; })) {
              std::cerr << "allocation #" << seen << " (" << where_
                        << "): the trial hangs; aborting" << std::endl;
              std::abort();
            }
          }
        }) {}
  ~Watchdog() {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_one();
    thread_.join();
  }
  void trial(long n, std::string where) {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      trial_ = n;
      where_ = std::move(where);
    }
    wake_.notify_one();
  }

 private:
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  long trial_ = -1;
  std::string where_;
  std::thread thread_;
};

class MpiHeap : public ::testing::TestWithParam<MemoryModel> {};

// Every allocation clbuf::mpi makes in the workload, failed one at a time.
TEST_P(MpiHeap, EveryAllocationFailingIsAnErrorOrAbsorbed) {
  const MemoryModel model = GetParam();
  const std::string name = clbuf::to_string(model);
  if (model == MemoryModel::host &&
      clbuf::BufferManager().device().type != clbuf::DeviceType::cpu) {
    GTEST_SKIP() << "MemoryModel::host needs a CPU device";
  }
  std::vector<std::string> problems;
  long total = 0;
  long errors = 0;
  long absorbed = 0;
  Watchdog watchdog(std::chrono::seconds(60));
  // Allocations may come in another order from run to run (the device's progress): sweep past
  // the count, and let the last trials find nothing to fail.
  for (long n = 0; n == 0 || n <= total + 10; ++n) {
    watchdog.trial(n, name);
    Trial t(model);
    t.prepare();
    heap_fault::reset(n);
    const std::string outcome = heap_fault::outcome_of([&] { t.run(); }, errors);
    if (n == 0) total = heap_fault::count.load();
    if (heap_fault::fired.load() != 0 && t.done == t.steps.size()) ++absorbed;
    const std::string where =
        name + " allocation #" + std::to_string(n) + " (in \"" + t.step_name() + "\")";
    if (!outcome.empty()) problems.push_back(where + ": " + outcome);
    try {
      const std::string wrong = t.check();
      if (!wrong.empty()) problems.push_back(where + ": " + wrong);
    } catch (const std::exception& error) {
      problems.push_back(where + ": the checks after it threw: " + error.what());
    }
    if (n == 0) {
      ASSERT_TRUE(problems.empty()) << problems.front();
    }
  }
  ASSERT_GT(total, 50) << "the workload allocates; the counter does not see it";
  std::ostringstream report;
  for (std::size_t i = 0; i < problems.size() && i < 40; ++i) report << "\n  " << problems[i];
  EXPECT_TRUE(problems.empty()) << problems.size() << " problems:" << report.str();
  std::cout << "[ heap     ] " << name << ": " << total << " allocations, " << errors << " errors, "
            << absorbed << " absorbed\n";
}

CLBUF_INSTANTIATE_MODELS(MpiHeap);

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  ::testing::InitGoogleTest(&argc, argv);
  halo_grid::share_seed();
  const int failed = RUN_ALL_TESTS();
  MPI_Finalize();
  return failed;
}
