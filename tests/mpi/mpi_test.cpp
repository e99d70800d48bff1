// SPDX-License-Identifier: MIT
// clbuf::mpi under mpiexec on 2, 3 and 4 ranks (tests/mpi/CMakeLists.txt: every parameter on 2
// ranks, the mixed ones on 3, 4 and over TCP). Every case runs on every rank; each rank's memory
// model comes from the parameter (even ranks one model, odd ranks another), so every path meets
// every other path on the wire: host (zero copy), unified (map around MPI) and discrete (pinned
// chunks; forced on PoCL). Data is seeded per sender and
// message, so a receiver knows what it must get without being told; bytes compare exactly.
#include <gtest/gtest.h>
#include <mpi.h>
#include <clbuf/mpi.hpp>

#include "case_watchdog.hpp"
#include "halo_grid.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <future>
#include <memory>
#include <new>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "../support/heap_hook.hpp"
#include "../support/path_count.hpp"

/// Every allocation of the process through operator new (the C++ heap: clbuf's, the tests',
/// PoCL's compiler; MPI and the ICD loader allocate with malloc), so that a test can count what a
/// stretch of calls allocates.
std::atomic<long long> g_news{0};

void* clbuf_test_heap_new(std::size_t size) noexcept {
  g_news.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(size == 0 ? 1 : size);
}

namespace {

using halo_grid::Cart;
using halo_grid::g_seed;
using halo_grid::halo_reference;
using halo_grid::kSentinel;
/// What constructing a Communicator before MPI_Init threw (main() tries it before MPI_Init).
std::string g_before_init = "main() did not try";

struct Models {
  clbuf::MemoryModel even;
  clbuf::MemoryModel odd;
  const char* name;
};

struct Pair {  // a trivially copyable type MPI and OpenCL C have no name for
  std::int32_t a;
  float b;
  std::uint16_t c;
};

/// `count` elements of random bytes, the same on every rank for the same (sender, key).
template <class T>
std::vector<T> pattern(int sender, std::uint32_t key, std::size_t count) {
  std::seed_seq seq{g_seed, static_cast<std::uint32_t>(sender), key};
  std::mt19937 rng(seq);
  std::vector<T> data(count);
  auto* bytes = reinterpret_cast<unsigned char*>(data.data());
  const std::size_t total = count * sizeof(T);
  std::size_t i = 0;
  for (; i + 4 <= total; i += 4) {
    const std::uint32_t word = static_cast<std::uint32_t>(rng());
    std::memcpy(bytes + i, &word, 4);
  }
  for (; i < total; ++i) bytes[i] = static_cast<unsigned char>(rng());
  return data;
}

template <class T>
::testing::AssertionResult same(const std::vector<T>& expected, const std::vector<T>& actual) {
  if (expected.size() != actual.size()) {
    return ::testing::AssertionFailure() << "sizes " << expected.size() << " and " << actual.size();
  }
  const std::size_t bytes = expected.size() * sizeof(T);
  if (bytes == 0 || std::memcmp(expected.data(), actual.data(), bytes) == 0) {
    return ::testing::AssertionSuccess();
  }
  const auto* a = reinterpret_cast<const unsigned char*>(expected.data());
  const auto* b = reinterpret_cast<const unsigned char*>(actual.data());
  std::size_t first = 0;
  while (a[first] == b[first]) ++first;
  return ::testing::AssertionFailure()
         << "bytes differ from byte " << first << " of " << bytes << " (seed " << g_seed << ")";
}

/// Runs `body`, which must throw clbuf::Error with `code` and every fragment in its message.
template <class F>
::testing::AssertionResult throws(F&& body, cl_int code, std::vector<std::string> fragments) {
  try {
    body();
  } catch (const clbuf::Error& e) {
    if (e.code() != code) {
      return ::testing::AssertionFailure()
             << "code " << e.code() << ", not " << code << ": " << e.what();
    }
    for (const std::string& fragment : fragments) {
      if (std::string(e.what()).find(fragment) == std::string::npos) {
        return ::testing::AssertionFailure() << "no \"" << fragment << "\" in: " << e.what();
      }
    }
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "no clbuf::Error thrown";
}

class Mpi : public ::testing::TestWithParam<Models> {
 protected:
  // The device: CLBUF_DEVICE, else the default (GPU first). A GPU cannot take MemoryModel::host:
  // those cases skip, on every rank alike.
  void SetUp() override {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    int unusable = 0;
    try {
      manager_ = make_manager();
    } catch (const clbuf::Error& e) {
      if (std::string(e.what()).find("needs a CPU device") == std::string::npos) throw;
      unusable = 1;
    }
    MPI_Allreduce(MPI_IN_PLACE, &unusable, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (unusable) GTEST_SKIP() << "MemoryModel::host needs a CPU device";
  }

  std::unique_ptr<clbuf::BufferManager> make_manager() const {
    clbuf::Options options;
    options.memory = rank_ % 2 == 0 ? GetParam().even : GetParam().odd;
    return std::make_unique<clbuf::BufferManager>("", options);
  }

  /// Small chunks by default: many chunks per message, cheaply.
  clbuf::mpi::Communicator communicator(std::size_t chunk = 64 << 10, std::size_t depth = 2) {
    clbuf::mpi::Options options;
    options.chunk_bytes = chunk;
    options.depth = depth;
    options.device_reduce_bytes = 4096;
    return clbuf::mpi::Communicator(*manager_, MPI_COMM_WORLD, options);
  }

  template <class T>
  clbuf::DeviceBuffer<T> upload(const std::vector<T>& data) {
    if (data.empty()) return manager_->allocate<T>(0);
    return manager_->upload(data);
  }

  /// Every rank sends `count` elements to the next and receives from the previous.
  template <class T>
  void ring(clbuf::mpi::Communicator& comm, std::size_t count, std::uint32_t key) {
    const int right = (rank_ + 1) % size_;
    const int left = (rank_ + size_ - 1) % size_;
    clbuf::DeviceBuffer<T> out = upload(pattern<T>(rank_, key, count));
    clbuf::DeviceBuffer<T> in = manager_->allocate<T>(count);
    comm.sendrecv(out, right, in, left, static_cast<int>(key % 1000));
    EXPECT_TRUE(same(pattern<T>(left, key, count), manager_->download(in)))
        << count << " elements of " << sizeof(T) << " bytes from rank " << left;
  }

  int rank_ = 0;
  int size_ = 1;
  std::unique_ptr<clbuf::BufferManager> manager_;
};

TEST_P(Mpi, RankAndSize) {
  clbuf::mpi::Communicator comm = communicator();
  EXPECT_EQ(comm.rank(), rank_);
  EXPECT_EQ(comm.size(), size_);
  EXPECT_NE(comm.native(), MPI_COMM_WORLD);
}

TEST_P(Mpi, EveryElementTypeArrivesExactly) {
  clbuf::mpi::Communicator comm = communicator(16 << 10);
  std::uint32_t key = 1;
  for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1000},
                            std::size_t{5000}, std::size_t{20011}}) {
    ring<std::int8_t>(comm, count, key++);
    ring<std::uint8_t>(comm, count, key++);
    ring<std::int16_t>(comm, count, key++);
    ring<std::uint16_t>(comm, count, key++);
    ring<std::int32_t>(comm, count, key++);
    ring<std::uint32_t>(comm, count, key++);
    ring<std::int64_t>(comm, count, key++);
    ring<std::uint64_t>(comm, count, key++);
    ring<float>(comm, count, key++);
    ring<double>(comm, count, key++);
    ring<Pair>(comm, count, key++);
  }
}

// 0 B to 64 MiB with the default 4 MiB chunks: the envelope edge, one chunk +- 1 byte, sizes that
// are no multiple of a chunk, and many chunks.
TEST_P(Mpi, SizesFromZeroTo64MiB) {
  clbuf::mpi::Communicator comm = communicator(std::size_t{4} << 20);
  const std::size_t mib = std::size_t{1} << 20;
  const std::size_t envelope = 3968;  // the inline limit
  std::uint32_t key = 100;
  for (std::size_t bytes :
       {std::size_t{0}, std::size_t{1}, std::size_t{4}, envelope - 1, envelope, envelope + 1,
        std::size_t{65536}, mib + 3, 4 * mib - 1, 4 * mib, 4 * mib + 1, 8 * mib + 4097, 64 * mib}) {
    // 64 MiB (16 chunks, eight times the pipeline's depth) on 2 ranks staged at both ends only
    // (time); 8 MiB + 4097 B (three chunks, more than the depth) on every pair of paths.
    const bool staged = std::string(GetParam().name) == "Staged";
    if (bytes >= 64 * mib && (size_ > 2 || !staged)) continue;
    if (bytes >= 8 * mib && size_ > 2) continue;
    ring<unsigned char>(comm, bytes, key++);
  }
}

TEST_P(Mpi, SendAndRecvBetweenEveryPair) {
  clbuf::mpi::Communicator comm = communicator(8 << 10);
  const std::size_t count = 3 * 1024 + 5;  // two chunks of 8 KiB, the last short
  for (int from = 0; from < size_; ++from) {
    for (int to = 0; to < size_; ++to) {
      if (from == to) continue;
      const std::uint32_t key = static_cast<std::uint32_t>(200 + from * 10 + to);
      if (rank_ == from) comm.send(upload(pattern<float>(from, key, count)), to, 7);
      if (rank_ == to) {
        clbuf::DeviceBuffer<float> in = manager_->allocate<float>(count);
        comm.recv(in, from, 7);
        EXPECT_TRUE(same(pattern<float>(from, key, count), manager_->download(in)));
      }
    }
  }
}

// Many messages in flight at once, same tag (MPI order) and different tags, waited for in
// reverse: every transfer progresses while any is waited for.
TEST_P(Mpi, ManyMessagesInFlight) {
  clbuf::mpi::Communicator comm = communicator(16 << 10);
  const int right = (rank_ + 1) % size_;
  const int left = (rank_ + size_ - 1) % size_;
  const int messages = 40;
  std::vector<clbuf::DeviceBuffer<std::int32_t>> out, in;
  std::vector<clbuf::mpi::Request> requests;
  const auto count_of = [](int i) { return static_cast<std::size_t>((i * 2749) % 20000 + i); };
  for (int i = 0; i < messages; ++i) {
    in.push_back(manager_->allocate<std::int32_t>(count_of(i)));
    requests.push_back(comm.irecv(in.back(), left, i % 3));
  }
  for (int i = 0; i < messages; ++i) {
    out.push_back(
        upload(pattern<std::int32_t>(rank_, 300 + static_cast<std::uint32_t>(i), count_of(i))));
    requests.push_back(comm.isend(out.back(), right, i % 3));
  }
  for (std::size_t i = requests.size(); i-- > 0;) requests[i].wait();
  // 80 messages in flight, pinned chunks on a budget: 2 x depth a direction, and one chunk for a
  // send that found the sends stalled for 20 ms (a loaded host may stall them; never more).
  EXPECT_LE(comm.peak_pinned_bytes(), std::size_t{2 * 2 * 2 + messages} * (16 << 10));
  for (int i = 0; i < messages; ++i) {
    EXPECT_TRUE(same(pattern<std::int32_t>(left, 300 + static_cast<std::uint32_t>(i), count_of(i)),
                     manager_->download(in[static_cast<std::size_t>(i)])))
        << "message " << i;
  }
}

// Three Communicators on one manager whose pinned budget holds five of their chunks, 60 messages
// in flight across them: the manager's pool never holds more than its budget (a chunk it cannot
// hold is host memory of clbuf's instead), no transfer waits for the budget, every byte arrives.
// A wait moves only its own Communicator's transfers (docs/mpi.md), so each Communicator's
// requests are waited for together, one Communicator after the other.
TEST_P(Mpi, SeveralCommunicatorsStayWithinTheManagersPinnedBudget) {
  const std::size_t chunk = 16 << 10;
  const std::size_t budget = 5 * chunk;
  clbuf::Options options;
  options.memory = rank_ % 2 == 0 ? GetParam().even : GetParam().odd;
  options.pinned_budget_bytes = budget;
  clbuf::BufferManager manager("", options);
  clbuf::mpi::Options mpi_options;
  mpi_options.chunk_bytes = chunk;
  mpi_options.path = clbuf::mpi::Path::staged;  // every message through chunks, whatever the model
  std::vector<clbuf::mpi::Communicator> comms;
  for (int c = 0; c < 3; ++c) comms.emplace_back(manager, MPI_COMM_WORLD, mpi_options);
  const int right = (rank_ + 1) % size_;
  const int left = (rank_ + size_ - 1) % size_;
  const int messages = 60;
  const auto count_of = [](int i) { return static_cast<std::size_t>((i * 3571) % 30000 + 5000); };
  std::vector<clbuf::DeviceBuffer<std::int32_t>> out, in;
  std::vector<std::vector<clbuf::mpi::Request>> requests(3);
  for (int i = 0; i < messages; ++i) {
    in.push_back(manager.allocate<std::int32_t>(count_of(i)));
    requests[static_cast<std::size_t>(i % 3)].push_back(
        comms[static_cast<std::size_t>(i % 3)].irecv(in.back(), left, i % 2));
  }
  for (int i = 0; i < messages; ++i) {
    const std::uint32_t key = 900 + static_cast<std::uint32_t>(i);
    out.push_back(manager.upload(pattern<std::int32_t>(rank_, key, count_of(i))));
    requests[static_cast<std::size_t>(i % 3)].push_back(
        comms[static_cast<std::size_t>(i % 3)].isend(out.back(), right, i % 2));
  }
  for (std::vector<clbuf::mpi::Request>& mine : requests) {
    for (std::size_t i = mine.size(); i-- > 0;) mine[i].wait();
  }
  for (int i = 0; i < messages; ++i) {
    const std::uint32_t key = 900 + static_cast<std::uint32_t>(i);
    EXPECT_TRUE(same(pattern<std::int32_t>(left, key, count_of(i)),
                     manager.download(in[static_cast<std::size_t>(i)])))
        << "message " << i;
  }
  const clbuf::PinnedStats pinned = manager.stats().pinned;
  EXPECT_LE(pinned.peak_bytes, budget);
  EXPECT_GT(pinned.allocations, 0u);
  for (const clbuf::mpi::Communicator& comm : comms) EXPECT_GT(comm.peak_pinned_bytes(), 0u);
}

TEST_P(Mpi, TestPollsToCompletion) {
  clbuf::mpi::Communicator comm = communicator(16 << 10);
  const int right = (rank_ + 1) % size_;
  const int left = (rank_ + size_ - 1) % size_;
  const std::size_t count = 50000;
  clbuf::DeviceBuffer<double> in = manager_->allocate<double>(count);
  clbuf::mpi::Request received = comm.irecv(in, left, 3);
  clbuf::DeviceBuffer<double> out = upload(pattern<double>(rank_, 400, count));
  clbuf::mpi::Request sent = comm.isend(out, right, 3);
  for (bool done = false; !done;) {
    const bool got = received.test();  // both polled every time
    const bool went = sent.test();
    done = got && went;
  }
  EXPECT_TRUE(same(pattern<double>(left, 400, count), manager_->download(in)));
  EXPECT_TRUE(received.test());  // an empty Request is complete
}

// A fixed exchange set up once (send_init / recv_init) and started 1,000 times in a ring, with
// new contents each time; a chunked pair beside it, and a persistent send matched by irecv.
TEST_P(Mpi, PersistentRequestsReusedAThousandTimes) {
  clbuf::mpi::Communicator comm = communicator(16 << 10);
  const int right = (rank_ + 1) % size_;
  const int left = (rank_ + size_ - 1) % size_;
  const std::size_t count = 16;
  clbuf::DeviceBuffer<std::int32_t> out = manager_->allocate<std::int32_t>(count);
  clbuf::DeviceBuffer<std::int32_t> in = manager_->allocate<std::int32_t>(count);
  clbuf::mpi::Persistent send = comm.send_init(out, right, 5);
  clbuf::mpi::Persistent recv = comm.recv_init(in, left, 5);
  EXPECT_FALSE(send.active());
  int wrong = 0;
  for (int i = 0; i < 1000; ++i) {
    const std::vector<std::int32_t> mine =
        pattern<std::int32_t>(rank_, 1000u + static_cast<std::uint32_t>(i), count);
    manager_->upload(out, mine);
    recv.start();
    send.start();
    EXPECT_TRUE(send.active());
    recv.wait();
    send.wait();
    EXPECT_FALSE(recv.active());
    if (!same(pattern<std::int32_t>(left, 1000u + static_cast<std::uint32_t>(i), count),
              manager_->download(in))) {
      ++wrong;
    }
  }
  EXPECT_EQ(wrong, 0) << "of 1000 exchanges";

  // Many chunks a message, polled with test(), 20 times.
  const std::size_t large = 70000;
  clbuf::DeviceBuffer<double> big_out = manager_->allocate<double>(large);
  clbuf::DeviceBuffer<double> big_in = manager_->allocate<double>(large);
  clbuf::mpi::Persistent big_send = comm.send_init(big_out, right, 6);
  clbuf::mpi::Persistent big_recv = comm.recv_init(big_in, left, 6);
  for (std::uint32_t i = 0; i < 20; ++i) {
    manager_->upload(big_out, pattern<double>(rank_, 3000 + i, large));
    big_recv.start();
    big_send.start();
    for (bool done = false; !done;) {
      const bool got = big_recv.test();  // both polled every time
      const bool went = big_send.test();
      done = got && went;
    }
    EXPECT_TRUE(same(pattern<double>(left, 3000 + i, large), manager_->download(big_in))) << i;
  }

  // A persistent send is an ordinary message to the receiver.
  clbuf::mpi::Request plain = comm.irecv(in, left, 8);
  manager_->upload(out, pattern<std::int32_t>(rank_, 4000, count));
  clbuf::mpi::Persistent once = comm.send_init(out, right, 8);
  once.start();
  once.wait();
  plain.wait();
  EXPECT_TRUE(same(pattern<std::int32_t>(left, 4000, count), manager_->download(in)));
}

TEST_P(Mpi, PersistentRequestMisuseIsAnError) {
  clbuf::mpi::Communicator comm = communicator();
  clbuf::DeviceBuffer<float> buffer = manager_->allocate<float>(10);
  clbuf::mpi::Persistent idle = comm.send_init(buffer, MPI_PROC_NULL);
  idle.wait();  // never started: returns at once
  EXPECT_TRUE(idle.test());
  idle.start();
  EXPECT_TRUE(throws([&] { idle.start(); }, CL_INVALID_OPERATION,
                     {"send_init: ", "started again before the last transfer completed"}));
  idle.wait();
  idle.start();  // again, after wait()
  idle.wait();
  clbuf::mpi::Persistent moved = std::move(idle);
  EXPECT_TRUE(throws([&] { idle.start(); },
                     CL_INVALID_OPERATION,  // NOLINT(bugprone-use-after-move)
                     {"Persistent::start: ", "an empty Persistent"}));
  EXPECT_TRUE(throws([] { clbuf::mpi::Persistent().start(); }, CL_INVALID_OPERATION,
                     {"an empty Persistent"}));
  EXPECT_TRUE(
      throws([&] { (void)comm.send_init(buffer, size_); }, CL_INVALID_VALUE, {"send_init: "}));
  EXPECT_TRUE(
      throws([&] { (void)comm.recv_init(buffer, 0, -2); }, CL_INVALID_VALUE, {"recv_init: "}));
  clbuf::DeviceBuffer<float> gone;
  EXPECT_TRUE(
      throws([&] { (void)comm.recv_init(gone, 0); }, CL_INVALID_MEM_OBJECT, {"recv_init: "}));
}

