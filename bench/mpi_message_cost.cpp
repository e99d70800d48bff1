// SPDX-License-Identifier: MIT
// What one small clbuf::mpi message costs the host, without a peer (issue 21): one rank streams
// windows of 16 messages to itself, clbuf's isend/irecv of DeviceBuffers against MPI_Isend/
// MPI_Irecv of host arrays and one MPI_Waitall, the two interleaved pass by pass. No second
// process shares the cores and no network moves the bytes, so the difference is each library's
// own work per message; run it under `valgrind --tool=callgrind` (with --mode clbuf or mpi) to
// count it in instructions.
//
//   mpirun -np 1 mpi_message_cost [--bytes N (4)] [--windows N (2000)] [--passes N (5)]
//                                 [--mode both|clbuf|mpi] [--device SELECTOR]
//
// Output: per pass, microseconds per message (a send and its receive) for each, and the median
// ratio clbuf / MPI over the passes. Every clbuf window's bytes are checked.
#include <clbuf/mpi.hpp>

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
constexpr int window = 16;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  std::size_t bytes = 4;
  int windows = 2000;
  int passes = 5;
  std::string mode = "both";
  std::string device;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has = i + 1 < argc;
    if (a == "--bytes" && has) {
      bytes = static_cast<std::size_t>(std::max(std::atol(argv[++i]), 1L));
    } else if (a == "--windows" && has) {
      windows = std::max(std::atoi(argv[++i]), 1);
    } else if (a == "--passes" && has) {
      passes = std::max(std::atoi(argv[++i]), 1);
    } else if (a == "--mode" && has) {
      mode = argv[++i];
    } else if (a == "--device" && has) {
      device = argv[++i];
    } else {
      std::fprintf(stderr,
                   "usage: mpi_message_cost [--bytes N] [--windows N] [--passes N] "
                   "[--mode both|clbuf|mpi] [--device SELECTOR]\n");
      MPI_Finalize();
      return 2;
    }
  }
  const bool run_mpi = mode != "clbuf";
  const bool run_clbuf = mode != "mpi";
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int status = 0;
  try {
    clbuf::BufferManager m(device);
    clbuf::mpi::Communicator comm(m, MPI_COMM_WORLD);
    std::vector<unsigned char> host_out(bytes), host_in(bytes * window);
    for (std::size_t i = 0; i < bytes; ++i) host_out[i] = static_cast<unsigned char>(i * 7 + 1);
    const auto out = m.upload(host_out);
    std::vector<clbuf::DeviceBuffer<unsigned char>> in;
    for (int w = 0; w < window; ++w) in.push_back(m.allocate<unsigned char>(bytes));
    std::vector<double> mpi_us, clbuf_us;
    for (int pass = 0; pass < passes; ++pass) {
      if (run_mpi) {
        const auto t0 = Clock::now();
        for (int r = 0; r < windows; ++r) {
          MPI_Request requests[2 * window];
          for (int w = 0; w < window; ++w) {
            MPI_Irecv(host_in.data() + static_cast<std::size_t>(w) * bytes, static_cast<int>(bytes),
                      MPI_BYTE, rank, 3, MPI_COMM_WORLD, &requests[w]);
          }
          for (int w = 0; w < window; ++w) {
            MPI_Isend(host_out.data(), static_cast<int>(bytes), MPI_BYTE, rank, 3, MPI_COMM_WORLD,
                      &requests[window + w]);
          }
          MPI_Waitall(2 * window, requests, MPI_STATUSES_IGNORE);
        }
        mpi_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() /
                         windows / window);
      }
      if (run_clbuf) {
        const auto t0 = Clock::now();
        std::vector<clbuf::mpi::Request> requests;
        requests.reserve(2 * window);
        for (int r = 0; r < windows; ++r) {
          for (int w = 0; w < window; ++w) requests.push_back(comm.irecv(in[w], rank, 3));
          for (int w = 0; w < window; ++w) requests.push_back(comm.isend(out, rank, 3));
          clbuf::mpi::wait_all(requests);
          requests.clear();
        }
        clbuf_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() /
                           windows / window);
        for (int w = 0; w < window; ++w) {
          if (m.download(in[w]) != host_out) throw std::runtime_error("wrong bytes received");
        }
      }
      std::printf("pass %d, %zu B: ", pass, bytes);
      if (run_mpi) std::printf("MPI %.3f us/message  ", mpi_us.back());
      if (run_clbuf) std::printf("clbuf %.3f us/message", clbuf_us.back());
      std::printf("\n");
    }
    if (run_mpi && run_clbuf) {
      std::vector<double> ratios;
      for (int p = 0; p < passes; ++p) ratios.push_back(clbuf_us[p] / mpi_us[p]);
      std::printf("median over %d passes: MPI %.3f, clbuf %.3f us/message; clbuf / MPI %.2f\n",
                  passes, median(mpi_us), median(clbuf_us), median(ratios));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mpi_message_cost: %s\n", e.what());
    status = 1;
  }
  MPI_Finalize();
  return status;
}
