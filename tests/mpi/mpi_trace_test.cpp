// SPDX-License-Identifier: MIT
// clbuf::mpi traced (issue 37), on 2 ranks under mpiexec (tests/mpi/CMakeLists.txt, label mpi):
// each rank writes its own file (the rank in its name, pid = rank), a ping-pong's messages are
// spans with peer, tag, bytes and path, and once scripts/trace_merge.py has merged the two files
// every send has exactly one flow arrow to its receive (ids derived on each side alone). A
// HaloExchange's start() and finish() are spans with their phases.
#include <gtest/gtest.h>
#include <mpi.h>
#include <stdlib.h>
#include <clbuf/mpi.hpp>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <string>
#include <system_error>
#include <vector>

#include "../support/json.hpp"
#include "case_watchdog.hpp"

#ifndef CLBUF_SOURCE_DIR
#error "CLBUF_SOURCE_DIR: the source tree, where scripts/trace_merge.py is"
#endif

namespace {

using clbuf_test::Json;
using clbuf_test::JsonReader;

int world_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

/// A folder made by rank 0 (mkdtemp) and named to every rank; rank 0 removes it.
class SharedDir {
 public:
  SharedDir() {
    char name[64] = "/tmp/clbuf_mpi_trace_XXXXXX";
    if (world_rank() == 0 && ::mkdtemp(name) == nullptr) name[0] = '\0';
    MPI_Bcast(name, sizeof(name), MPI_CHAR, 0, MPI_COMM_WORLD);
    path_ = name;
  }
  SharedDir(const SharedDir&) = delete;
  SharedDir& operator=(const SharedDir&) = delete;
  ~SharedDir() {
    MPI_Barrier(MPI_COMM_WORLD);
    std::error_code ignored;
    if (world_rank() == 0) std::filesystem::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::vector<float> random_floats(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> data(n);
  for (float& x : data) x = dist(rng);
  return data;
}

double arg_number(const Json& event, const std::string& key) {
  const Json* args = event.find("args");
  return args != nullptr ? args->number_of(key) : -1;
}
std::string arg_text(const Json& event, const std::string& key) {
  const Json* args = event.find("args");
  return args != nullptr ? args->text_of(key) : std::string();
}

/// The span of phase "X" named `name` on the track of `at` (pid, tid) around `at`'s ts.
bool inside(const std::vector<Json>& events, const Json& at, const std::string& name) {
  const double ts = at.number_of("ts");
  for (const Json& e : events) {
    if (e.text_of("ph") == "X" && e.text_of("name") == name &&
        e.number_of("pid") == at.number_of("pid") && e.number_of("tid") == at.number_of("tid") &&
        e.number_of("ts") <= ts && ts <= e.number_of("ts") + e.number_of("dur")) {
      return true;
    }
  }
  return false;
}

// Rank 0 and rank 1 play ping-pong: small messages (inline in their envelope) and large ones
// (in chunks), blocking and started, one receive by MPI_ANY_SOURCE and MPI_ANY_TAG. The merged
// trace holds 16 sends and 16 receives, and 16 arrows: each id once as a start ("s") on the
// sender's send span and once as an end ("f") on the receiver's receive span.
TEST(MpiTrace, APingPongMergesIntoMatchingFlowPairs) {
  const SharedDir dir;
  ASSERT_FALSE(dir.path().empty());
  const int rank = world_rank();
  const int peer = 1 - rank;
  {
    clbuf::Options options;
    options.trace_path = dir.path() + "/trace.json";
    clbuf::BufferManager manager(std::string(), options);
    EXPECT_EQ(manager.options().trace_path,
              dir.path() + "/trace.rank" + std::to_string(rank) + ".json");
    clbuf::mpi::Communicator comm(manager);
    for (const std::size_t n : {std::size_t{256}, std::size_t{1} << 18}) {  // 1 KiB, 1 MiB
      const auto data = random_floats(n, static_cast<unsigned>(n));
      auto out = manager.upload(data);
      auto in = manager.allocate<float>(n);
      for (int round = 0; round < 3; ++round) {
        if (rank == 0) {
          comm.send(out, peer, round);
          comm.recv(in, peer, round);
        } else {
          comm.recv(in, peer, round);
          comm.send(out, peer, round);
        }
        EXPECT_EQ(manager.download(in), data);
      }
      // Started, and received from any rank with any tag: the arrow still finds its send.
      auto receive = comm.irecv(in, MPI_ANY_SOURCE, MPI_ANY_TAG);
      auto send = comm.isend(out, peer, 9);
      receive.wait();
      send.wait();
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);  // both files are whole: their managers have gone
  if (rank != 0) return;
  const std::string merged = dir.path() + "/merged.json";
  const std::string command = "/usr/bin/python3 " CLBUF_SOURCE_DIR "/scripts/trace_merge.py -o " +
                              merged + " " + dir.path() + "/trace.json";
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  const Json root = JsonReader::parse_file(merged);
  const Json* list = root.find("traceEvents");
  ASSERT_NE(list, nullptr);
  std::map<int, std::string> processes;
  std::map<double, std::vector<const Json*>> starts, ends;  // by id
  std::map<std::string, int> spans;                         // "send 0", "receive 1", ...
  for (const Json& e : list->items) {
    const std::string ph = e.text_of("ph");
    const int pid = static_cast<int>(e.number_of("pid"));
    if (ph == "M" && e.text_of("name") == "process_name") processes[pid] = arg_text(e, "name");
    if (ph == "s" && e.text_of("name") == "MPI message") starts[e.number_of("id")].push_back(&e);
    if (ph == "f" && e.text_of("name") == "MPI message") ends[e.number_of("id")].push_back(&e);
    if (ph == "X" && (e.text_of("name") == "send" || e.text_of("name") == "receive")) {
      ++spans[e.text_of("name") + " " + std::to_string(pid)];
      EXPECT_EQ(arg_number(e, "peer"), 1 - pid);
      const double bytes = arg_number(e, "bytes");
      EXPECT_TRUE(bytes == 1024 || bytes == 4 << 18) << bytes;
      EXPECT_EQ(arg_text(e, "path") == "inline", bytes == 1024) << arg_text(e, "path");
    }
  }
  ASSERT_EQ(processes.size(), 2u);
  EXPECT_EQ(processes[0].rfind("rank 0: ", 0), 0u) << processes[0];
  EXPECT_EQ(processes[1].rfind("rank 1: ", 0), 0u) << processes[1];
  for (const char* name : {"send 0", "send 1", "receive 0", "receive 1"}) {
    EXPECT_EQ(spans[name], 8) << name;
  }
  EXPECT_EQ(starts.size(), 16u);
  EXPECT_EQ(ends.size(), 16u);
  for (const auto& start : starts) {
    ASSERT_EQ(start.second.size(), 1u) << "id " << start.first;
    ASSERT_EQ(ends[start.first].size(), 1u) << "id " << start.first << ": no single end";
    const Json& from = *start.second[0];
    const Json& to = *ends[start.first][0];
    EXPECT_NE(from.number_of("pid"), to.number_of("pid"));
    EXPECT_EQ(to.text_of("bp"), "e");
    EXPECT_TRUE(inside(list->items, from, "send")) << "an arrow leaves no send span";
    EXPECT_TRUE(inside(list->items, to, "receive")) << "an arrow ends on no receive span";
  }
}

// Staged messages (a discrete manager: pinned chunks on PoCL too) show their chunks on the track
// "MPI chunks": each chunk of a 4 MiB message once as a read and once as an MPI send on the
// sender, once as an MPI receive and once as a write on the receiver, as many as its chunks.
TEST(MpiTrace, AStagedMessageShowsItsChunks) {
  const SharedDir dir;
  ASSERT_FALSE(dir.path().empty());
  const int rank = world_rank();
  const std::string path = dir.path() + "/staged.rank" + std::to_string(rank) + ".json";
  const std::size_t n = std::size_t{1} << 20;  // 4 MiB of float
  {
    clbuf::Options options;
    options.trace_path = path;
    options.memory = clbuf::MemoryModel::discrete;
    clbuf::BufferManager manager(std::string(), options);
    clbuf::mpi::Communicator comm(manager);
    const auto data = random_floats(n, 11u);
    auto buffer = manager.upload(data);
    if (rank == 0) {
      comm.send(buffer, 1, 4);
    } else {
      auto in = manager.allocate<float>(n);
      comm.recv(in, 0, 4);
      EXPECT_EQ(manager.download(in), data);
    }
  }
  const Json root = JsonReader::parse_file(path);
  std::map<std::string, std::set<double>> chunks;  // name -> chunk indices
  std::map<std::string, int> spans;
  std::string message_path;
  for (const Json& e : root.find("traceEvents")->items) {
    if (e.text_of("ph") == "b") {
      ++spans[e.text_of("name")];
      chunks[e.text_of("name")].insert(arg_number(e, "chunk"));
    }
    if (e.text_of("ph") == "X" && (e.text_of("name") == "send" || e.text_of("name") == "receive")) {
      message_path = arg_text(e, "path");
    }
  }
  EXPECT_EQ(message_path, "staged");
  const char* const mine[2][2] = {{"chunk read (DMA)", "chunk MPI send"},
                                  {"chunk MPI receive", "chunk write (DMA)"}};
  const int count = spans[mine[rank][0]];
  EXPECT_GE(count, 2) << mine[rank][0];
  for (const char* name : mine[rank]) {
    EXPECT_EQ(spans[name], count) << name;
    EXPECT_EQ(chunks[name].size(), static_cast<std::size_t>(count)) << name;
  }
}

// A HaloExchange of a ring: start() and finish() are spans of the "halo exchange" track, with
// pack, post receives, post sends within start() and post sends, wait for receives, wait for
// sends, unpack within finish().
TEST(MpiTrace, AHaloExchangeShowsItsPhases) {
  const SharedDir dir;
  ASSERT_FALSE(dir.path().empty());
  const int rank = world_rank();
  const std::string path = dir.path() + "/halo.rank" + std::to_string(rank) + ".json";
  {
    clbuf::Options options;
    options.trace_path = path;
    clbuf::BufferManager manager(std::string(), options);
    clbuf::mpi::Communicator comm(manager);
    auto field = manager.upload(random_floats(64, 7u + static_cast<unsigned>(rank)));
    clbuf::mpi::HaloExchange<float> halo(comm, {{1 - rank, 8, 0, 8, 3, 3}});
    halo.start(field);
    halo.finish();
  }
  const Json root = JsonReader::parse_file(path);
  double track = -1;
  for (const Json& e : root.find("traceEvents")->items) {
    if (e.text_of("ph") == "M" && arg_text(e, "name").rfind("halo exchange", 0) == 0) {
      track = e.number_of("tid");  // "halo exchange of communicator N" after the first
    }
  }
  std::multiset<std::string> names;
  for (const Json& e : root.find("traceEvents")->items) {
    if (e.text_of("ph") == "X" && e.number_of("tid") == track) names.insert(e.text_of("name"));
  }
  for (const char* name :
       {"HaloExchange::start", "pack", "post receives", "post sends", "HaloExchange::finish",
        "wait for receives", "wait for sends", "unpack"}) {
    EXPECT_GE(names.count(name), 1u) << name;
  }
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  ::testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  case_watchdog::install(rank);
  const int failed = RUN_ALL_TESTS();
  int any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any;
}