TEST_P(Mpi, AnySourceAndAnyTag) {
  clbuf::mpi::Communicator comm = communicator(8 << 10);
  const std::size_t count = 4000;
  if (rank_ == 0) {
    std::vector<int> seen(static_cast<std::size_t>(size_), 0);
    for (int i = 1; i < size_; ++i) {
      clbuf::DeviceBuffer<std::uint16_t> in = manager_->allocate<std::uint16_t>(count);
      clbuf::mpi::Request request = comm.irecv(in, MPI_ANY_SOURCE, MPI_ANY_TAG);
      request.wait();
      const std::vector<std::uint16_t> got = manager_->download(in);
      int from = -1;
      for (int r = 1; r < size_; ++r) {
        if (got == pattern<std::uint16_t>(r, 500, count)) from = r;
      }
      ASSERT_GT(from, 0) << "the data of no sender";
      ++seen[static_cast<std::size_t>(from)];
    }
    for (int r = 1; r < size_; ++r) EXPECT_EQ(seen[static_cast<std::size_t>(r)], 1);
  } else {
    comm.send(upload(pattern<std::uint16_t>(rank_, 500, count)), 0, 40 + rank_);
  }
}

/// Every rank sends a view of `count` elements at element `offset` of its buffer to the next and
/// receives into a view at the same offset of another: the bytes around the views stay as they
/// were on both sides.
template <class T>
void views_ring(clbuf::BufferManager& manager, clbuf::mpi::Communicator& comm, int rank, int size,
                std::size_t offset, std::size_t count, std::uint32_t key) {
  SCOPED_TRACE("views of " + std::to_string(count) + " elements of " + std::to_string(sizeof(T)) +
               " bytes at element " + std::to_string(offset));
  const int right = (rank + 1) % size;
  const int left = (rank + size - 1) % size;
  clbuf::DeviceBuffer<T> whole_out = manager.upload(pattern<T>(rank, key, offset + count + 3));
  clbuf::DeviceBuffer<T> out = manager.view(whole_out, offset, count);
  const std::vector<T> before = pattern<T>(rank, key + 1, offset + count + 3);
  clbuf::DeviceBuffer<T> whole_in = manager.upload(before);
  clbuf::DeviceBuffer<T> in = manager.view(whole_in, offset, count);
  comm.sendrecv(out, right, in, left, static_cast<int>(key % 1000));
  std::vector<T> expected = before;
  const std::vector<T> sent = pattern<T>(left, key, offset + count + 3);
  std::copy(sent.begin() + static_cast<std::ptrdiff_t>(offset),
            sent.begin() + static_cast<std::ptrdiff_t>(offset + count),
            expected.begin() + static_cast<std::ptrdiff_t>(offset));
  EXPECT_TRUE(same(expected, manager.download(whole_in)));
  EXPECT_TRUE(same(pattern<T>(rank, key, offset + count + 3), manager.download(whole_out)));
}

// Views at any element offset (1 and 3: no sub-buffer could start there; 32 floats: 128 bytes,
// a sub-buffer on PoCL and misaligned on NVIDIA; 1000), of float, double and char, small
// (inline) and large (chunked).
TEST_P(Mpi, ViewsAtAnyElementOffset) {
  clbuf::mpi::Communicator comm = communicator(8 << 10);
  std::uint32_t key = 600;
  for (std::size_t offset : {std::size_t{1}, std::size_t{3}, std::size_t{32}, std::size_t{1000}}) {
    for (std::size_t count : {std::size_t{5}, std::size_t{40000}}) {
      views_ring<float>(*manager_, comm, rank_, size_, offset, count, key += 2);
      views_ring<double>(*manager_, comm, rank_, size_, offset, count, key += 2);
      views_ring<char>(*manager_, comm, rank_, size_, offset, count, key += 2);
    }
  }
}

// Collectives on views at odd offsets: the device reduction's kernel addresses the root buffer at
// the view's offset, broadcast and allreduce leave the bytes around the view alone.
TEST_P(Mpi, CollectivesOnViewsAtOddOffsets) {
  clbuf::mpi::Communicator comm = communicator(16 << 10);
  for (std::size_t count : {std::size_t{7}, std::size_t{30001}}) {
    const std::size_t offset = 3;
    std::vector<std::int32_t> mine(offset + count + 2);
    for (std::size_t i = 0; i < mine.size(); ++i) {
      mine[i] = static_cast<std::int32_t>(i % 1000) * (rank_ + 1);
    }
    clbuf::DeviceBuffer<std::int32_t> whole = manager_->upload(mine);
    clbuf::DeviceBuffer<std::int32_t> part = manager_->view(whole, offset, count);
    comm.allreduce(part);
    std::vector<std::int32_t> expected = mine;
    const std::int32_t ranks = size_ * (size_ + 1) / 2;  // the sum of rank + 1 over every rank
    for (std::size_t i = offset; i < offset + count; ++i) {
      expected[i] = static_cast<std::int32_t>(i % 1000) * ranks;
    }
    EXPECT_TRUE(same(expected, manager_->download(whole))) << "allreduce of " << count;
    clbuf::DeviceBuffer<std::int32_t> other = manager_->view(whole, 1, count);
    comm.broadcast(other, 0);
    if (rank_ != 0) {
      std::vector<std::int32_t> from_root = mine;  // rank 0's values, then its allreduce
      for (std::size_t i = 0; i < from_root.size(); ++i) {
        from_root[i] = static_cast<std::int32_t>(i % 1000);
      }
      for (std::size_t i = offset; i < offset + count; ++i) from_root[i] = expected[i];
      std::copy(from_root.begin() + 1, from_root.begin() + 1 + static_cast<std::ptrdiff_t>(count),
                expected.begin() + 1);
    }
    EXPECT_TRUE(same(expected, manager_->download(whole))) << "broadcast of " << count;
  }
}

// MPI reaches device memory through the host: clbuf checks an adopted buffer's host-access flags
// before any message moves (with MPI_PROC_NULL no peer waits for the failed call).
TEST_P(Mpi, HostAccessFlagsAreChecked) {
  clbuf::mpi::Communicator comm = communicator();
  cl::Buffer write_only(manager_->context(), CL_MEM_READ_WRITE | CL_MEM_HOST_WRITE_ONLY, 64);
  cl::Buffer read_only(manager_->context(), CL_MEM_READ_WRITE | CL_MEM_HOST_READ_ONLY, 64);
  clbuf::DeviceBuffer<float> unreadable = manager_->adopt<float>(write_only, 16);
  clbuf::DeviceBuffer<float> unwritable = manager_->adopt<float>(read_only, 16);
  const auto expect_refused = [](const std::function<void()>& call, const char* fragment) {
    try {
      call();
      ADD_FAILURE() << "no error; expected " << fragment;
    } catch (const clbuf::Error& e) {
      EXPECT_EQ(e.code(), CL_INVALID_OPERATION) << e.what();
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  expect_refused([&] { comm.send(unreadable, MPI_PROC_NULL); }, "the host may not read it");
  expect_refused([&] { comm.isend(unreadable, MPI_PROC_NULL).wait(); }, "may not read");
  expect_refused([&] { comm.recv(unwritable, MPI_PROC_NULL); }, "the host may not write it");
  expect_refused([&] { comm.irecv(unwritable, MPI_PROC_NULL).wait(); }, "may not write");
  comm.send(unwritable, MPI_PROC_NULL);  // allowed: the host only reads it
  comm.recv(unreadable, MPI_PROC_NULL);  // allowed: the host only writes it
}

// Options::path forces a route whatever the memory model: zero copy (mapped where a buffer has no
// host block), mapped, or staged through pinned chunks. Each meets the peer's route on the wire
// and moves the same bytes, inline and in chunks.
TEST_P(Mpi, EveryForcedPathCarriesTheSameBytes) {
  std::uint32_t key = 1500;
  for (clbuf::mpi::Path path :
       {clbuf::mpi::Path::zero_copy, clbuf::mpi::Path::map, clbuf::mpi::Path::staged}) {
    clbuf::mpi::Options options;
    options.chunk_bytes = 16 << 10;
    options.path = path;
    clbuf::mpi::Communicator comm(*manager_, MPI_COMM_WORLD, options);
    SCOPED_TRACE("path " + std::to_string(static_cast<int>(path)));
    ring<std::int32_t>(comm, 100, key++);
    ring<std::int32_t>(comm, 20011, key++);
    if (path == clbuf::mpi::Path::staged) {
      EXPECT_GT(comm.peak_pinned_bytes(), 0u);
    } else {
      EXPECT_EQ(comm.pinned_bytes(), 0u);
    }
  }
}

/// The one path of MessagePaths that counted a message between `before` and `after`, by name;
/// else what they counted instead.
std::string message_path(const clbuf::mpi::MessagePaths& before,
                         const clbuf::mpi::MessagePaths& after) {
  return clbuf_test::one_path({{"inline_payload", after.inline_payload - before.inline_payload},
                               {"zero_copy", after.zero_copy - before.zero_copy},
                               {"map", after.map - before.map},
                               {"staged", after.staged - before.staged}});
}

// Which path each message takes (Communicator::stats()), one byte below, at and above the
// envelope's bound (3968 bytes): inline up to it, then by the memory model of the rank that moves
// the bytes (zero copy on a host block, mapped on unified memory, staged on a discrete device) or
// as Options::path forces; sent and received counted apart, on Requests, blocking calls and
// sendrecv alike, the bytes exact.
TEST_P(Mpi, EachMessageTakesItsPathAroundTheEnvelopeBound) {
  using clbuf::mpi::Path;
  const std::size_t bound = 3968;
  const clbuf::MemoryModel model = manager_->memory_model();
  const int right = (rank_ + 1) % size_;
  const int left = (rank_ + size_ - 1) % size_;
  std::uint32_t key = 1600;
  for (Path path : {Path::automatic, Path::zero_copy, Path::map, Path::staged}) {
    SCOPED_TRACE("path " + std::to_string(static_cast<int>(path)));
    clbuf::mpi::Options options;
    options.chunk_bytes = 16 << 10;
    options.path = path;
    clbuf::mpi::Communicator comm(*manager_, MPI_COMM_WORLD, options);
    const std::string chunked =
        path == Path::map || (path == Path::zero_copy && model != clbuf::MemoryModel::host) ? "map"
        : path == Path::staged                  ? "staged"
        : model == clbuf::MemoryModel::host     ? "zero_copy"
        : model == clbuf::MemoryModel::discrete ? "staged"
                                                : "map";
    for (std::size_t bytes : {bound - 1, bound, bound + 1}) {
      SCOPED_TRACE(std::to_string(bytes) + " bytes");
      const std::string expected = bytes <= bound ? "inline_payload" : chunked;
      const clbuf::DeviceBuffer<std::uint8_t> out =
          upload(pattern<std::uint8_t>(rank_, key, bytes));
      clbuf::DeviceBuffer<std::uint8_t> in = manager_->allocate<std::uint8_t>(bytes);
      clbuf::mpi::MessageStats before = comm.stats();
      clbuf::mpi::Request receive = comm.irecv(in, left, 3);
      comm.send(out, right, 3);
      receive.wait();
      clbuf::mpi::MessageStats after = comm.stats();
      EXPECT_EQ(message_path(before.sent, after.sent), expected) << "send";
      EXPECT_EQ(message_path(before.received, after.received), expected) << "irecv";
      EXPECT_TRUE(same(pattern<std::uint8_t>(left, key, bytes), manager_->download(in)));
      before = after;
      comm.sendrecv(out, right, in, left, 4);
      after = comm.stats();
      EXPECT_EQ(message_path(before.sent, after.sent), expected) << "sendrecv's send";
      EXPECT_EQ(message_path(before.received, after.received), expected) << "sendrecv's receive";
      EXPECT_TRUE(same(pattern<std::uint8_t>(left, key, bytes), manager_->download(in)));
      ++key;
    }
  }
}

TEST_P(Mpi, ProcNullMovesNothing) {
  clbuf::mpi::Communicator comm = communicator();
  std::vector<int> data = pattern<int>(rank_, 700, 100);
  clbuf::DeviceBuffer<int> buffer = upload(data);
  comm.send(buffer, MPI_PROC_NULL);
  comm.recv(buffer, MPI_PROC_NULL);
  EXPECT_TRUE(same(data, manager_->download(buffer)));
}

TEST_P(Mpi, BroadcastFromEveryRoot) {
  clbuf::mpi::Communicator comm = communicator(16 << 10);
  for (int root = 0; root < size_; ++root) {
    for (std::size_t count : {std::size_t{0}, std::size_t{3}, std::size_t{100003}}) {
      const std::uint32_t key =
          800 + static_cast<std::uint32_t>(root * 7) + static_cast<std::uint32_t>(count % 5);
      clbuf::DeviceBuffer<double> buffer = rank_ == root
                                               ? upload(pattern<double>(root, key, count))
                                               : upload(pattern<double>(rank_, key + 1, count));
      comm.broadcast(buffer, root);
      EXPECT_TRUE(same(pattern<double>(root, key, count), manager_->download(buffer)));
    }
  }
}

template <class T>
std::vector<T> small_values(int rank, std::uint32_t key, std::size_t count) {
  std::seed_seq seq{g_seed, static_cast<std::uint32_t>(rank), key};
  std::mt19937 rng(seq);
  std::vector<T> data(count);
  for (T& value : data)
    value = static_cast<T>(static_cast<int>(rng() % 100) - 30 * std::is_signed<T>::value);
  return data;
}

template <class T>
void check_allreduce(clbuf::BufferManager& manager, clbuf::mpi::Communicator& comm, int rank,
                     int size, std::size_t count, std::uint32_t key) {
  for (clbuf::mpi::Op op : {clbuf::mpi::Op::sum, clbuf::mpi::Op::min, clbuf::mpi::Op::max}) {
    std::vector<T> expected = small_values<T>(0, key, count);
    for (int r = 1; r < size; ++r) {
      const std::vector<T> theirs = small_values<T>(r, key, count);
      for (std::size_t i = 0; i < count; ++i) {
        expected[i] = op == clbuf::mpi::Op::sum   ? static_cast<T>(expected[i] + theirs[i])
                      : op == clbuf::mpi::Op::min ? std::min(expected[i], theirs[i])
                                                  : std::max(expected[i], theirs[i]);
      }
    }
    std::vector<T> mine = small_values<T>(rank, key, count);
    clbuf::DeviceBuffer<T> buffer = count == 0 ? manager.allocate<T>(0) : manager.upload(mine);
    comm.allreduce(buffer, op);
    EXPECT_TRUE(same(expected, manager.download(buffer)))
        << count << " elements, op " << static_cast<int>(op);
  }
}

// device_reduce_bytes is 4 KiB here: the small counts reduce on the host (MPI_Allreduce), the
// large ones on the device (ring + OpenCL kernel); counts not divisible by the ranks.
TEST_P(Mpi, AllreduceSumMinMax) {
  clbuf::mpi::Communicator comm = communicator(16 << 10);
  for (std::size_t count :
       {std::size_t{0}, std::size_t{1}, std::size_t{5}, std::size_t{1000}, std::size_t{70001}}) {
    check_allreduce<float>(*manager_, comm, rank_, size_, count, 900);
    check_allreduce<std::int32_t>(*manager_, comm, rank_, size_, count, 901);
  }
  // The other element types once, on 2 ranks (their kernels do not depend on the path, and how
  // the ring splits a count over more ranks is the same for every type: float and int32 above
  // check it on 3 and 4; builds take time).
  if (std::string(GetParam().name) != "ZeroCopyAndStaged" || size_ > 2) return;
  for (std::size_t count : {std::size_t{3}, std::size_t{9001}}) {
    check_allreduce<double>(*manager_, comm, rank_, size_, count, 902);
    check_allreduce<std::int8_t>(*manager_, comm, rank_, size_, count, 903);
    check_allreduce<std::uint16_t>(*manager_, comm, rank_, size_, count, 904);
    check_allreduce<std::uint64_t>(*manager_, comm, rank_, size_, count, 905);
    check_allreduce<std::int64_t>(*manager_, comm, rank_, size_, count, 906);
    check_allreduce<std::uint8_t>(*manager_, comm, rank_, size_, count, 907);
    check_allreduce<std::int16_t>(*manager_, comm, rank_, size_, count, 908);
    check_allreduce<std::uint32_t>(*manager_, comm, rank_, size_, count, 909);
  }
}

TEST_P(Mpi, ScatterAndGatherEveryRoot) {
  clbuf::mpi::Communicator comm = communicator(8 << 10);
  for (int root = 0; root < size_; ++root) {
    for (std::size_t n : {std::size_t{0}, std::size_t{2}, std::size_t{10007}}) {
      const std::uint32_t key =
          1000 + static_cast<std::uint32_t>(root) + static_cast<std::uint32_t>(n % 7);
      const std::size_t total = n * static_cast<std::size_t>(size_);
      clbuf::DeviceBuffer<std::int16_t> all = rank_ == root
                                                  ? upload(pattern<std::int16_t>(root, key, total))
                                                  : manager_->allocate<std::int16_t>(0);
      clbuf::DeviceBuffer<std::int16_t> mine = manager_->allocate<std::int16_t>(n);
      comm.scatter(all, mine, root);
      const std::vector<std::int16_t> source = pattern<std::int16_t>(root, key, total);
      const std::vector<std::int16_t> expected(
          source.begin() + static_cast<std::ptrdiff_t>(n * static_cast<std::size_t>(rank_)),
          source.begin() + static_cast<std::ptrdiff_t>(n * static_cast<std::size_t>(rank_ + 1)));
      EXPECT_TRUE(same(expected, manager_->download(mine))) << "scatter from " << root;

      clbuf::DeviceBuffer<std::int16_t> part = upload(pattern<std::int16_t>(rank_, key + 50, n));
      clbuf::DeviceBuffer<std::int16_t> gathered =
          manager_->allocate<std::int16_t>(rank_ == root ? total : 0);
      comm.gather(part, gathered, root);
      if (rank_ == root) {
        std::vector<std::int16_t> want;
        for (int r = 0; r < size_; ++r) {
          const std::vector<std::int16_t> theirs = pattern<std::int16_t>(r, key + 50, n);
          want.insert(want.end(), theirs.begin(), theirs.end());
        }
        EXPECT_TRUE(same(want, manager_->download(gathered))) << "gather to " << root;
      }
    }
  }
}

// The root's `mine` may be its own slot of `all` (in place, as MPI_IN_PLACE): exact, on every
// path, Path::whole (MPI_Scatter/MPI_Gather with MPI_IN_PLACE) included. A `mine` that shares
// only some bytes with `all` is CL_MEM_COPY_OVERLAP on every rank, before any data moves (the
// agreement; Path::whole has none).
TEST_P(Mpi, ScatterAndGatherInPlaceAtTheRootAndOverlapRejected) {
  for (const bool whole : {false, true}) {
    clbuf::mpi::Options options;
    options.chunk_bytes = 8 << 10;
    if (whole) options.path = clbuf::mpi::Path::whole;
    clbuf::mpi::Communicator comm(*manager_, MPI_COMM_WORLD, options);
    const int root = size_ - 1;
    const std::size_t n = 3001;
    const std::size_t total = n * static_cast<std::size_t>(size_);
    const std::vector<std::int32_t> source = pattern<std::int32_t>(root, 77, total);
    // scatter: the root's mine is its own slot of all.
    clbuf::DeviceBuffer<std::int32_t> all =
        upload(rank_ == root ? source : std::vector<std::int32_t>());
    clbuf::DeviceBuffer<std::int32_t> mine =
        rank_ == root ? manager_->view(all, static_cast<std::size_t>(root) * n, n)
                      : manager_->allocate<std::int32_t>(n);
    comm.scatter(all, mine, root);
    EXPECT_TRUE(same(
        std::vector<std::int32_t>(source.begin() + static_cast<std::ptrdiff_t>(n) * rank_,
                                  source.begin() + static_cast<std::ptrdiff_t>(n) * (rank_ + 1)),
        manager_->download(mine)))
        << "scatter in place, whole " << whole;
    // gather into the same: every rank's part lands, the root's in place.
    clbuf::DeviceBuffer<std::int32_t> part =
        rank_ == root ? manager_->view(all, static_cast<std::size_t>(root) * n, n)
                      : upload(pattern<std::int32_t>(rank_, 78, n));
    comm.gather(part, all, root);
    if (rank_ == root) {
      std::vector<std::int32_t> want;
      for (int r = 0; r < size_; ++r) {
        const std::vector<std::int32_t> theirs =
            r == root ? std::vector<std::int32_t>(source.end() - static_cast<std::ptrdiff_t>(n),
                                                  source.end())
                      : pattern<std::int32_t>(r, 78, n);
        want.insert(want.end(), theirs.begin(), theirs.end());
      }
      EXPECT_TRUE(same(want, manager_->download(all))) << "gather in place, whole " << whole;
    }
    // Overlap that is not the root's slot: an error on every rank, `all` unchanged (not under
    // Path::whole, whose collectives are MPI's own and agree on nothing first).
    if (whole) continue;
    const std::vector<std::int32_t> before =
        rank_ == root ? manager_->download(all) : std::vector<std::int32_t>();
    clbuf::DeviceBuffer<std::int32_t> skewed =
        rank_ == root ? manager_->view(all, 1, n) : upload(pattern<std::int32_t>(rank_, 79, n));
    try {
      comm.gather(skewed, all, root);
      ADD_FAILURE() << "an overlapping gather succeeded, whole " << whole;
    } catch (const clbuf::Error& e) {
      EXPECT_NE(std::string(e.what()).find("gather"), std::string::npos) << e.what();
      if (rank_ == root) {
        EXPECT_EQ(e.code(), CL_MEM_COPY_OVERLAP) << e.what();
      }
    }
    if (rank_ == root) {
      EXPECT_TRUE(same(before, manager_->download(all))) << "a failed gather wrote into all";
    }
  }
}

// A receive posted before a barrier or a blocking collective moves on while this rank waits
// there: the peer's blocking send of a chunked message (which needs that receive to take its
// chunks) completes, and the peer reaches the collective too. MPI's blocking MPI_Barrier or
// MPI_Allreduce in clbuf's place left both ranks waiting for ever.
TEST_P(Mpi, APostedReceiveMovesOnWhileThisRankWaitsInACollective) {
  clbuf::mpi::Communicator comm = communicator(64 << 10);
  const std::size_t n = 300000;          // chunked on every path
  for (const int collective : {0, 1}) {  // barrier(); allreduce()
    const std::vector<float> data =
        pattern<float>(0, 200 + static_cast<std::uint32_t>(collective), n);
    clbuf::DeviceBuffer<std::int32_t> one = upload(std::vector<std::int32_t>{1});
    const auto in_between = [&] {
      if (collective == 0) {
        comm.barrier();
      } else {
        comm.allreduce(one);
      }
    };
    if (rank_ == 0) {
      comm.send(upload(data), 1, 31);
      in_between();
    } else if (rank_ == 1) {
      clbuf::DeviceBuffer<float> in = manager_->allocate<float>(n);
      clbuf::mpi::Request received = comm.irecv(in, 0, 31);
      in_between();
      received.wait();
      EXPECT_TRUE(same(data, manager_->download(in))) << "collective " << collective;
    } else {
      in_between();
    }
  }
}

// Pinned staging memory stays at chunk x depth per message in flight.
TEST_P(Mpi, PinnedMemoryIsBounded) {
  const std::size_t chunk = 64 << 10;
  clbuf::mpi::Communicator comm = communicator(chunk, 2);
  ring<float>(comm, (8 << 20) / sizeof(float) + 3, 1100);
  EXPECT_LE(comm.peak_pinned_bytes(), 2 * 2 * chunk);  // one send and one receive
  if (manager_->memory_model() == clbuf::MemoryModel::discrete) {
    EXPECT_GT(comm.peak_pinned_bytes(), 0u);
  } else {
    EXPECT_EQ(comm.pinned_bytes(), 0u);  // zero copy and map need none
  }
}

// MPI lets a rank receive a peer's messages in any order. Staged sends hold their pinned chunks
// until the peer has received them, so sends beyond the budget (2 x depth chunks) once waited for
// the sends holding them, which waited for a peer receiving the later ones first: both ranks hung.
// Three sends received in reverse order, and two sends left in flight across a broadcast whose
// root is the sender, all complete (once the sends have stalled for 20 ms, a send holding no chunk
// takes one beyond the budget); pinned memory stays at the budget plus a chunk per such send.
TEST_P(Mpi, StagedSendsBeyondThePinnedBudgetCompleteInAnyReceiveOrder) {
  clbuf::mpi::Options options;
  options.chunk_bytes = 64 << 10;  // rendezvous in MPI: a chunk's send waits for its receive
  options.depth = 1;               // a budget of two chunks per direction
  options.path = clbuf::mpi::Path::staged;
  clbuf::mpi::Communicator comm(*manager_, MPI_COMM_WORLD, options);
  const std::size_t n = 4 * (64 << 10) / sizeof(float);  // four chunks a message
  // Rank 0: `count` messages (keys key.., tags tag..) as isends in flight at once, then waited.
  const auto send_all = [&](clbuf::mpi::Communicator& c, std::uint32_t key, int tag, int count) {
    std::vector<clbuf::DeviceBuffer<float>> out;
    std::vector<clbuf::mpi::Request> sent;
    for (int i = 0; i < count; ++i) {
      out.push_back(upload(pattern<float>(0, key + static_cast<std::uint32_t>(i), n)));
    }
    for (int i = 0; i < count; ++i) {
      sent.push_back(c.isend(out[static_cast<std::size_t>(i)], 1, tag + i));
    }
    for (clbuf::mpi::Request& request : sent) request.wait();
  };
  // Rank 1: the message of key `key` and tag `tag`, exact.
  const auto receive = [&](clbuf::mpi::Communicator& c, std::uint32_t key, int tag) {
    clbuf::DeviceBuffer<float> in = manager_->allocate<float>(n);
    c.recv(in, 0, tag);
    EXPECT_TRUE(same(pattern<float>(0, key, n), manager_->download(in))) << "tag " << tag;
  };
  if (rank_ == 0) send_all(comm, 1300, 40, 3);
  if (rank_ == 1) {
    for (int i = 3; i-- > 0;) receive(comm, 1300 + static_cast<std::uint32_t>(i), 40 + i);
  }
  EXPECT_LE(comm.peak_pinned_bytes(), 3 * options.chunk_bytes);
  // two sends in flight, then a broadcast from the same rank, which the peer receives first
  clbuf::DeviceBuffer<float> root_data = upload(pattern<float>(rank_, 1310, n));
  if (rank_ == 0) {
    clbuf::DeviceBuffer<float> a = upload(pattern<float>(0, 1311, n));
    clbuf::DeviceBuffer<float> b = upload(pattern<float>(0, 1312, n));
    clbuf::mpi::Request first = comm.isend(a, 1, 50);
    clbuf::mpi::Request second = comm.isend(b, 1, 51);
    comm.broadcast(root_data, 0);
    first.wait();
    second.wait();
  } else {
    comm.broadcast(root_data, 0);
    if (rank_ == 1) {
      for (int i = 0; i < 2; ++i) receive(comm, 1311 + static_cast<std::uint32_t>(i), 50 + i);
    }
  }
  EXPECT_TRUE(same(pattern<float>(0, 1310, n), manager_->download(root_data)));
  // A peer that posts its receives late, in the order sent, costs nothing beyond the budget:
  // only a send whose header the peer has matched (it waits for that one) goes beyond it.
  clbuf::mpi::Communicator late(*manager_, MPI_COMM_WORLD, options);
  if (rank_ == 0) {
    send_all(late, 1320, 60, 6);
    EXPECT_LE(late.peak_pinned_bytes(), 2 * options.chunk_bytes) << "the budget: 2 x depth";
  } else if (rank_ == 1) {
    std::this_thread::sleep_for(std::chrono::milliseconds(150));  // sends stalled for 150 ms
    for (int i = 0; i < 6; ++i) receive(late, 1320 + static_cast<std::uint32_t>(i), 60 + i);
  }
}

// --- errors: on the rank that can see them, never a hang

TEST_P(Mpi, CountMismatchIsAnErrorOnTheReceiver) {
  clbuf::mpi::Communicator comm = communicator(8 << 10);
  if (rank_ > 1) return;
  // small (inline) and chunked messages, the receiver's buffer larger and smaller
  const std::size_t sent_counts[] = {10, 10, 100000, 100000};
  const std::size_t recv_counts[] = {12, 9, 100001, 99999};
  for (int i = 0; i < 4; ++i) {
    if (rank_ == 0) {
      comm.send(upload(pattern<float>(0, 1200, sent_counts[i])), 1, 5);  // completes: no hang
    } else {
      const std::vector<float> before = pattern<float>(1, 1201, recv_counts[i]);
      clbuf::DeviceBuffer<float> in = upload(before);
      const std::string sent = std::to_string(sent_counts[i]) + " elements of 4 bytes (float)";
      const std::string held = std::to_string(recv_counts[i]) + " elements of 4 bytes (float)";
      std::vector<std::string> fragments = {
          "recv: CL_INVALID_VALUE (-30): ", "rank 0 (tag 5) sent " + sent,
          "the receiving buffer holds " + held};
      if (sent_counts[i] > recv_counts[i]) fragments.push_back("MPI_ERR_TRUNCATE");
      EXPECT_TRUE(throws([&] { comm.recv(in, 0, 5); }, CL_INVALID_VALUE, fragments));
      EXPECT_TRUE(same(before, manager_->download(in))) << "nothing written";
    }
  }
  // the pair still works afterwards
  if (rank_ == 0) comm.send(upload(pattern<int>(0, 1202, 70000)), 1, 6);
  if (rank_ == 1) {
    clbuf::DeviceBuffer<int> in = manager_->allocate<int>(70000);
    comm.recv(in, 0, 6);
    EXPECT_TRUE(same(pattern<int>(0, 1202, 70000), manager_->download(in)));
  }
}

// A rejected chunked message is drained without blocking: a rank sending to itself, progressed
// by the same thread, completes too.
TEST_P(Mpi, MismatchWithItselfDoesNotHang) {
  clbuf::mpi::Communicator comm = communicator(8 << 10);
  clbuf::DeviceBuffer<double> in = manager_->allocate<double>(30000);
  clbuf::mpi::Request received = comm.irecv(in, rank_, 9);
  clbuf::DeviceBuffer<double> out = upload(pattern<double>(rank_, 1250, 30001));
  clbuf::mpi::Request sent = comm.isend(out, rank_, 9);
  EXPECT_TRUE(throws([&] { received.wait(); }, CL_INVALID_VALUE,
                     {"irecv: ", "MPI_ERR_TRUNCATE", "sent 30001 elements of 8 bytes (double)"}));
  sent.wait();
}

// A receive into a buffer that fits the envelope (3968 bytes: no transfer object) gets the header
// of a chunked message: it drains the chunks, so that the sender completes, and fails naming both
// sizes; nothing is written. Non-blocking, blocking and persistent receives, from a peer and from
// the rank itself (progressed by the same thread), and the pair works afterwards.
TEST_P(Mpi, SmallReceiveOfAChunkedMessageDrainsItAndFails) {
  clbuf::mpi::Communicator comm = communicator(8 << 10);
  const std::size_t large = 100000;  // 400,000 bytes: 49 chunks of 8 KiB
  const std::vector<float> before = pattern<float>(rank_, 1700, 10);
  const std::vector<std::string> fragments = {"MPI_ERR_TRUNCATE", "sent 100000 elements of 4 bytes",
                                              "the receiving buffer holds 10 elements of 4 bytes"};
  const auto expect_error = [&](const char* op, const std::function<void()>& receive) {
    std::vector<std::string> expected = fragments;
    expected.push_back(std::string(op) + ": CL_INVALID_VALUE (-30): ");
    EXPECT_TRUE(throws(receive, CL_INVALID_VALUE, expected)) << op;
  };
  clbuf::DeviceBuffer<float> in = upload(before);
  {  // from itself: the chunked send is progressed by the receive's wait
    clbuf::mpi::Request received = comm.irecv(in, rank_, 11);
    clbuf::mpi::Request sent = comm.isend(upload(pattern<float>(rank_, 1701, large)), rank_, 11);
    expect_error("irecv", [&] { received.wait(); });
    sent.wait();
    EXPECT_TRUE(received.test()) << "empty after the failure";
  }
  EXPECT_TRUE(same(before, manager_->download(in))) << "nothing written";
  if (rank_ > 1) return;
  if (rank_ == 0) {
    for (std::uint32_t key = 1702; key < 1705; ++key) {
      comm.send(upload(pattern<float>(0, key, large)), 1, 12);  // completes: drained
    }
    comm.send(upload(pattern<float>(0, 1705, 10)), 1, 12);
    return;
  }
  expect_error("irecv", [&] { comm.irecv(in, 0, 12).wait(); });
  expect_error("recv", [&] { comm.recv(in, 0, 12); });
  clbuf::mpi::Persistent persistent = comm.recv_init(in, 0, 12);
  persistent.start();
  expect_error("recv_init", [&] { persistent.wait(); });
  EXPECT_TRUE(same(before, manager_->download(in))) << "nothing written";
  persistent.start();  // again, after the failure
  persistent.wait();
  EXPECT_TRUE(same(pattern<float>(0, 1705, 10), manager_->download(in)));
}

// The sender's blocking send of a chunked message that the peer's small irecv matched completes
// while the peer waits in another call (a barrier, a blocking receive, an allreduce, also without
// the collectives' agreement): the small receive is polled there and drains the chunks. It was
// only when its own Request was waited: the sender stayed in send(), and the peer in the barrier,
// for ever; an allreduce without the agreement called a blocking MPI_Allreduce, with no progress.
TEST_P(Mpi, ASmallReceiveMatchedByAChunkedMessageDrainsItWhileTheRankWaitsElsewhere) {
  clbuf::mpi::Options options;
  options.chunk_bytes = 8 << 10;
  options.device_reduce_bytes = 4096;  // the 4-byte allreduce below: on host memory
  clbuf::mpi::Communicator verified(*manager_, MPI_COMM_WORLD, options);
  options.verify_collectives = false;
  clbuf::mpi::Communicator unverified(*manager_, MPI_COMM_WORLD, options);
  const std::size_t large = 100000;           // chunked on every path
  for (const int elsewhere : {0, 1, 2, 3}) {  // barrier(); recv(); allreduce(), unverified too
    clbuf::mpi::Communicator& comm = elsewhere == 3 ? unverified : verified;
    const auto in_between = [&] {
      if (elsewhere == 0) comm.barrier();
      if (elsewhere >= 2) {
        clbuf::DeviceBuffer<std::int32_t> one = upload(std::vector<std::int32_t>{1});
        comm.allreduce(one);
      }
    };
    if (rank_ == 0) {
      comm.send(upload(pattern<float>(0, 1720, large)), 1, 13);  // completes: drained
      if (elsewhere == 1) comm.send(upload(pattern<float>(0, 1721, 20)), 1, 14);
      in_between();
    } else if (rank_ == 1) {
      const std::vector<float> before = pattern<float>(1, 1722, 10);
      clbuf::DeviceBuffer<float> in = upload(before);
      clbuf::mpi::Request received = comm.irecv(in, 0, 13);
      if (elsewhere == 1) {
        clbuf::DeviceBuffer<float> other = manager_->allocate<float>(20);
        comm.recv(other, 0, 14);
        EXPECT_TRUE(same(pattern<float>(0, 1721, 20), manager_->download(other)));
      }
      in_between();
      EXPECT_TRUE(throws([&] { received.wait(); }, CL_INVALID_VALUE,
                         {"irecv: ", "MPI_ERR_TRUNCATE", "sent 100000 elements of 4 bytes"}))
          << "call " << elsewhere;
      EXPECT_TRUE(same(before, manager_->download(in))) << "nothing written";
    } else {
      in_between();
    }
  }
}

// A persistent receive that failed (a message of another size) may start again at once, and its
// next message arrives: small (no transfer object) and chunked.
TEST_P(Mpi, PersistentReceiveStartsAgainAfterAFailedMessage) {
  clbuf::mpi::Communicator comm = communicator(8 << 10);
  if (rank_ > 1) return;
  for (const std::size_t count : {std::size_t{10}, std::size_t{30000}}) {
    SCOPED_TRACE(std::to_string(count) + " elements");
    const std::uint32_t key = 1710 + static_cast<std::uint32_t>(count);
    if (rank_ == 0) {
      comm.send(upload(pattern<float>(0, key, count + 1)), 1, 13);
      comm.send(upload(pattern<float>(0, key + 1, count)), 1, 13);
      continue;
    }
    clbuf::DeviceBuffer<float> in = manager_->allocate<float>(count);
    clbuf::mpi::Persistent receive = comm.recv_init(in, 0, 13);
    receive.start();
    EXPECT_TRUE(throws([&] { receive.wait(); }, CL_INVALID_VALUE,
                       {"recv_init: ", "MPI_ERR_TRUNCATE", "holds " + std::to_string(count)}));
    EXPECT_FALSE(receive.active());
    receive.start();
    receive.wait();
    EXPECT_TRUE(same(pattern<float>(0, key + 1, count), manager_->download(in)));
  }
}

// Requests of small messages move like any other: move-assigning over an active one waits for
// it first, a moved-from one is empty, one destroyed unwaited waits; every byte arrives.
TEST_P(Mpi, SmallRequestsMoveAssignAndDestroyLikeAnyOther) {
  clbuf::mpi::Communicator comm = communicator();
  clbuf::DeviceBuffer<double> first = manager_->allocate<double>(5);
  clbuf::DeviceBuffer<double> second = manager_->allocate<double>(5);
  const clbuf::DeviceBuffer<double> out1 = upload(pattern<double>(rank_, 1720, 5));
  const clbuf::DeviceBuffer<double> out2 = upload(pattern<double>(rank_, 1721, 5));
  clbuf::mpi::Request received = comm.irecv(first, rank_, 14);
  clbuf::mpi::Request sent = comm.isend(out1, rank_, 14);
  clbuf::mpi::Request received2 = comm.irecv(second, rank_, 14);
  clbuf::mpi::Request sent2 = comm.isend(out2, rank_, 14);
  received = std::move(received2);  // waits for the first receive, then holds the second
  EXPECT_TRUE(same(pattern<double>(rank_, 1720, 5), manager_->download(first)));
  EXPECT_TRUE(received2.test());  // NOLINT(bugprone-use-after-move): moved from, empty
  { const clbuf::mpi::Request dropped = std::move(sent); }  // waits
  received.wait();
  sent2.wait();
  EXPECT_TRUE(same(pattern<double>(rank_, 1721, 5), manager_->download(second)));
  // any source, any tag
  clbuf::mpi::Request any = comm.irecv(first, MPI_ANY_SOURCE, MPI_ANY_TAG);
  comm.send(out2, rank_, 15);
  any.wait();
  EXPECT_TRUE(same(pattern<double>(rank_, 1721, 5), manager_->download(first)));
}

// A message that fits the envelope is posted and completed without a transfer object: once the
// Communicator's envelopes are cached, windows of isend/irecv, blocking send/recv and persistent
// requests allocate nothing on the C++ heap (this binary counts operator new), on every path,
// for 400 bytes and for the envelope's bound itself (3968 bytes).
TEST_P(Mpi, SmallMessagesAllocateNothingOnceWarm) {
  clbuf::mpi::Communicator comm = communicator();
  const int right = (rank_ + 1) % size_;
  const int left = (rank_ + size_ - 1) % size_;
  constexpr int window = 8;
  for (const std::size_t count : {std::size_t{100}, std::size_t{3968 / 4}}) {
    SCOPED_TRACE(std::to_string(count * 4) + " bytes");
    const clbuf::DeviceBuffer<std::int32_t> out = upload(pattern<std::int32_t>(rank_, 1730, count));
    std::vector<clbuf::DeviceBuffer<std::int32_t>> in;
    for (int w = 0; w < window; ++w) in.push_back(manager_->allocate<std::int32_t>(count));
    clbuf::mpi::Persistent send = comm.send_init(out, right, 16);
    clbuf::mpi::Persistent recv = comm.recv_init(in[0], left, 16);
    std::vector<clbuf::mpi::Request> requests;
    requests.reserve(2 * window);
    const auto round = [&] {
      for (int w = 0; w < window; ++w) {
        requests.push_back(comm.irecv(in[static_cast<std::size_t>(w)], left, 17));
      }
      for (int w = 0; w < window; ++w) requests.push_back(comm.isend(out, right, 17));
      clbuf::mpi::wait_all(requests);
      requests.clear();
      if (rank_ == 0) {  // a ring of blocking calls: rank 0 starts it
        comm.send(out, right, 18);
        comm.recv(in[1], left, 18);
      } else {
        comm.recv(in[1], left, 18);
        comm.send(out, right, 18);
      }
      recv.start();
      send.start();
      recv.wait();
      send.wait();
    };
    round();  // fills the envelope cache
    const long long news = g_news.load();
    for (int i = 0; i < 20; ++i) round();
    EXPECT_EQ(g_news.load() - news, 0)
        << "operator new calls in 20 rounds of " << 2 * window + 4 << " small messages a rank";
    for (const auto& buffer : in) {
      EXPECT_TRUE(same(pattern<std::int32_t>(left, 1730, count), manager_->download(buffer)));
    }
  }
}

// wait_all() waits for every request, even after one failed, then throws the first failure; a
// failed Request destroyed unwaited drops its error (a destructor never throws).
TEST_P(Mpi, WaitAllReportsAFailureAfterWaitingForEveryRequest) {
  clbuf::mpi::Communicator comm = communicator(8 << 10);
  if (rank_ > 1) return;
  if (rank_ == 0) {
    for (std::uint32_t key = 1600; key < 1603; ++key) {
      comm.send(upload(pattern<float>(0, key, 10)), 1, 7);
    }
    return;
  }
  {
    clbuf::DeviceBuffer<float> wrong = manager_->allocate<float>(11);
    clbuf::mpi::Request dropped = comm.irecv(wrong, 0, 7);
  }  // waits for the message; its error is dropped
  clbuf::DeviceBuffer<float> wrong = upload(pattern<float>(1, 1610, 9));
  clbuf::DeviceBuffer<float> right = manager_->allocate<float>(10);
  std::vector<clbuf::mpi::Request> requests;
  requests.push_back(comm.irecv(wrong, 0, 7));
  requests.push_back(comm.irecv(right, 0, 7));
  EXPECT_TRUE(throws([&] { clbuf::mpi::wait_all(requests); }, CL_INVALID_VALUE,
                     {"irecv: ", "sent 10 elements of 4 bytes (float)", "holds 9 elements"}));
  EXPECT_TRUE(same(pattern<float>(0, 1602, 10), manager_->download(right)));
  EXPECT_TRUE(same(pattern<float>(1, 1610, 9), manager_->download(wrong))) << "nothing written";
}

// A receive checks what arrives before trusting it: a message that is not clbuf::mpi's (too
// short for a header, or no magic), a header whose sizes do not add up, chunks larger than this
// rank's, or a collective's header where a point-to-point message was expected. Each is an error
// on the receiver naming the sender, nothing is written, and the pair still works afterwards.
// (Not sent: a foreign message larger than clbuf's envelope. Open MPI 4.1's shared-memory
// single-copy path writes such a message whole, past the receive buffer, before reporting
// MPI_ERR_TRUNCATE: docs/testing.md, "Line coverage".)
TEST_P(Mpi, ForeignOrCorruptMessagesAreRejected) {
  clbuf::mpi::Communicator comm = communicator(8 << 10);
  if (rank_ > 1) return;
  using clbuf::mpi::detail::Header;
  constexpr int tag = 21;
  constexpr std::size_t count = 16;  // 64 bytes: inline
  const auto header_for = [&](std::uint32_t kind) {
    Header header;
    header.kind = kind;
    header.count = count;
    header.bytes = count * sizeof(float);
    header.element_size = sizeof(float);
    header.type = clbuf::mpi::detail::float32;
    header.inline_bytes = static_cast<std::uint32_t>(header.bytes);
    return header;
  };
  std::vector<std::vector<char>> messages;
  messages.emplace_back(8, 'x');                                 // no room for a header
  messages.emplace_back(clbuf::mpi::detail::header_bytes, 'x');  // no magic
  const auto add = [&](const Header& header, std::size_t payload) {
    std::vector<char> message(sizeof(Header) + payload, 'p');
    std::memcpy(message.data(), &header, sizeof(Header));
    messages.push_back(std::move(message));
  };
  add(header_for(1), 10);  // says 64 payload bytes, carries 10
  Header chunked = header_for(1);
  chunked.inline_bytes = 0;
  chunked.chunk_bytes = 16 << 10;  // this rank's chunks are 8 KiB
  add(chunked, 0);
  add(header_for(2), count * sizeof(float));  // a collective's header
  const std::vector<std::vector<std::string>> expected = {
      {"is 8 bytes, no clbuf::mpi header; both ends must use clbuf::mpi"},
      {"has no clbuf::mpi header; both ends must use clbuf::mpi"},
      {"bytes but its header says " +
       std::to_string(clbuf::mpi::detail::header_bytes + count * sizeof(float))},
      {"is cut in chunks of 16384 bytes, this rank's are 8192"},
      {"sent part of a collective where a point-to-point message was expected"}};
  if (rank_ == 0) {
    for (std::vector<char>& message : messages) {
      ASSERT_EQ(MPI_Send(message.data(), static_cast<int>(message.size()), MPI_BYTE, 1, tag,
                         comm.native()),
                MPI_SUCCESS);
    }
    comm.send(upload(pattern<float>(0, 1650, count)), 1, tag);
    return;
  }
  const std::vector<float> before = pattern<float>(1, 1651, count);
  clbuf::DeviceBuffer<float> in = upload(before);
  for (std::size_t i = 0; i < expected.size(); ++i) {
    SCOPED_TRACE("message " + std::to_string(i));
    std::vector<std::string> fragments = expected[i];
    fragments.push_back("recv: CL_INVALID_VALUE (-30): ");
    fragments.push_back("rank 0 (tag 21)");
    EXPECT_TRUE(throws([&] { comm.recv(in, 0, tag); }, CL_INVALID_VALUE, fragments));
    EXPECT_TRUE(same(before, manager_->download(in))) << "nothing written";
  }
  comm.recv(in, 0, tag);
  EXPECT_TRUE(same(pattern<float>(0, 1650, count), manager_->download(in)));
}

TEST_P(Mpi, TypeMismatchOfTheSameSizeIsAnError) {
  clbuf::mpi::Communicator comm = communicator(8 << 10);
  if (rank_ == 0) comm.send(upload(pattern<float>(0, 1300, 50000)), 1);
  if (rank_ == 1) {
    clbuf::DeviceBuffer<std::int32_t> in = manager_->allocate<std::int32_t>(50000);
    EXPECT_TRUE(throws(
        [&] { comm.recv(in, 0); }, CL_INVALID_VALUE,
        {"sent 50000 elements of 4 bytes (float)", "holds 50000 elements of 4 bytes (int32)"}));
  }
}

TEST_P(Mpi, BadInputIsAnError) {
  clbuf::mpi::Communicator comm = communicator();
  clbuf::DeviceBuffer<int> buffer = manager_->allocate<int>(10);
  EXPECT_TRUE(throws([&] { comm.send(buffer, size_); }, CL_INVALID_VALUE,
                     {"send: ", "destination rank " + std::to_string(size_) + " is not in [0, "}));
  EXPECT_TRUE(throws([&] { comm.send(buffer, -5); }, CL_INVALID_VALUE, {"destination rank -5"}));
  EXPECT_TRUE(throws([&] { comm.send(buffer, 0, -1); }, CL_INVALID_VALUE, {"tag -1 is not in"}));
  EXPECT_TRUE(throws([&] { static_cast<void>(comm.isend(buffer, -3)); }, CL_INVALID_VALUE,
                     {"isend: ", "destination rank -3"}));
  EXPECT_TRUE(throws([&] { static_cast<void>(comm.irecv(buffer, size_ + 1)); }, CL_INVALID_VALUE,
                     {"irecv: ", "source rank", "or MPI_ANY_SOURCE"}));
  EXPECT_TRUE(throws([&] { comm.recv(buffer, 0, -7); }, CL_INVALID_VALUE, {"recv: ", "tag -7"}));
  clbuf::DeviceBuffer<int> moved = std::move(buffer);
  EXPECT_TRUE(throws([&] { comm.send(buffer, 0); }, CL_INVALID_MEM_OBJECT, {"send: "}));
  EXPECT_TRUE(throws([&] { comm.sendrecv(moved, 0, moved, 0); }, CL_MEM_COPY_OVERLAP,
                     {"sendrecv: ", "share bytes"}));
  clbuf::BufferManager other;  // a context of its own
  clbuf::DeviceBuffer<int> foreign = other.allocate<int>(10);
  EXPECT_TRUE(
      throws([&] { comm.send(foreign, 0); }, CL_INVALID_CONTEXT, {"another OpenCL context"}));
  // a bad root on every rank: each rank rejects it itself
  EXPECT_TRUE(throws([&] { comm.broadcast(moved, size_); }, CL_INVALID_VALUE,
                     {"broadcast: ", "root rank"}));
  clbuf::mpi::HaloExchange<int> halo(comm, {{(rank_ + 1) % size_, 0, 5, 5, 1, 1}});
  clbuf::DeviceBuffer<int> small = manager_->allocate<int>(4);
  EXPECT_TRUE(throws([&] { halo.start(small); }, CL_INVALID_VALUE, {"HaloExchange::start: "}));
  EXPECT_TRUE(throws(
      [&] {
        clbuf::mpi::HaloExchange<int> bad(comm, {{size_ + 3, 0, 0, 1, 0, 0}});
      },
      CL_INVALID_VALUE, {"neighbour rank"}));
}

// Without the agreement the collectives still give exact results.
TEST_P(Mpi, CollectivesWithoutVerification) {
  clbuf::mpi::Options options;
  options.chunk_bytes = 16 << 10;
  options.device_reduce_bytes = 4096;
  options.verify_collectives = false;
  clbuf::mpi::Communicator comm(*manager_, MPI_COMM_WORLD, options);
  check_allreduce<float>(*manager_, comm, rank_, size_, 5, 1700);
  check_allreduce<std::int32_t>(*manager_, comm, rank_, size_, 20001, 1701);
  clbuf::DeviceBuffer<double> buffer = rank_ == 1 ? upload(pattern<double>(1, 1702, 9000))
                                                  : upload(pattern<double>(rank_, 1703, 9000));
  comm.broadcast(buffer, 1);
  EXPECT_TRUE(same(pattern<double>(1, 1702, 9000), manager_->download(buffer)));
}

// A collective whose ranks disagree fails on every rank before any data moves.
TEST_P(Mpi, CollectiveMismatchFailsOnEveryRank) {
  clbuf::mpi::Communicator comm = communicator(8 << 10);
  clbuf::DeviceBuffer<float> buffer = manager_->allocate<float>(rank_ == 0 ? 100 : 101);
  EXPECT_TRUE(throws([&] { comm.broadcast(buffer, 0); }, CL_INVALID_VALUE,
                     {"broadcast: ", "element counts differ between ranks (100 to 101)"}));
  EXPECT_TRUE(throws([&] { comm.allreduce(buffer); }, CL_INVALID_VALUE, {"allreduce: "}));
  clbuf::DeviceBuffer<float> same_size = manager_->allocate<float>(64);
  EXPECT_TRUE(throws(
      [&] { comm.allreduce(same_size, rank_ == 0 ? clbuf::mpi::Op::sum : clbuf::mpi::Op::max); },
      CL_INVALID_VALUE, {"operations differ between ranks (sum to max)"}));
  EXPECT_TRUE(throws([&] { comm.broadcast(same_size, rank_ == 0 ? 0 : 1); }, CL_INVALID_VALUE,
                     {"roots differ"}));
  // the root's `all` is the wrong size: the root says why, the others name the root
  clbuf::DeviceBuffer<float> all = manager_->allocate<float>(rank_ == 0 ? 7 : 0);
  clbuf::DeviceBuffer<float> mine = manager_->allocate<float>(2);
  EXPECT_TRUE(throws([&] { comm.scatter(all, mine, 0); }, CL_INVALID_VALUE,
                     {rank_ == 0 ? "the root's buffer holds 7 elements" : "rank 0 rejected"}));
  // the same count and element size, another type
  if (rank_ % 2 == 0) {
    clbuf::DeviceBuffer<float> typed = manager_->allocate<float>(16);
    EXPECT_TRUE(throws([&] { comm.broadcast(typed, 0); }, CL_INVALID_VALUE,
                       {"element types differ between ranks (int32 to float)"}));
  } else {
    clbuf::DeviceBuffer<std::int32_t> typed = manager_->allocate<std::int32_t>(16);
    EXPECT_TRUE(throws([&] { comm.broadcast(typed, 0); }, CL_INVALID_VALUE,
                       {"element types differ between ranks (int32 to float)"}));
  }
  // and the communicator still works
  check_allreduce<float>(*manager_, comm, rank_, size_, 33, 1400);
}

// A buffer one rank cannot use (moved from) fails the collective on every rank: that rank with
// its own error, the others naming it; no rank is left waiting.
TEST_P(Mpi, BadBufferOnOneRankFailsTheCollectiveEverywhere) {
  clbuf::mpi::Communicator comm = communicator(8 << 10);
  clbuf::DeviceBuffer<float> good = manager_->allocate<float>(8);
  clbuf::DeviceBuffer<float> gone = manager_->allocate<float>(8);
  const clbuf::DeviceBuffer<float> taken = std::move(gone);
  clbuf::DeviceBuffer<float>& mine = rank_ == 1 ? gone : good;
  const auto expect_failure = [&](const char* op, const std::function<void()>& body) {
    if (rank_ == 1) {
      EXPECT_TRUE(throws(body, CL_INVALID_MEM_OBJECT, {std::string(op) + ": "}));
    } else {
      EXPECT_TRUE(throws(body, CL_INVALID_VALUE,
                         {std::string(op) + ": ", "rank 1 rejected its arguments"}));
    }
  };
  expect_failure("allreduce", [&] { comm.allreduce(mine); });
  clbuf::DeviceBuffer<float> all =
      manager_->allocate<float>(rank_ == 0 ? 8 * static_cast<std::size_t>(size_) : 0);
  expect_failure("gather", [&] { comm.gather(mine, all, 0); });
  expect_failure("scatter", [&] { comm.scatter(all, mine, 0); });
  check_allreduce<float>(*manager_, comm, rank_, size_, 5, 1410);
}

// Without the agreement a gather whose counts differ is still an error on the root, once every
// message has arrived (the root waits for all of them); the senders complete, and the
// communicator still works.
TEST_P(Mpi, GatherOfDifferentCountsWithoutVerificationFailsOnTheRoot) {
  clbuf::mpi::Options options;
  options.chunk_bytes = 16 << 10;
  options.verify_collectives = false;
  clbuf::mpi::Communicator comm(*manager_, MPI_COMM_WORLD, options);
  const std::size_t n = rank_ == 1 ? 6 : 5;
  clbuf::DeviceBuffer<float> mine = upload(pattern<float>(rank_, 1420, n));
  clbuf::DeviceBuffer<float> all =
      manager_->allocate<float>(rank_ == 0 ? 5 * static_cast<std::size_t>(size_) : 0);
  if (rank_ == 0) {
    EXPECT_TRUE(throws([&] { comm.gather(mine, all, 0); }, CL_INVALID_VALUE,
                       {"gather: ", "MPI_ERR_TRUNCATE: rank 1 (tag 0) sent 6 elements",
                        "the receiving buffer holds 5 elements"}));
    const std::vector<float> got = manager_->download(all);
    EXPECT_TRUE(same(pattern<float>(0, 1420, 5), std::vector<float>(got.begin(), got.begin() + 5)))
        << "the root's own share";
  } else {
    comm.gather(mine, all, 0);
  }
  check_allreduce<float>(*manager_, comm, rank_, size_, 5, 1421);
}

TEST_P(Mpi, OptionsMustAgree) {
  clbuf::mpi::Options options;
  options.chunk_bytes = rank_ == 0 ? std::size_t{1} << 20 : std::size_t{2} << 20;
  EXPECT_TRUE(throws([&] { clbuf::mpi::Communicator comm(*manager_, MPI_COMM_WORLD, options); },
                     CL_INVALID_VALUE, {"chunk_bytes differ between ranks (1048576 to 2097152)"}));
  options.chunk_bytes = rank_ == 0 ? 100 : std::size_t{1} << 20;
  EXPECT_TRUE(throws([&] { clbuf::mpi::Communicator comm(*manager_, MPI_COMM_WORLD, options); },
                     CL_INVALID_VALUE,
                     {rank_ == 0 ? "chunk_bytes 100 must be in" : "rank 0 rejected"}));
  EXPECT_TRUE(throws([&] { clbuf::mpi::Communicator comm(*manager_, MPI_COMM_NULL); },
                     CL_INVALID_VALUE, {"MPI_COMM_NULL"}));
  std::unique_ptr<clbuf::BufferManager> gone = make_manager();
  gone->cleanup();
  EXPECT_TRUE(throws([&] { clbuf::mpi::Communicator comm(*gone); }, CL_SUCCESS, {"cleanup()"}));
}

// The 1-D ring layout of the halo tests, [left ghost | interior | right ghost]: the field of
// this rank (pattern `key`) after the exchange, its ghosts holding the neighbours' edge cells.
template <class T>
std::vector<T> ring_after_exchange(int rank, int left, int right, std::uint32_t key,
                                   std::size_t interior, std::size_t halo) {
  const std::size_t n = interior + 2 * halo;
  std::vector<T> field = pattern<T>(rank, key, n);
  const std::vector<T> from_left = pattern<T>(left, key, n);
  const std::vector<T> from_right = pattern<T>(right, key, n);
  std::copy(from_left.begin() + static_cast<std::ptrdiff_t>(interior),
            from_left.begin() + static_cast<std::ptrdiff_t>(interior + halo), field.begin());
  std::copy(from_right.begin() + static_cast<std::ptrdiff_t>(halo),
            from_right.begin() + static_cast<std::ptrdiff_t>(2 * halo),
            field.begin() + static_cast<std::ptrdiff_t>(halo + interior));
  return field;
}

// A periodic 1D halo exchange: each rank's ghost cells hold its neighbours' edge cells.
TEST_P(Mpi, HaloExchangeFillsGhostCells) {
  clbuf::mpi::Communicator comm = communicator(8 << 10);
  const std::size_t halo = 3000;
  const std::size_t interior = 10000;
  const std::size_t n = interior + 2 * halo;
  const int right = (rank_ + 1) % size_;
  const int left = (rank_ + size_ - 1) % size_;
  // layout: [left ghost | interior | right ghost]; send my first/last `halo` interior cells
  clbuf::mpi::HaloExchange<double> exchange(
      comm, {{left, halo, 0, halo, 1, 2}, {right, interior, halo + interior, halo, 2, 1}});
  for (std::uint32_t round = 0; round < 3; ++round) {
    const std::vector<double> field = pattern<double>(rank_, 1500 + round, n);
    clbuf::DeviceBuffer<double> buffer = upload(field);
    exchange.start(buffer);
    EXPECT_TRUE(throws([&] { exchange.start(buffer); }, CL_INVALID_OPERATION, {"not finished"}));
    exchange.finish();
    EXPECT_TRUE(same(ring_after_exchange<double>(rank_, left, right, 1500 + round, interior, halo),
                     manager_->download(buffer)))
        << "round " << round;
  }
}

// Overlap on a CPU device (zero copy): work the application queues after start() does not hold
// the ghosts back. Here the manager's queue is held by a user event from just after start() until
// after finish() has returned; finish() must not wait for it (a clFinish would, forever).
TEST_P(Mpi, HaloExchangeIntoTheFieldDoesNotWaitForLaterWork) {
  clbuf::mpi::Communicator comm = communicator(8 << 10);
  const std::size_t halo = 3000;
  const std::size_t interior = 10000;
  const std::size_t n = interior + 2 * halo;
  const int right = (rank_ + 1) % size_;
  const int left = (rank_ + size_ - 1) % size_;
  clbuf::mpi::HaloExchange<float> exchange(
      comm, {{left, halo, 0, halo, 1, 2}, {right, interior, halo + interior, halo, 2, 1}});
  const bool zero_copy = manager_->memory_model() == clbuf::MemoryModel::host;
  const std::vector<float> field = pattern<float>(rank_, 1600, n);
  clbuf::DeviceBuffer<float> buffer = upload(field);
  exchange.start(buffer);
  bool in_time = true;
  if (zero_copy) {
    cl::UserEvent held(manager_->context());
    const cl_event wait = held();
    ASSERT_EQ(clEnqueueBarrierWithWaitList(manager_->queue()(), 1, &wait, nullptr), CL_SUCCESS);
    auto finished = std::async(std::launch::async, [&] { exchange.finish(); });
    in_time = finished.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
    held.setStatus(CL_COMPLETE);
    finished.get();
  } else {
    exchange.finish();
  }
  EXPECT_TRUE(in_time) << "finish() waited for work queued after start()";
  EXPECT_TRUE(same(ring_after_exchange<float>(rank_, left, right, 1600, interior, halo),
                   manager_->download(buffer)));
}

// Open ends: MPI_PROC_NULL neighbours move nothing, their ghost cells stay as they were.
TEST_P(Mpi, HaloExchangeWithOpenEnds) {
  clbuf::mpi::Communicator comm = communicator(8 << 10);
  const std::size_t halo = 5;
  const std::size_t interior = 20;
  const std::size_t n = interior + 2 * halo;
  const int left = rank_ == 0 ? MPI_PROC_NULL : rank_ - 1;
  const int right = rank_ == size_ - 1 ? MPI_PROC_NULL : rank_ + 1;
  clbuf::mpi::HaloExchange<float> exchange(
      comm, {{left, halo, 0, halo, 1, 2}, {right, interior, halo + interior, halo, 2, 1}});
  std::vector<float> field = pattern<float>(rank_, 1600, n);
  clbuf::DeviceBuffer<float> buffer = upload(field);
  exchange.start(buffer);
  while (!exchange.test()) {
  }
  if (left != MPI_PROC_NULL) {
    const std::vector<float> theirs = pattern<float>(left, 1600, n);
    std::copy(theirs.begin() + static_cast<std::ptrdiff_t>(interior),
              theirs.begin() + static_cast<std::ptrdiff_t>(interior + halo), field.begin());
  }
  if (right != MPI_PROC_NULL) {
    const std::vector<float> theirs = pattern<float>(right, 1600, n);
    std::copy(theirs.begin() + static_cast<std::ptrdiff_t>(halo),
              theirs.begin() + static_cast<std::ptrdiff_t>(2 * halo),
              field.begin() + static_cast<std::ptrdiff_t>(halo + interior));
  }
  EXPECT_TRUE(same(field, manager_->download(buffer)));
}

// ---- Halo boxes on Cartesian grids (cartesian_faces + HaloExchange packing on the device);
// the reference: halo_grid.hpp.
class MpiHalo : public Mpi {
 protected:
  /// One exchange plan on a Cartesian grid of `ndims` dimensions, checked over `rounds` rounds
  /// on one HaloExchange; `offset` > 0 makes the field a view at that element offset of a
  /// larger buffer, whose other elements must stay untouched.
  template <class T>
  void exchange(int ndims, unsigned periodic, std::size_t h, bool edges,
                const clbuf::Extents& interior, std::size_t offset = 0, std::uint32_t rounds = 1,
                std::size_t straight_max = clbuf::mpi::Options{}.halo_direct_max_bytes,
                std::size_t kernel_max = clbuf::mpi::Options{}.halo_kernel_max_row_bytes,
                std::size_t kernel_min_rows = clbuf::mpi::Options{}.halo_kernel_min_rows) {
    Cart cart(ndims, periodic);
    clbuf::mpi::Options options;
    options.chunk_bytes = 4096;  // boxes of more than 3968 bytes go in chunks
    options.halo_direct_max_bytes = straight_max;
    options.halo_kernel_max_row_bytes = kernel_max;
    options.halo_kernel_min_rows = kernel_min_rows;
    clbuf::mpi::Communicator comm(*manager_, cart.comm, options);
    clbuf::mpi::HaloExchange<T> halo(comm,
                                     clbuf::mpi::cartesian_faces(cart.comm, interior, h, edges));
    const std::size_t cells = halo_reference<T>(cart, interior, h, edges, 0, false).size();
    std::vector<T> outside = pattern<T>(rank_, 3000, offset + cells + 3);
    clbuf::DeviceBuffer<T> root = upload(outside);
    clbuf::DeviceBuffer<T> field = manager_->view(root, offset, cells);
    for (std::uint32_t round = 0; round < rounds; ++round) {
      manager_->upload(field, halo_reference<T>(cart, interior, h, edges, round, false));
      halo.start(field);
      halo.finish();
      const std::vector<T> expected = halo_reference<T>(cart, interior, h, edges, round, true);
      std::copy(expected.begin(), expected.end(),
                outside.begin() + static_cast<std::ptrdiff_t>(offset));
      ASSERT_TRUE(same(outside, manager_->download(root)))
          << ndims << "-D, periods " << periodic << ", halo " << h << (edges ? ", edges" : "")
          << ", " << sizeof(T) << "-byte elements, offset " << offset << ", round " << round
          << ", straight up to " << straight_max << " B, kernel for rows up to " << kernel_max
          << ", rank " << rank_ << " at (" << cart.coords[0] << ", " << cart.coords[1] << ", "
          << cart.coords[2] << ") of " << cart.dims[0] << "x" << cart.dims[1] << "x"
          << cart.dims[2];
    }
  }
};

TEST_P(MpiHalo, TwoDimensionalFacesMatchTheGlobalGrid) {
  for (unsigned periodic : {0U, 1U, 2U, 3U}) {
    for (std::size_t h : {std::size_t{1}, std::size_t{2}}) {
      for (bool edges : {false, true}) exchange<float>(2, periodic, h, edges, {7, 5, 1});
    }
  }
  exchange<double>(2, 3U, 2, true, {40, 30, 1});  // faces of 320 and 480 bytes, chunked rows
  exchange<std::int32_t>(2, 1U, 1, true, {6, 9, 1});
  exchange<double>(2, 0U, 3, false, {3, 4, 1});  // interior as narrow as the halo
}

TEST_P(MpiHalo, ThreeDimensionalFacesMatchTheGlobalGrid) {
  for (unsigned periodic : {0U, 7U, 5U}) {
    for (std::size_t h : {std::size_t{1}, std::size_t{2}}) {
      for (bool edges : {false, true}) exchange<float>(3, periodic, h, edges, {5, 4, 3});
    }
  }
  exchange<double>(3, 7U, 1, true, {24, 20, 6});  // faces of up to 3840 bytes, one chunked
  exchange<std::int32_t>(3, 2U, 2, true, {4, 6, 5});
}

TEST_P(MpiHalo, OneDimensionalGridOfBoxes) {
  exchange<double>(1, 1U, 3, false, {10, 1, 1});
  exchange<float>(1, 0U, 1, true, {1, 1, 1});
}

TEST_P(MpiHalo, FieldIsAViewAtAnOddElementOffset) {
  exchange<float>(2, 3U, 2, true, {9, 7, 1}, 13);
  exchange<double>(3, 6U, 1, true, {5, 4, 3}, 3);
}

TEST_P(MpiHalo, FiftyRoundsOnOneExchange) { exchange<float>(3, 7U, 1, true, {4, 4, 3}, 0, 50); }

// On a discrete device boxes up to Options::halo_direct_max_bytes go straight between the field
// and pinned memory (a rect read, a rect write), larger ones through the pack and unpack
// buffers: both ways, a bound between a rank's boxes, boxes in several chunks sent straight, and
// every box through the pack buffers (bound 0). Elsewhere the bound changes nothing.
TEST_P(MpiHalo, BoxesGoStraightUpToTheBound) {
  exchange<double>(3, 7U, 1, true, {40, 30, 8}, 0, 2);      // faces of 9600 bytes: three chunks
  exchange<float>(3, 5U, 2, true, {12, 10, 6}, 5, 2, 400);  // edges straight, faces packed
  exchange<float>(2, 3U, 2, true, {9, 7, 1}, 0, 3, 0);
  exchange<double>(3, 7U, 1, true, {5, 4, 3}, 3, 3, 0);
}

// Boxes packed on the device (here every box: straight bound 0) whose rows hold at most
// Options::halo_kernel_max_row_bytes go through the Communicator's pack kernel, the others
// through rect copies: both bounds (0: rect copies only; unbounded, and no least number of rows:
// the kernel for every box of more than one row), each word the kernel picks (1, 2, 4, 8 and 16
// bytes: rows of two doubles with pitches of 80 bytes), fields that are views at offsets that are
// not whole rows (where a rect copy becomes a copy a row), over several rounds of one exchange.
TEST_P(MpiHalo, ThinBoxesByTheKernelMatchTheGlobalGrid) {
  for (const std::size_t kernel : {std::size_t{0}, SIZE_MAX}) {
    exchange<std::int8_t>(2, 3U, 1, true, {7, 5, 1}, 0, 2, 0, kernel, 0);
    exchange<std::int16_t>(3, 7U, 1, true, {5, 4, 3}, 1, 2, 0, kernel, 0);
    exchange<float>(3, 5U, 2, true, {6, 5, 4}, 3, 2, 0, kernel, 0);
    exchange<double>(3, 7U, 2, false, {6, 4, 3}, 0, 2, 0, kernel, 0);
    exchange<double>(2, 1U, 3, true, {5, 9, 1}, 7, 2, 0, kernel, 0);
  }
  // The default bounds (x faces of 4,096 rows by the kernel), boxes going straight where they
  // may (a discrete device).
  exchange<float>(3, 7U, 1, false, {2, 64, 64}, 2, 2);
}

// Where the device builds the kernel, a box of thin rows costs no rect copy (the manager counts
// its rect copies as device copies) and a box with the bound at 0 one each; the exchange is
// completed by test() alone, which must see the unpacks by the kernel end.
TEST_P(MpiHalo, ThinBoxesAreNotRectCopiesWhereTheDeviceBuildsTheKernel) {
  cl_bool compiler = CL_FALSE;
  const cl::Device device = manager_->queue().getInfo<CL_QUEUE_DEVICE>();
  ASSERT_EQ(
      clGetDeviceInfo(device(), CL_DEVICE_COMPILER_AVAILABLE, sizeof(compiler), &compiler, nullptr),
      CL_SUCCESS);
  Cart cart(3, 7U);
  const clbuf::Extents interior{4, 3, 2};
  for (const std::size_t kernel : {std::size_t{0}, SIZE_MAX}) {
    clbuf::mpi::Options options;
    options.halo_direct_max_bytes = 0;
    options.halo_kernel_max_row_bytes = kernel;
    options.halo_kernel_min_rows = 0;
    clbuf::mpi::Communicator comm(*manager_, cart.comm, options);
    clbuf::mpi::HaloExchange<float> halo(
        comm, clbuf::mpi::cartesian_faces(cart.comm, interior, 1, false));
    clbuf::DeviceBuffer<float> field =
        upload(halo_reference<float>(cart, interior, 1, false, 3, false));
    const std::uint64_t before = manager_->stats().copy.operations;
    halo.start(field);
    while (!halo.test()) {  // test() as well as finish() waits for the kernels
    }
    const std::uint64_t copies = manager_->stats().copy.operations - before;
    // Six faces, every one of more than one row, each sent and received (periodic everywhere).
    if (kernel == 0) {
      EXPECT_EQ(copies, 12U);
    } else if (compiler) {
      EXPECT_EQ(copies, 0U);
    }
    EXPECT_TRUE(
        same(halo_reference<float>(cart, interior, 1, false, 3, true), manager_->download(field)));
  }
}

// A field made read-only or write-only for kernels is never packed by the kernel (it may not
// write or read there), only by rect copies, which may: every box still arrives exact. So is a
// sub-buffer of a field made so (it has its parent's flags).
TEST_P(MpiHalo, FieldKernelsMayOnlyReadOrOnlyWriteIsPackedByRectCopies) {
  Cart cart(3, 7U);
  const clbuf::Extents interior{4, 3, 2};
  clbuf::mpi::Options options;
  options.halo_direct_max_bytes = 0;
  options.halo_kernel_max_row_bytes = SIZE_MAX;
  options.halo_kernel_min_rows = 0;
  clbuf::mpi::Communicator comm(*manager_, cart.comm, options);
  clbuf::mpi::HaloExchange<float> halo(comm,
                                       clbuf::mpi::cartesian_faces(cart.comm, interior, 1, false));
  const std::vector<float> before = halo_reference<float>(cart, interior, 1, false, 5, false);
  const std::size_t align = manager_->context()
                                .getInfo<CL_CONTEXT_DEVICES>()
                                .at(0)
                                .getInfo<CL_DEVICE_MEM_BASE_ADDR_ALIGN>() /
                            8;
  const std::size_t bytes = before.size() * sizeof(float);
  for (const cl_mem_flags access :
       {cl_mem_flags{CL_MEM_READ_ONLY}, cl_mem_flags{CL_MEM_WRITE_ONLY}}) {
    // The buffer made so, and a sub-buffer (flags 0: its parent's) of a parent made so.
    for (const bool sub : {false, true}) {
      cl::Buffer limited(manager_->context(), access, sub ? align + bytes : bytes);
      if (sub) {
        const cl_buffer_region part{align, bytes};
        limited = limited.createSubBuffer(0, CL_BUFFER_CREATE_TYPE_REGION, &part);
      }
      clbuf::DeviceBuffer<float> field = manager_->adopt<float>(limited, before.size());
      manager_->upload(field, before);
      const std::uint64_t copies = manager_->stats().copy.operations;
      halo.start(field);
      halo.finish();
      EXPECT_EQ(manager_->stats().copy.operations - copies, 12U)
          << "flags " << access << (sub ? ", a sub-buffer" : "");
      EXPECT_TRUE(
          same(halo_reference<float>(cart, interior, 1, false, 5, true), manager_->download(field)))
          << "flags " << access << (sub ? ", a sub-buffer" : "");
    }
  }
}

// A field the host may not access (CL_MEM_HOST_NO_ACCESS) cannot be read straight: its boxes go
// through the pack and unpack buffers, device copies only, and arrive exact.
TEST_P(MpiHalo, FieldTheHostMayNotAccessIsPacked) {
  Cart cart(2, 3U);
  clbuf::mpi::Communicator comm = communicator(4096);
  const clbuf::Extents interior{11, 6, 1};
  const std::size_t h = 1;
  clbuf::mpi::HaloExchange<float> halo(comm,
                                       clbuf::mpi::cartesian_faces(cart.comm, interior, h, true));
  const std::vector<float> before = halo_reference<float>(cart, interior, h, true, 4, false);
  cl::Buffer hidden(manager_->context(), CL_MEM_READ_WRITE | CL_MEM_HOST_NO_ACCESS,
                    before.size() * sizeof(float));
  clbuf::DeviceBuffer<float> field = manager_->adopt<float>(hidden, before.size());
  clbuf::DeviceBuffer<float> visible = upload(before);
  manager_->copy(visible, field);
  halo.start(field);
  halo.finish();
  manager_->copy(field, visible);
  EXPECT_TRUE(
      same(halo_reference<float>(cart, interior, h, true, 4, true), manager_->download(visible)));
}

// The boxes sent are packed by start(): kernels (here uploads) the application enqueues on the
// interior before finish() may change the cells sent; the neighbours still get the old ones.
// An exchange in flight shares its Communicator's state, as a Request does: the Communicator may
// be moved or destroyed between start() and finish() (this used freed memory), and the
// exchange completes exact. A moved-from exchange refuses start(), and its destruction waits
// for nothing.
TEST_P(MpiHalo, AnExchangeInFlightOutlivesItsCommunicator) {
  Cart cart(2, 3U);
  const clbuf::Extents interior{12, 50, 1};
  for (const bool move_instead : {false, true}) {
    auto comm = std::make_unique<clbuf::mpi::Communicator>(communicator(4096));
    clbuf::mpi::HaloExchange<float> halo(*comm,
                                         clbuf::mpi::cartesian_faces(cart.comm, interior, 1, true));
    clbuf::DeviceBuffer<float> field =
        upload(halo_reference<float>(cart, interior, 1, true, 6, false));
    halo.start(field);
    if (move_instead) {
      clbuf::mpi::Communicator moved(std::move(*comm));
      comm.reset();
    } else {
      comm.reset();
    }
    clbuf::mpi::HaloExchange<float> taken(std::move(halo));
    taken.finish();
    EXPECT_TRUE(
        same(halo_reference<float>(cart, interior, 1, true, 6, true), manager_->download(field)))
        << (move_instead ? "moved" : "destroyed");
    try {
      halo.start(field);
      ADD_FAILURE() << "a moved-from exchange started";
    } catch (const clbuf::Error& e) {
      EXPECT_EQ(e.code(), CL_INVALID_OPERATION) << e.what();
      EXPECT_NE(std::string(e.what()).find("moved from"), std::string::npos) << e.what();
    }
  }
}

TEST_P(MpiHalo, InteriorMayChangeBetweenStartAndFinish) {
  Cart cart(2, 3U);
  clbuf::mpi::Communicator comm = communicator(4096);
  ASSERT_EQ(comm.rank(), rank_);  // no reordering: world ranks are the grid's
  const clbuf::Extents interior{30, 20, 1};
  const std::size_t h = 2;
  clbuf::mpi::HaloExchange<float> halo(comm,
                                       clbuf::mpi::cartesian_faces(cart.comm, interior, h, true));
  clbuf::DeviceBuffer<float> field =
      upload(halo_reference<float>(cart, interior, h, true, 1, false));
  halo.start(field);
  const std::vector<float> next = halo_reference<float>(cart, interior, h, true, 2, false);
  const clbuf::Extents layout{interior.x + 2 * h, interior.y + 2 * h, 1};
  clbuf::Region region;
  region.size = interior;
  region.src_origin = {h, h, 0};
  region.src_extents = layout;
  region.dst_origin = {h, h, 0};
  region.dst_extents = layout;
  manager_->upload_rect(field, next, region);
  halo.finish();
  std::vector<float> expected = halo_reference<float>(cart, interior, h, true, 1, true);
  for (std::size_t y = h; y < h + interior.y; ++y) {
    for (std::size_t x = h; x < h + interior.x; ++x) {
      expected[y * layout.x + x] = next[y * layout.x + x];
    }
  }
  EXPECT_TRUE(same(expected, manager_->download(field)));
}

// A box received that is not the size of the box its neighbour sends: finish() throws the
// receiver's mismatch (naming both counts), never unpacks it, and the exchange can start again.
TEST_P(MpiHalo, BoxesOfDifferentSizesAreAnErrorOfTheReceivingFinish) {
  clbuf::mpi::Communicator comm = communicator();
  const int right = (rank_ + 1) % size_;
  const int left = (rank_ + size_ - 1) % size_;
  const clbuf::Extents layout{8, 8, 1};
  clbuf::mpi::Neighbour to_right;  // sends 2x2 to the right, receives 2x2 with tag 2
  to_right.rank = right;
  to_right.send_tag = 1;
  to_right.recv_tag = 2;
  to_right.send_box = clbuf::mpi::Box{{1, 1, 0}, {2, 2, 1}, layout};
  to_right.recv_box = clbuf::mpi::Box{{5, 5, 0}, {2, 2, 1}, layout};
  clbuf::mpi::Neighbour to_left;  // sends 3x2 to the left, receives 3x2 with tag 1
  to_left.rank = left;
  to_left.send_tag = 2;
  to_left.recv_tag = 1;
  to_left.send_box = clbuf::mpi::Box{{1, 4, 0}, {3, 2, 1}, layout};
  to_left.recv_box = clbuf::mpi::Box{{4, 1, 0}, {3, 2, 1}, layout};
  clbuf::mpi::HaloExchange<float> exchange(comm, {to_right, to_left});
  const std::vector<float> before = pattern<float>(rank_, 1700, 64);
  clbuf::DeviceBuffer<float> field = upload(before);
  exchange.start(field);
  EXPECT_TRUE(throws([&] { exchange.finish(); }, CL_INVALID_VALUE, {"HaloExchange::start: "}));
  EXPECT_TRUE(same(before, manager_->download(field))) << "a rejected message was unpacked";
  exchange.start(field);  // finished: it may start again (and fail the same way)
  EXPECT_TRUE(throws([&] { exchange.finish(); }, CL_INVALID_VALUE, {}));
}

// Every box is checked against its field's extents (construction) and the field's size
// (start()); nothing is enqueued or sent when one does not fit. A second start() before
// finish() is CL_INVALID_OPERATION.
TEST_P(MpiHalo, BadBoxesAreRejectedAndNothingIsSent) {
  clbuf::mpi::Communicator comm = communicator();
  // pairs (0, 1), (2, 3); a last odd rank exchanges with MPI_PROC_NULL
  const int partner = (rank_ ^ 1) < size_ ? rank_ ^ 1 : MPI_PROC_NULL;
  const std::string name = partner == MPI_PROC_NULL ? "MPI_PROC_NULL" : std::to_string(partner);
  const clbuf::Extents field{8, 6, 1};
  const auto plan = [&](clbuf::Offset origin, clbuf::Extents size, clbuf::Extents layout,
                        clbuf::Offset recv_origin = {}) {
    clbuf::mpi::Neighbour n;
    n.rank = partner;
    n.send_tag = 4;
    n.recv_tag = 4;
    n.send_box = clbuf::mpi::Box{origin, size, layout};
    n.recv_box = clbuf::mpi::Box{recv_origin, size, layout};
    return std::vector<clbuf::mpi::Neighbour>{n};
  };
  using clbuf::mpi::HaloExchange;
  EXPECT_TRUE(throws(
      [&] {
        HaloExchange<float> bad(comm, plan({7, 0, 0}, {2, 6, 1}, field));
      },
      CL_INVALID_VALUE,
      {"HaloExchange: CL_INVALID_VALUE (-30): neighbour 0 (rank " + name + ") send box: ",
       "region of 2x6x1 at (7, 0, 0) leaves an array of 8x6x1 elements along x"}));
  EXPECT_TRUE(throws(
      [&] {
        HaloExchange<float> bad(comm, plan({0, 1, 0}, {1, 6, 1}, field));
      },
      CL_INVALID_VALUE, {"send box: ", "along y"}));
  EXPECT_TRUE(throws(
      [&] {
        HaloExchange<float> bad(comm, plan({0, 0, 1}, {1, 1, 1}, field));
      },
      CL_INVALID_VALUE, {"send box: ", "along z"}));
  EXPECT_TRUE(throws(
      [&] {
        HaloExchange<float> bad(comm, plan({0, 0, 0}, {1, 6, 1}, field, {0, 1, 0}));
      },
      CL_INVALID_VALUE, {"receive box: ", "along y"}));
  // the field's layout holds 48 elements; a buffer of 47 is too small, one of 48 fits
  HaloExchange<float> halo(comm, plan({7, 0, 0}, {1, 6, 1}, field));
  clbuf::DeviceBuffer<float> small = upload(pattern<float>(rank_, 3100, 47));
  EXPECT_TRUE(
      throws([&] { halo.start(small); }, CL_INVALID_VALUE,
             {"HaloExchange::start: CL_INVALID_VALUE (-30): neighbour 0 (rank " + name + ")",
              "send box: array of 8x6x1 elements (48) is larger than the 47 elements"}));
  EXPECT_TRUE(same(pattern<float>(rank_, 3100, 47), manager_->download(small)));
  MPI_Barrier(MPI_COMM_WORLD);
  int waiting = 0;
  for (int tries = 0; tries < 20 && !waiting; ++tries) {
    MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm.native(), &waiting, MPI_STATUS_IGNORE);
  }
  EXPECT_FALSE(waiting) << "a message was sent by a start() that failed";
  MPI_Barrier(MPI_COMM_WORLD);
  // the exchange is still usable; a second start() before finish() is refused
  std::vector<float> mine = pattern<float>(rank_, 3101, 48);
  clbuf::DeviceBuffer<float> buffer = upload(mine);
  halo.start(buffer);
  EXPECT_TRUE(throws([&] { halo.start(buffer); }, CL_INVALID_OPERATION,
                     {"HaloExchange::start: ", "the last exchange has not finished"}));
  halo.finish();
  if (partner != MPI_PROC_NULL) {
    const std::vector<float> theirs = pattern<float>(partner, 3101, 48);
    for (std::size_t y = 0; y < 6; ++y) mine[y * 8] = theirs[y * 8 + 7];  // column 7 -> column 0
  }
  EXPECT_TRUE(same(mine, manager_->download(buffer)));
}

// A plan may mix contiguous ranges and boxes; a box received may come from a contiguous range.
TEST_P(MpiHalo, ContiguousRangesAndBoxesMix) {
  clbuf::mpi::Communicator comm = communicator();
  const int right = (rank_ + 1) % size_;
  const int left = (rank_ + size_ - 1) % size_;
  // a 6x4 field: 3 cells of row 0 go right as a range and land at (2, 3) as one; column 1 goes
  // left as a box and lands in column 5 (apart from the range received)
  clbuf::mpi::Neighbour to_right;
  to_right.rank = right;
  to_right.send_offset = 0;
  to_right.count = 3;
  to_right.send_tag = 1;
  to_right.recv_tag = 2;
  to_right.recv_box = clbuf::mpi::Box{{5, 0, 0}, {1, 4, 1}, {6, 4, 1}};
  clbuf::mpi::Neighbour to_left;
  to_left.rank = left;
  to_left.recv_offset = 20;
  to_left.count = 3;
  to_left.send_tag = 2;
  to_left.recv_tag = 1;
  to_left.send_box = clbuf::mpi::Box{{1, 0, 0}, {1, 4, 1}, {6, 4, 1}};
  clbuf::mpi::HaloExchange<std::int32_t> halo(comm, {to_right, to_left});
  std::vector<std::int32_t> mine = pattern<std::int32_t>(rank_, 3200, 24);
  clbuf::DeviceBuffer<std::int32_t> buffer = upload(mine);
  halo.start(buffer);
  while (!halo.test()) {
  }
  const std::vector<std::int32_t> from_left = pattern<std::int32_t>(left, 3200, 24);
  const std::vector<std::int32_t> from_right = pattern<std::int32_t>(right, 3200, 24);
  for (std::size_t i = 0; i < 3; ++i) mine[20 + i] = from_left[i];  // left's row 0 (range)
  for (std::size_t y = 0; y < 4; ++y) mine[y * 6 + 5] = from_right[y * 6 + 1];  // right's column 1
  EXPECT_TRUE(same(mine, manager_->download(buffer)));
}

// Two boxes of one plan to one neighbour with one tag are matched by MPI in the order sent, so
// they must be sent in plan order. On a discrete device a box that goes straight was sent once its
// read had completed, after the packed boxes: the peer's first receive (the small box) matched the
// large box (MPI_ERR_TRUNCATE). Now a send waits for the earlier sends of its rank and tag.
TEST_P(MpiHalo, BoxesToOneNeighbourWithOneTagGoInPlanOrder) {
  clbuf::mpi::Options options;
  options.chunk_bytes = 4096;
  options.halo_direct_max_bytes = 1024;  // the small box straight, the large one packed
  clbuf::mpi::Communicator comm(*manager_, MPI_COMM_WORLD, options);
  const int partner = (rank_ ^ 1) < size_ ? rank_ ^ 1 : MPI_PROC_NULL;
  const clbuf::Extents field{40, 64, 1};
  clbuf::mpi::Neighbour small;  // first in the plan: 5 cells of row 60 -> row 61
  small.rank = partner;
  small.send_tag = small.recv_tag = 7;
  small.send_box = clbuf::mpi::Box{{0, 60, 0}, {5, 1, 1}, field};
  small.recv_box = clbuf::mpi::Box{{10, 61, 0}, {5, 1, 1}, field};
  clbuf::mpi::Neighbour large = small;  // then rows 0-29 -> rows 30-59
  large.send_box = clbuf::mpi::Box{{0, 0, 0}, {40, 30, 1}, field};
  large.recv_box = clbuf::mpi::Box{{0, 30, 0}, {40, 30, 1}, field};
  clbuf::mpi::HaloExchange<float> halo(comm, {small, large});
  for (std::uint32_t round = 0; round < 3; ++round) {
    std::vector<float> mine = pattern<float>(rank_, 3300 + round, 40 * 64);
    clbuf::DeviceBuffer<float> buffer = upload(mine);
    halo.start(buffer);
    halo.finish();
    if (partner != MPI_PROC_NULL) {
      const std::vector<float> theirs = pattern<float>(partner, 3300 + round, 40 * 64);
      for (std::size_t x = 0; x < 5; ++x) mine[61 * 40 + 10 + x] = theirs[60 * 40 + x];
      std::copy(theirs.begin(), theirs.begin() + 40 * 30, mine.begin() + 40 * 30);
    }
    EXPECT_TRUE(same(mine, manager_->download(buffer))) << "round " << round;
  }
}

/// To `partner` with tag 3: the first 8 cells of row 0 of a 64 x 64 `field` into row 63, a box
/// small enough to go straight on a discrete device.
clbuf::mpi::Neighbour row_start_box(int partner, const clbuf::Extents& field) {
  clbuf::mpi::Neighbour a;
  a.rank = partner;
  a.send_tag = a.recv_tag = 3;
  a.send_box = clbuf::mpi::Box{{0, 0, 0}, {8, 1, 1}, field};
  a.recv_box = clbuf::mpi::Box{{0, 63, 0}, {8, 1, 1}, field};
  return a;
}

// The same across exchanges and plain sends of one Communicator: a box going straight waits for
// its read, and a later exchange's send (or an isend) to the same rank with the same tag posted
// meanwhile overtook it, so the two messages landed swapped, silently. Now every send posts the
// sends exchanges deferred first, in the order the exchanges started.
TEST_P(MpiHalo, LaterSendsToTheSameRankAndTagDoNotOvertakeAnExchange) {
  clbuf::mpi::Options options;
  options.chunk_bytes = 64 << 10;
  options.halo_direct_max_bytes = 1024;
  clbuf::mpi::Communicator comm(*manager_, MPI_COMM_WORLD, options);
  const int partner = (rank_ ^ 1) < size_ ? rank_ ^ 1 : MPI_PROC_NULL;
  const clbuf::Extents field{64, 64, 1};
  const clbuf::mpi::Neighbour a = row_start_box(partner, field);
  clbuf::mpi::Neighbour b;  // 8 elements at 100 -> 200, the same rank and tag
  b.rank = partner;
  b.send_tag = b.recv_tag = 3;
  b.send_offset = 100;
  b.recv_offset = 200;
  b.count = 8;
  clbuf::mpi::HaloExchange<float> first(comm, {a});
  clbuf::mpi::HaloExchange<float> second(comm, {b});
  for (std::uint32_t round = 0; round < 20; ++round) {
    const bool plain = round % 2 == 1;  // the second message: an isend/irecv pair instead
    std::vector<float> fa = pattern<float>(rank_, 3400 + 2 * round, 64 * 64);
    std::vector<float> fb = pattern<float>(rank_, 3401 + 2 * round, 64 * 64);
    clbuf::DeviceBuffer<float> da = upload(fa);
    clbuf::DeviceBuffer<float> db = upload(fb);
    clbuf::DeviceBuffer<float> sent_plain = manager_->view(db, 100, 8);
    clbuf::DeviceBuffer<float> received_plain = manager_->view(db, 200, 8);
    first.start(da);
    if (plain) {
      if (partner != MPI_PROC_NULL) {
        clbuf::mpi::Request received = comm.irecv(received_plain, partner, 3);
        clbuf::mpi::Request sent = comm.isend(sent_plain, partner, 3);
        first.finish();
        received.wait();
        sent.wait();
      }
      first.finish();  // PROC_NULL: nothing to wait for
    } else {
      second.start(db);
      first.finish();
      second.finish();
    }
    if (partner != MPI_PROC_NULL) {
      const std::vector<float> ta = pattern<float>(partner, 3400 + 2 * round, 64 * 64);
      const std::vector<float> tb = pattern<float>(partner, 3401 + 2 * round, 64 * 64);
      std::copy(ta.begin(), ta.begin() + 8, fa.begin() + 63 * 64);
      std::copy(tb.begin() + 100, tb.begin() + 108, fb.begin() + 200);
    }
    EXPECT_TRUE(same(fa, manager_->download(da))) << "round " << round;
    EXPECT_TRUE(same(fb, manager_->download(db))) << "round " << round;
  }
}

// A box going straight waits for its read after start(); a rank that then blocks in another call
// (a recv, a wait, a collective) before finish() still sends it as the read completes, so the
// peer's finish() (which waits for it) returns and the peer reaches the matching call. The box
// was posted only by this exchange's own test() or finish(): both ranks waited forever.
TEST_P(MpiHalo, ABlockingCallBetweenStartAndFinishLetsTheExchangeSendsLeave) {
  clbuf::mpi::Communicator comm = communicator();
  const int partner = (rank_ ^ 1) < size_ ? rank_ ^ 1 : MPI_PROC_NULL;
  const clbuf::Extents field{64, 64, 1};
  const clbuf::mpi::Neighbour a = row_start_box(partner, field);
  clbuf::mpi::HaloExchange<float> halo(comm, {a});
  for (std::uint32_t call = 0; call < 3; ++call) {  // recv(); irecv().wait(); broadcast()
    std::vector<float> mine = pattern<float>(rank_, 3500 + call, 64 * 64);
    clbuf::DeviceBuffer<float> f = upload(mine);
    clbuf::DeviceBuffer<float> x = upload(pattern<float>(rank_, 3510 + call, 16));
    const int root = size_ > 1 ? 1 : 0;  // the broadcast's: the higher rank of the first pair
    const auto blocking_call = [&] {
      if (call == 0) comm.recv(x, partner, 9);
      if (call == 1) comm.irecv(x, partner, 9).wait();
      if (call == 2) comm.broadcast(x, root);
    };
    // The queue held for 100 ms, so that start()'s read of the box is still to come when it
    // returns (the box's send waits for it).
    cl::UserEvent gate(manager_->context());
    {
      cl::CommandQueue queue = manager_->queue();
      const std::vector<cl::Event> wait{gate};
      queue.enqueueMarkerWithWaitList(&wait, nullptr);
      queue.flush();
    }
    struct Opener {  // joined on every way out, a failure's exception included
      std::thread thread;
      ~Opener() { thread.join(); }
    } opener{std::thread([gate]() mutable {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      gate.setStatus(CL_COMPLETE);
    })};
    halo.start(f);
    if (partner != MPI_PROC_NULL && rank_ < partner) {  // blocks first, then finish()
      blocking_call();
      halo.finish();
    } else {
      halo.finish();
      if (call < 2 && partner != MPI_PROC_NULL) comm.send(x, partner, 9);
      if (call == 2) comm.broadcast(x, root);
    }
    if (call == 2) {
      EXPECT_TRUE(same(pattern<float>(root, 3512, 16), manager_->download(x)));
    } else if (partner != MPI_PROC_NULL && rank_ < partner) {
      EXPECT_TRUE(same(pattern<float>(partner, 3510 + call, 16), manager_->download(x)));
    }
    if (partner != MPI_PROC_NULL) {
      const std::vector<float> theirs = pattern<float>(partner, 3500 + call, 64 * 64);
      std::copy(theirs.begin(), theirs.begin() + 8, mine.begin() + 63 * 64);
    }
    EXPECT_TRUE(same(mine, manager_->download(f))) << "call " << call;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Paths, MpiHalo,
    ::testing::Values(Models{clbuf::MemoryModel::host, clbuf::MemoryModel::host, "ZeroCopy"},
                      Models{clbuf::MemoryModel::discrete, clbuf::MemoryModel::discrete, "Staged"},
                      Models{clbuf::MemoryModel::unified, clbuf::MemoryModel::unified, "Mapped"},
                      Models{clbuf::MemoryModel::host, clbuf::MemoryModel::discrete,
                             "ZeroCopyAndStaged"}),
    [](const ::testing::TestParamInfo<Models>& param) { return std::string(param.param.name); });

// The plan itself: one neighbour per face (and edge and corner), tags that tell apart the
// messages between two ranks, neighbours from the communicator's periods, and bad input.
TEST(MpiCartesian, PlanHasOneNeighbourPerDirectionWithDistinctTags) {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  for (int ndims : {1, 2, 3}) {
    for (bool edges : {false, true}) {
      Cart cart(ndims, 1U);  // periodic along x only
      const clbuf::Extents interior{4, ndims > 1 ? std::size_t{3} : 1,
                                    ndims > 2 ? std::size_t{2} : 1};
      const std::vector<clbuf::mpi::Neighbour> plan =
          clbuf::mpi::cartesian_faces(cart.comm, interior, 1, edges, 100);
      const std::size_t expected[2][4] = {{0, 2, 4, 6}, {0, 2, 8, 26}};
      ASSERT_EQ(plan.size(), expected[edges ? 1 : 0][ndims]) << ndims << "-D";
      std::vector<int> sends;
      std::vector<int> receives;
      for (const clbuf::mpi::Neighbour& n : plan) {
        ASSERT_TRUE(n.send_box && n.recv_box);
        EXPECT_GE(n.send_tag, 100);
        EXPECT_LE(n.send_tag, 126);
        EXPECT_EQ(n.send_tag + n.recv_tag, 2 * (100 + 13));  // opposite directions
        EXPECT_EQ(n.send_box->field.x, 6U);
        EXPECT_EQ(n.send_box->size.x * n.send_box->size.y * n.send_box->size.z,
                  n.recv_box->size.x * n.recv_box->size.y * n.recv_box->size.z);
        sends.push_back(n.send_tag);
        receives.push_back(n.recv_tag);
        // closed along y and z: a neighbour past the grid's end there is MPI_PROC_NULL
        const bool past_y =
            ndims > 1 && ((n.recv_box->origin.y == 0 && cart.coords[1] == 0) ||
                          (n.recv_box->origin.y == 4 && cart.coords[1] == cart.dims[1] - 1));
        if (past_y) {
          EXPECT_EQ(n.rank, MPI_PROC_NULL);
        }
        if (!past_y && ndims == 1) {
          EXPECT_NE(n.rank, MPI_PROC_NULL);  // periodic x
        }
      }
      std::sort(sends.begin(), sends.end());
      std::sort(receives.begin(), receives.end());
      EXPECT_TRUE(std::adjacent_find(sends.begin(), sends.end()) == sends.end());
      EXPECT_EQ(sends, receives);
    }
  }
  (void)size;
}

TEST(MpiCartesian, BadInputIsAnError) {
  Cart cart(2, 3U);
  const auto call = [&](MPI_Comm comm, clbuf::Extents interior, std::size_t h, int tag = 0) {
    return [=] { static_cast<void>(clbuf::mpi::cartesian_faces(comm, interior, h, false, tag)); };
  };
  EXPECT_TRUE(throws(call(MPI_COMM_WORLD, {4, 4, 1}, 1), CL_INVALID_VALUE,
                     {"cartesian_faces: CL_INVALID_VALUE (-30): ", "no Cartesian topology"}));
  EXPECT_TRUE(throws(call(MPI_COMM_NULL, {4, 4, 1}, 1), CL_INVALID_VALUE, {"MPI_COMM_NULL"}));
  EXPECT_TRUE(throws(call(cart.comm, {4, 4, 1}, 0), CL_INVALID_VALUE, {"halo width is 0"}));
  EXPECT_TRUE(throws(call(cart.comm, {4, 1, 1}, 2), CL_INVALID_VALUE,
                     {"interior of 4x1x1 elements is narrower than the halo of 2 along y"}));
  EXPECT_TRUE(throws(call(cart.comm, {4, 4, 3}, 1), CL_INVALID_VALUE,
                     {"of 2 dimensions: its extent along z must be 1"}));
  EXPECT_TRUE(throws(call(cart.comm, {4, 4, 1}, 1, -1), CL_INVALID_VALUE, {"first_tag -1"}));
  EXPECT_TRUE(throws(call(cart.comm, {SIZE_MAX - 1, 4, 1}, 1), CL_INVALID_VALUE,
                     {"the field's extents overflow size_t"}));
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int dims[4] = {0, 0, 0, 0};
  int periods[4] = {0, 0, 0, 0};
  MPI_Dims_create(size, 4, dims);
  MPI_Comm four = MPI_COMM_NULL;
  MPI_Cart_create(MPI_COMM_WORLD, 4, dims, periods, 0, &four);
  EXPECT_TRUE(throws(call(four, {4, 4, 4}, 1), CL_INVALID_VALUE,
                     {"4 dimensions; 1, 2 or 3 are supported"}));
  MPI_Comm_free(&four);
}

// An MPI call's failure is a clbuf::Error (code CL_SUCCESS: OpenCL has none for it) naming the
// call, MPI's error class and MPI's own words. MPI_COMM_NULL is an invalid communicator; the
// world's error handler returns errors for the length of the test.
// A hang on purpose, run only by CTest's mpi_watchdog_names_a_hang
// (--gtest_also_run_disabled_tests, CLBUF_TEST_CASE_LIMIT=2): rank 0 waits for a message no rank
// sends, rank 1 for rank 0 in a barrier; each rank's watchdog must abort it, naming the case.
TEST(MpiWatchdog, DISABLED_AReceiveNoRankSendsHangs) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0) {
    int value = 0;
    MPI_Recv(&value, 1, MPI_INT, MPI_ANY_SOURCE, 12345, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  FAIL() << "the receive completed: no rank sends tag 12345";
}

TEST(MpiErrors, AFailedMpiCallIsAnErrorNamingCallAndClass) {
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  EXPECT_TRUE(throws([] { static_cast<void>(clbuf::mpi::local_device_selector(MPI_COMM_NULL)); },
                     CL_SUCCESS,
                     {"local_device_selector: MPI_Comm_split_type failed: MPI_ERR_COMM ("}));
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
}

// A Communicator needs MPI: before MPI_Init its constructor throws, before any MPI call that
// would abort the process.
TEST(MpiErrors, CommunicatorBeforeMpiInitIsInvalidOperation) {
  EXPECT_NE(g_before_init.find("Communicator: CL_INVALID_OPERATION (-59): MPI is not initialized "
                               "(call MPI_Init first) or finalized"),
            std::string::npos)
      << g_before_init;
}

// Each error class a message names, as MPI spells it; classes without a name of their own read
// MPI_ERR_OTHER.
TEST(MpiErrors, ClassNamesAreMpisOwn) {
  const std::vector<std::pair<int, std::string>> classes = {
      {MPI_ERR_BUFFER, "MPI_ERR_BUFFER"},   {MPI_ERR_COUNT, "MPI_ERR_COUNT"},
      {MPI_ERR_TYPE, "MPI_ERR_TYPE"},       {MPI_ERR_TAG, "MPI_ERR_TAG"},
      {MPI_ERR_COMM, "MPI_ERR_COMM"},       {MPI_ERR_RANK, "MPI_ERR_RANK"},
      {MPI_ERR_REQUEST, "MPI_ERR_REQUEST"}, {MPI_ERR_ROOT, "MPI_ERR_ROOT"},
      {MPI_ERR_OP, "MPI_ERR_OP"},           {MPI_ERR_TRUNCATE, "MPI_ERR_TRUNCATE"},
      {MPI_ERR_INTERN, "MPI_ERR_INTERN"},   {MPI_ERR_IN_STATUS, "MPI_ERR_IN_STATUS"},
      {MPI_ERR_PENDING, "MPI_ERR_PENDING"}, {MPI_ERR_OTHER, "MPI_ERR_OTHER"},
      {MPI_ERR_WIN, "MPI_ERR_OTHER"}};
  for (const auto& [error_class, name] : classes) {
    EXPECT_EQ(clbuf::mpi::detail::mpi_class_name(error_class), name) << "class " << error_class;
  }
}

TEST(MpiSelector, LocalDeviceSelectorNamesADevice) {
  const std::string selector = clbuf::mpi::local_device_selector();
  clbuf::BufferManager manager(selector);
  EXPECT_EQ(selector, std::to_string(manager.device().platform_index) + ":" +
                          std::to_string(manager.device().device_index));
}

// Non-blocking collectives: each rank's share of a reduction, and the host reference.
template <class T>
std::vector<T> reduction_input(int rank, std::uint32_t key, std::size_t count) {
  // small integers (-999 .. 999): sums exact in any order, in float too
  const std::vector<std::int32_t> raw = pattern<std::int32_t>(rank, key, count);
  std::vector<T> data(count);
  for (std::size_t i = 0; i < count; ++i) data[i] = static_cast<T>(raw[i] % 1000);
  return data;
}

template <class T>
std::vector<T> reduced(int ranks, std::uint32_t key, std::size_t count, clbuf::mpi::Op op) {
  std::vector<T> result = reduction_input<T>(0, key, count);
  for (int r = 1; r < ranks; ++r) {
    const std::vector<T> part = reduction_input<T>(r, key, count);
    for (std::size_t i = 0; i < count; ++i) {
      if (op == clbuf::mpi::Op::sum) result[i] = static_cast<T>(result[i] + part[i]);
      if (op == clbuf::mpi::Op::min) result[i] = part[i] < result[i] ? part[i] : result[i];
      if (op == clbuf::mpi::Op::max) result[i] = part[i] > result[i] ? part[i] : result[i];
    }
  }
  return result;
}

TEST_P(Mpi, IallreduceAndIbroadcastAreExact) {
  clbuf::mpi::Communicator comm = communicator(16 << 10);
  std::uint32_t key = 4000;
  for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{70001},
                            (std::size_t{1} << 20) + 3}) {
    const bool large = count > 100000;  // 1 MiB + 3: one reduction and one root (time)
    for (clbuf::mpi::Op op : {clbuf::mpi::Op::sum, clbuf::mpi::Op::min, clbuf::mpi::Op::max}) {
      if (large && op != clbuf::mpi::Op::max) continue;
      clbuf::DeviceBuffer<std::int32_t> ints =
          upload(reduction_input<std::int32_t>(rank_, key, count));
      clbuf::DeviceBuffer<float> floats = upload(reduction_input<float>(rank_, key + 1, count));
      clbuf::mpi::Request a = comm.iallreduce(ints, op);
      clbuf::mpi::Request b = comm.iallreduce(floats, op);
      b.wait();
      a.wait();
      EXPECT_TRUE(same(reduced<std::int32_t>(size_, key, count, op), manager_->download(ints)))
          << count << " int32, " << clbuf::mpi::detail::op_name(op);
      EXPECT_TRUE(same(reduced<float>(size_, key + 1, count, op), manager_->download(floats)))
          << count << " float, " << clbuf::mpi::detail::op_name(op);
      key += 2;
    }
    for (int root = large ? size_ - 1 : 0; root < size_; ++root) {
      clbuf::DeviceBuffer<Pair> pairs =
          upload(pattern<Pair>(rank_ == root ? root : rank_ + 50, key, count));
      clbuf::DeviceBuffer<double> doubles =
          upload(pattern<double>(rank_ == root ? root : rank_ + 50, key + 1, count));
      clbuf::mpi::Request a = comm.ibroadcast(pairs, root);
      clbuf::mpi::Request b = comm.ibroadcast(doubles, root);
      while (!a.test()) {
      }
      b.wait();
      EXPECT_TRUE(same(pattern<Pair>(root, key, count), manager_->download(pairs)))
          << count << " pairs from " << root;
      EXPECT_TRUE(same(pattern<double>(root, key + 1, count), manager_->download(doubles)))
          << count << " doubles from " << root;
      key += 2;
    }
  }
}

// Several collectives in flight with point-to-point messages and a blocking collective between
// them, waited for in another order than started.
TEST_P(Mpi, NonBlockingCollectivesInFlightMixWithPointToPoint) {
  clbuf::mpi::Communicator comm = communicator(8 << 10);
  const int right = (rank_ + 1) % size_;
  const int left = (rank_ + size_ - 1) % size_;
  const std::size_t n = 50001;
  std::vector<clbuf::DeviceBuffer<std::int64_t>> sums;
  std::vector<clbuf::DeviceBuffer<std::uint16_t>> casts;
  std::vector<clbuf::mpi::Request> requests;
  clbuf::DeviceBuffer<float> out = upload(pattern<float>(rank_, 4500, n));
  clbuf::DeviceBuffer<float> in = manager_->allocate<float>(n);
  clbuf::mpi::Request received = comm.irecv(in, left, 45);
  for (std::uint32_t i = 0; i < 4; ++i) {
    sums.push_back(upload(reduction_input<std::int64_t>(rank_, 4510 + i, n)));
    casts.push_back(upload(pattern<std::uint16_t>(
        rank_ == static_cast<int>(i) % size_ ? static_cast<int>(i) % size_ : 99, 4520 + i, n)));
  }
  for (std::uint32_t i = 0; i < 4; ++i) {
    requests.push_back(comm.iallreduce(sums[i], clbuf::mpi::Op::sum));
    requests.push_back(comm.ibroadcast(casts[i], static_cast<int>(i) % size_));
    if (i == 1) {
      // a blocking collective while four are in flight
      clbuf::DeviceBuffer<double> now = upload(pattern<double>(rank_ == 0 ? 0 : 98, 4530, 999));
      comm.broadcast(now, 0);
      EXPECT_TRUE(same(pattern<double>(0, 4530, 999), manager_->download(now)));
    }
  }
  clbuf::mpi::Request sent = comm.isend(out, right, 45);
  received.wait();
  for (std::size_t i = requests.size(); i-- > 0;) requests[i].wait();
  sent.wait();
  EXPECT_TRUE(same(pattern<float>(left, 4500, n), manager_->download(in)));
  for (std::uint32_t i = 0; i < 4; ++i) {
    EXPECT_TRUE(same(reduced<std::int64_t>(size_, 4510 + i, n, clbuf::mpi::Op::sum),
                     manager_->download(sums[i])))
        << "sum " << i;
    EXPECT_TRUE(same(pattern<std::uint16_t>(static_cast<int>(i) % size_, 4520 + i, n),
                     manager_->download(casts[i])))
        << "broadcast " << i;
  }
}

TEST_P(Mpi, NonBlockingCollectiveMismatchFailsOnEveryRank) {
  clbuf::mpi::Communicator comm = communicator(8 << 10);
  clbuf::DeviceBuffer<float> buffer = manager_->allocate<float>(rank_ == 0 ? 100 : 101);
  clbuf::mpi::Request request = comm.iallreduce(buffer);
  EXPECT_TRUE(throws([&] { request.wait(); }, CL_INVALID_VALUE,
                     {"iallreduce: ", "element counts differ between ranks (100 to 101)"}));
  clbuf::DeviceBuffer<float> same_size = upload(pattern<float>(rank_, 4600, 64));
  EXPECT_TRUE(throws(
      [&] {
        clbuf::mpi::Request r = comm.ibroadcast(same_size, rank_ == 0 ? 0 : 1);
        r.wait();
      },
      CL_INVALID_VALUE, {"ibroadcast: ", "roots differ"}));
  // another non-blocking collective on one rank than on the others
  if (rank_ == 0) {
    EXPECT_TRUE(
        throws([&] { comm.ibroadcast(same_size, 0).wait(); }, CL_INVALID_VALUE,
               {"ibroadcast: ", "collectives differ between ranks (ibroadcast to iallreduce)"}));
  } else {
    EXPECT_TRUE(
        throws([&] { comm.iallreduce(same_size).wait(); }, CL_INVALID_VALUE,
               {"iallreduce: ", "collectives differ between ranks (ibroadcast to iallreduce)"}));
  }
  // and of the blocking ones
  if (rank_ == 0) {
    EXPECT_TRUE(
        throws([&] { comm.broadcast(same_size, 0); }, CL_INVALID_VALUE,
               {"broadcast: ", "collectives differ between ranks (broadcast to allreduce)"}));
  } else {
    EXPECT_TRUE(
        throws([&] { comm.allreduce(same_size); }, CL_INVALID_VALUE,
               {"allreduce: ", "collectives differ between ranks (broadcast to allreduce)"}));
  }
  // bad input on one rank: it throws at the call, the others from wait()
  if (rank_ == 1) {
    EXPECT_TRUE(throws([&] { static_cast<void>(comm.ibroadcast(same_size, size_)); },
                       CL_INVALID_VALUE, {"ibroadcast: ", "root rank"}));
  } else {
    clbuf::mpi::Request r = comm.ibroadcast(same_size, 0);
    EXPECT_TRUE(throws([&] { r.wait(); }, CL_INVALID_VALUE,
                       {"ibroadcast: ", "rank 1 rejected its arguments"}));
  }
  EXPECT_TRUE(same(pattern<float>(rank_, 4600, 64), manager_->download(same_size)))
      << "nothing written";
  // and the communicator still works
  clbuf::DeviceBuffer<std::int32_t> ints = upload(reduction_input<std::int32_t>(rank_, 4601, 33));
  comm.iallreduce(ints, clbuf::mpi::Op::max).wait();
  EXPECT_TRUE(
      same(reduced<std::int32_t>(size_, 4601, 33, clbuf::mpi::Op::max), manager_->download(ints)));
}

TEST_P(Mpi, NonBlockingCollectivesWithoutVerification) {
  clbuf::mpi::Options options;
  options.verify_collectives = false;
  clbuf::mpi::Communicator comm(*manager_, MPI_COMM_WORLD, options);
  clbuf::DeviceBuffer<double> values = upload(reduction_input<double>(rank_, 4700, 4097));
  clbuf::DeviceBuffer<std::int8_t> bytes =
      upload(pattern<std::int8_t>(size_ - 1 == rank_ ? rank_ : 77, 4701, 3));
  clbuf::mpi::Request a = comm.iallreduce(values, clbuf::mpi::Op::min);
  clbuf::mpi::Request b = comm.ibroadcast(bytes, size_ - 1);
  std::vector<clbuf::mpi::Request> both;
  both.push_back(std::move(b));
  both.push_back(std::move(a));
  clbuf::mpi::wait_all(both);
  EXPECT_TRUE(
      same(reduced<double>(size_, 4700, 4097, clbuf::mpi::Op::min), manager_->download(values)));
  EXPECT_TRUE(same(pattern<std::int8_t>(size_ - 1, 4701, 3), manager_->download(bytes)));
}

// Path::whole against ranks that use plain MPI on std::vectors (what a peer without clbuf
// writes): the datatypes below are the ones such a peer names, not clbuf's table.
template <class T>
MPI_Datatype peer_type() {
  if (std::is_same<T, std::int8_t>::value) return MPI_SIGNED_CHAR;
  if (std::is_same<T, std::uint16_t>::value) return MPI_UNSIGNED_SHORT;
  if (std::is_same<T, std::int32_t>::value) return MPI_INT;
  if (std::is_same<T, std::uint64_t>::value) return MPI_UINT64_T;
  if (std::is_same<T, float>::value) return MPI_FLOAT;
  if (std::is_same<T, double>::value) return MPI_DOUBLE;
  return MPI_BYTE;  // Pair: its bytes
}

template <class T>
int peer_count(std::size_t count) {
  return static_cast<int>(peer_type<T>() == MPI_BYTE ? count * sizeof(T) : count);
}

class PlainPeers : public Mpi {
 protected:
  clbuf::mpi::Communicator whole() {
    clbuf::mpi::Options options;
    options.path = clbuf::mpi::Path::whole;
    return clbuf::mpi::Communicator(*manager_, MPI_COMM_WORLD, options);
  }

  /// A ring, in two rounds: even ranks use clbuf and odd ranks plain MPI, then the reverse; on 3
  /// ranks two clbuf ranks also meet (rank 2 -> 0). Blocking sendrecv in round 0, isend/irecv
  /// in round 1.
  template <class T>
  void ring_with_peers(std::size_t count, std::uint32_t key) {
    const int right = (rank_ + 1) % size_;
    const int left = (rank_ + size_ - 1) % size_;
    for (int round = 0; round < 2; ++round) {
      const bool uses_clbuf = (rank_ + round) % 2 == 0;
      const std::uint32_t k = key * 2 + static_cast<std::uint32_t>(round);
      const int tag = static_cast<int>(k % 30000);
      std::vector<T> got(count);
      if (uses_clbuf) {
        clbuf::mpi::Communicator comm = whole();
        clbuf::DeviceBuffer<T> out = upload(pattern<T>(rank_, k, count));
        clbuf::DeviceBuffer<T> in = upload(pattern<T>(rank_ + 100, k, count));
        if (round == 0) {
          comm.sendrecv(out, right, in, left, tag);
        } else {
          clbuf::mpi::Request received = comm.irecv(in, left, tag);
          clbuf::mpi::Request sent = comm.isend(out, right, tag);
          while (!received.test()) {
          }
          sent.wait();
        }
        got = manager_->download(in);
      } else {
        std::vector<T> out = pattern<T>(rank_, k, count);
        MPI_Sendrecv(out.data(), peer_count<T>(count), peer_type<T>(), right, tag, got.data(),
                     peer_count<T>(count), peer_type<T>(), left, tag, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
      }
      EXPECT_TRUE(same(pattern<T>(left, k, count), got))
          << count << " elements of " << sizeof(T) << " bytes from rank " << left << " (round "
          << round << (uses_clbuf ? ", clbuf)" : ", plain MPI)");
    }
  }
};

TEST_P(PlainPeers, RingWithPlainMpiRanksEveryTypeAndSize) {
  std::uint32_t key = 3000;
  for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1001}}) {
    ring_with_peers<std::int8_t>(count, key++);
    ring_with_peers<std::uint16_t>(count, key++);
    ring_with_peers<std::int32_t>(count, key++);
    ring_with_peers<float>(count, key++);
    ring_with_peers<double>(count, key++);
    ring_with_peers<std::uint64_t>(count, key++);
    ring_with_peers<Pair>(count, key++);
  }
  const std::size_t mib3 = std::size_t{3} << 20;  // several MiB, an odd count
  ring_with_peers<std::int8_t>(mib3 + 1, key++);
  ring_with_peers<float>(mib3 / 4 + 1, key++);
  ring_with_peers<double>(mib3 / 8 + 3, key++);
  ring_with_peers<Pair>(mib3 / sizeof(Pair) + 1, key++);
}

TEST_P(PlainPeers, BlockingSendAndRecvBothWays) {
  if (rank_ > 1) return;
  const std::size_t count = (std::size_t{5} << 20) / 8 + 3;  // 5 MiB + 24 B
  for (int clbuf_rank = 0; clbuf_rank < 2; ++clbuf_rank) {
    const int other = 1 - clbuf_rank;
    const std::uint32_t key = 3100 + static_cast<std::uint32_t>(clbuf_rank);
    if (rank_ == clbuf_rank) {
      clbuf::mpi::Communicator comm = whole();
      comm.send(upload(pattern<double>(rank_, key, count)), other, 9);
      clbuf::DeviceBuffer<double> in = manager_->allocate<double>(count);
      comm.recv(in, other, 9);
      EXPECT_TRUE(same(pattern<double>(other, key, count), manager_->download(in)));
    } else {
      std::vector<double> in(count);
      MPI_Recv(in.data(), static_cast<int>(count), MPI_DOUBLE, clbuf_rank, 9, MPI_COMM_WORLD,
               MPI_STATUS_IGNORE);
      EXPECT_TRUE(same(pattern<double>(clbuf_rank, key, count), in));
      const std::vector<double> out = pattern<double>(rank_, key, count);
      MPI_Send(out.data(), static_cast<int>(count), MPI_DOUBLE, clbuf_rank, 9, MPI_COMM_WORLD);
    }
  }
}

// A plain message of another size than the buffer is an Error naming both sizes; nothing is
// written, the message is consumed (the sender completes) and the pair still works.
TEST_P(PlainPeers, WrongSizeIsAnErrorAndWritesNothing) {
  if (rank_ > 1) return;
  const std::size_t sent_counts[] = {10, 10, 0, 1, 300000, 300000};
  const std::size_t recv_counts[] = {11, 9, 1, 0, 300001, 299999};
  for (int i = 0; i < 6; ++i) {
    const std::uint32_t key = 3200 + static_cast<std::uint32_t>(i);
    if (rank_ == 1) {
      const std::vector<float> out = pattern<float>(1, key, sent_counts[i]);
      MPI_Send(out.data(), static_cast<int>(out.size()), MPI_FLOAT, 0, 4, MPI_COMM_WORLD);
      continue;
    }
    clbuf::mpi::Communicator comm = whole();
    const std::vector<float> before = pattern<float>(0, key, recv_counts[i]);
    clbuf::DeviceBuffer<float> in = upload(before);
    std::vector<std::string> fragments = {
        "rank 1 (tag 4) sent " + std::to_string(sent_counts[i] * 4) + " bytes",
        "the receiving buffer holds " + std::to_string(recv_counts[i]) +
            " elements of 4 bytes (float), " + std::to_string(recv_counts[i] * 4) + " bytes"};
    if (sent_counts[i] > recv_counts[i]) fragments.push_back("MPI_ERR_TRUNCATE");
    if (i % 2 == 0) {
      fragments.insert(fragments.begin(), "recv: CL_INVALID_VALUE (-30): ");
      EXPECT_TRUE(throws([&] { comm.recv(in, 1, 4); }, CL_INVALID_VALUE, fragments));
    } else {
      fragments.insert(fragments.begin(), "irecv: CL_INVALID_VALUE (-30): ");
      clbuf::mpi::Request request = comm.irecv(in, MPI_ANY_SOURCE, MPI_ANY_TAG);
      EXPECT_TRUE(throws([&] { request.wait(); }, CL_INVALID_VALUE, fragments));
    }
    EXPECT_TRUE(same(before, manager_->download(in))) << "nothing written";
  }
  if (rank_ == 1) {
    const std::vector<int> out = pattern<int>(1, 3299, 1000);
    MPI_Send(out.data(), 1000, MPI_INT, 0, 4, MPI_COMM_WORLD);
  } else {
    clbuf::mpi::Communicator comm = whole();
    clbuf::DeviceBuffer<int> in = manager_->allocate<int>(1000);
    comm.recv(in, 1, 4);
    EXPECT_TRUE(same(pattern<int>(1, 3299, 1000), manager_->download(in)));
  }
}

// Collectives under Path::whole are MPI's own on host memory: plain ranks call MPI_Bcast,
// MPI_Allreduce, MPI_Scatter and MPI_Gather on std::vectors beside clbuf ranks.
TEST_P(PlainPeers, CollectivesMeetPlainMpiCollectives) {
  const bool uses_clbuf = rank_ % 2 == 0;
  std::unique_ptr<clbuf::mpi::Communicator> comm;
  if (uses_clbuf) comm = std::make_unique<clbuf::mpi::Communicator>(whole());
  const std::size_t count = 70001;
  for (int root = 0; root < size_; ++root) {
    const std::uint32_t key = 3300 + static_cast<std::uint32_t>(root);
    std::vector<float> got = pattern<float>(rank_ + 50, key, count);
    if (rank_ == root) got = pattern<float>(root, key, count);
    if (uses_clbuf) {
      clbuf::DeviceBuffer<float> buffer = upload(got);
      comm->broadcast(buffer, root);
      got = manager_->download(buffer);
    } else {
      MPI_Bcast(got.data(), static_cast<int>(count), MPI_FLOAT, root, MPI_COMM_WORLD);
    }
    EXPECT_TRUE(same(pattern<float>(root, key, count), got)) << "broadcast from " << root;
  }
  // sums of small integers: exact in any order
  std::vector<std::int64_t> sum(count, 0);
  for (int r = 0; r < size_; ++r) {
    const std::vector<std::int32_t> part = pattern<std::int32_t>(r, 3400, count);
    for (std::size_t i = 0; i < count; ++i) sum[i] += part[i] >> 8;
  }
  std::vector<std::int64_t> mine(count);
  {
    const std::vector<std::int32_t> part = pattern<std::int32_t>(rank_, 3400, count);
    for (std::size_t i = 0; i < count; ++i) mine[i] = part[i] >> 8;
  }
  if (uses_clbuf) {
    clbuf::DeviceBuffer<std::int64_t> buffer = upload(mine);
    comm->allreduce(buffer, clbuf::mpi::Op::sum);
    mine = manager_->download(buffer);
  } else {
    MPI_Allreduce(MPI_IN_PLACE, mine.data(), static_cast<int>(count), MPI_INT64_T, MPI_SUM,
                  MPI_COMM_WORLD);
  }
  EXPECT_TRUE(same(sum, mine)) << "allreduce sum";
  // scatter from and gather to rank 0 (clbuf) and rank 1 (plain)
  const std::size_t n = 1001;
  for (int root = 0; root < 2; ++root) {
    const std::uint32_t key = 3500 + static_cast<std::uint32_t>(root);
    std::vector<std::int32_t> all =
        pattern<std::int32_t>(root, key, n * static_cast<std::size_t>(size_));
    std::vector<std::int32_t> part(n);
    if (uses_clbuf) {
      clbuf::DeviceBuffer<std::int32_t> whole_buffer =
          upload(rank_ == root ? all : std::vector<std::int32_t>(1));
      clbuf::DeviceBuffer<std::int32_t> mine_buffer = manager_->allocate<std::int32_t>(n);
      comm->scatter(whole_buffer, mine_buffer, root);
      part = manager_->download(mine_buffer);
    } else {
      MPI_Scatter(all.data(), static_cast<int>(n), MPI_INT, part.data(), static_cast<int>(n),
                  MPI_INT, root, MPI_COMM_WORLD);
    }
    EXPECT_TRUE(
        same(std::vector<std::int32_t>(all.begin() + static_cast<std::ptrdiff_t>(n) * rank_,
                                       all.begin() + static_cast<std::ptrdiff_t>(n) * (rank_ + 1)),
             part))
        << "scatter from " << root;
    std::vector<std::int32_t> gathered(rank_ == root ? all.size() : 0);
    const std::vector<std::int32_t> own = pattern<std::int32_t>(rank_, key + 10, n);
    if (uses_clbuf) {
      clbuf::DeviceBuffer<std::int32_t> all_buffer =
          manager_->allocate<std::int32_t>(rank_ == root ? all.size() : 1);
      comm->gather(upload(own), all_buffer, root);
      if (rank_ == root) gathered = manager_->download(all_buffer);
    } else {
      MPI_Gather(own.data(), static_cast<int>(n), MPI_INT, gathered.data(), static_cast<int>(n),
                 MPI_INT, root, MPI_COMM_WORLD);
    }
    if (rank_ == root) {
      std::vector<std::int32_t> expected;
      for (int r = 0; r < size_; ++r) {
        const std::vector<std::int32_t> theirs = pattern<std::int32_t>(r, key + 10, n);
        expected.insert(expected.end(), theirs.begin(), theirs.end());
      }
      EXPECT_TRUE(same(expected, gathered)) << "gather to " << root;
    }
  }
}

// Under Path::whole, ibroadcast and iallreduce are MPI_Ibcast and MPI_Iallreduce: plain ranks
// call those (MPI does not match a non-blocking collective with a blocking one).
TEST_P(PlainPeers, NonBlockingCollectivesMeetMpisOwn) {
  const bool uses_clbuf = rank_ % 2 == 1;
  std::unique_ptr<clbuf::mpi::Communicator> comm;
  if (uses_clbuf) comm = std::make_unique<clbuf::mpi::Communicator>(whole());
  const std::size_t n = 30001;
  for (int root = 0; root < size_; ++root) {
    const std::uint32_t key = 4800 + static_cast<std::uint32_t>(root);
    std::vector<double> got = pattern<double>(rank_ == root ? root : rank_ + 50, key, n);
    std::vector<std::int32_t> sum = reduction_input<std::int32_t>(rank_, key + 10, n);
    if (uses_clbuf) {
      clbuf::DeviceBuffer<double> buffer = upload(got);
      clbuf::DeviceBuffer<std::int32_t> sums = upload(sum);
      clbuf::mpi::Request a = comm->ibroadcast(buffer, root);
      clbuf::mpi::Request b = comm->iallreduce(sums, clbuf::mpi::Op::sum);
      b.wait();
      a.wait();
      got = manager_->download(buffer);
      sum = manager_->download(sums);
    } else {
      MPI_Request requests[2];
      MPI_Ibcast(got.data(), static_cast<int>(n), MPI_DOUBLE, root, MPI_COMM_WORLD, &requests[0]);
      MPI_Iallreduce(MPI_IN_PLACE, sum.data(), static_cast<int>(n), MPI_INT, MPI_SUM,
                     MPI_COMM_WORLD, &requests[1]);
      MPI_Waitall(2, requests, MPI_STATUSES_IGNORE);
    }
    EXPECT_TRUE(same(pattern<double>(root, key, n), got)) << "ibroadcast from " << root;
    EXPECT_TRUE(same(reduced<std::int32_t>(size_, key + 10, n, clbuf::mpi::Op::sum), sum))
        << "iallreduce";
  }
}

TEST_P(PlainPeers, ConstructionIsLocalAndUsesTheCommunicatorItself) {
  if (rank_ != 0) return;  // no other rank takes part
  clbuf::mpi::Communicator comm = whole();
  EXPECT_EQ(comm.native(), MPI_COMM_WORLD);
  EXPECT_EQ(comm.rank(), 0);
  EXPECT_EQ(comm.size(), size_);
}

using clbuf::MemoryModel;
INSTANTIATE_TEST_SUITE_P(
    Paths, Mpi,
    ::testing::Values(Models{MemoryModel::host, MemoryModel::host, "ZeroCopy"},
                      Models{MemoryModel::discrete, MemoryModel::discrete, "Staged"},
                      Models{MemoryModel::unified, MemoryModel::unified, "Mapped"},
                      Models{MemoryModel::host, MemoryModel::discrete, "ZeroCopyAndStaged"},
                      Models{MemoryModel::discrete, MemoryModel::unified, "StagedAndMapped"}),
    [](const ::testing::TestParamInfo<Models>& param) { return std::string(param.param.name); });
INSTANTIATE_TEST_SUITE_P(
    Paths, PlainPeers,
    ::testing::Values(Models{MemoryModel::host, MemoryModel::host, "ZeroCopy"},
                      Models{MemoryModel::discrete, MemoryModel::discrete, "Discrete"},
                      Models{MemoryModel::unified, MemoryModel::unified, "Unified"},
                      Models{MemoryModel::host, MemoryModel::discrete, "HostAndDiscrete"},
                      Models{MemoryModel::unified, MemoryModel::host, "UnifiedAndHost"}),
    [](const ::testing::TestParamInfo<Models>& param) { return std::string(param.param.name); });

}  // namespace

int main(int argc, char** argv) {
  try {
    clbuf::BufferManager manager;
    clbuf::mpi::Communicator comm(manager);
    g_before_init = "no error";
  } catch (const clbuf::Error& error) {
    g_before_init = error.what();
  }
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  ::testing::InitGoogleTest(&argc, argv);
  halo_grid::share_seed();
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  case_watchdog::install(rank);
  if (rank != 0) {  // one report; a failing rank still prints its failures
    ::testing::TestEventListeners& listeners = ::testing::UnitTest::GetInstance()->listeners();
    ::testing::GTEST_FLAG(brief) = true;
    (void)listeners;
  }
  const int failed = RUN_ALL_TESTS();
  int any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any;
}
