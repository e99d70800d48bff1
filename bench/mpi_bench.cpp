// SPDX-License-Identifier: MIT
// mpi_bench: clbuf::mpi against MPI on host memory in the same job, and against the
// download / MPI_Send / MPI_Recv / upload that OpenCL applications write by hand. Two ranks (more
// wait). Methods, interleaved per size (A B C D, several samples, the median reported):
//   host       MPI on 4 KiB-page memory (aligned_alloc, touched first)
//   host_huge  MPI on huge-page memory (madvise(MADV_HUGEPAGE)): what clbuf allocates for a CPU
//              device, so the fair anchor of its zero-copy path
//   clbuf      Communicator::send / recv of a DeviceBuffer<unsigned char>
//   naive      download -> MPI_Send, MPI_Recv -> upload, by hand
// Patterns: ping-pong (half the round trip: latency for small sizes, bandwidth for large) and
// stream (a window of sends, then a 1-byte ack). Before timing, every method's message is
// checked end to end against random bytes (rank 0 sends, rank 1 compares); --smoke stops after
// the checks and fails on any mismatch. No time is asserted anywhere.
//
//   mpirun -np 2 mpi_bench [--sizes 4,64,4K,64K,1M,4M,16M,64M,256M] [--target-s 0.2]
//          [--samples 5] [--device SEL | --device0 SEL --device1 SEL] [--memory MODEL]
//          [--chunk BYTES] [--depth N] [--no-verify] [--csv PATH] [--smoke]
// The allreduce table follows (float sum, every rank): MPI_Allreduce on huge-page memory against
// Communicator::allreduce and download / MPI_Allreduce / upload; --no-verify skips the
// collectives' agreement (Options::verify_collectives).
#include <mpi.h>
#include <clbuf/mpi.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace {

using Clock = std::chrono::steady_clock;

std::size_t parse_size(const std::string& text) {
  std::size_t end = 0;
  const unsigned long long value = std::stoull(text, &end);
  const std::string unit = text.substr(end);
  const std::size_t scale = unit == "K"   ? 1024
                            : unit == "M" ? 1024 * 1024
                            : unit == "G" ? 1u << 30
                                          : 1;
  return static_cast<std::size_t>(value) * scale;
}

std::string size_name(std::size_t bytes) {
  if (bytes >= (1u << 20) && bytes % (1u << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
  if (bytes >= 1024 && bytes % 1024 == 0) return std::to_string(bytes >> 10) + " KiB";
  return std::to_string(bytes) + " B";
}

/// Host memory for the anchors: 2 MiB-aligned, touched, huge pages asked for when `huge`.
struct HostBlock {
  HostBlock(std::size_t bytes, bool huge) : size(std::max<std::size_t>(bytes, 1)) {
    const std::size_t align = std::size_t{2} << 20;
    const std::size_t rounded = (size + align - 1) / align * align;
    data = static_cast<unsigned char*>(std::aligned_alloc(align, rounded));
    if (data == nullptr) throw std::runtime_error("out of host memory");
#if defined(__linux__) && defined(MADV_HUGEPAGE) && defined(MADV_NOHUGEPAGE)
    ::madvise(data, rounded, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
#else
    (void)huge;
#endif
    std::memset(data, 1, rounded);
  }
  HostBlock(const HostBlock&) = delete;
  HostBlock& operator=(const HostBlock&) = delete;
  ~HostBlock() { std::free(data); }
  unsigned char* data = nullptr;
  std::size_t size = 0;
};

std::vector<unsigned char> random_bytes(std::size_t bytes, std::uint64_t seed) {
  std::vector<unsigned char> out(bytes);
  std::uint64_t x = seed * 0x9E3779B97F4A7C15ULL + 1;
  for (std::size_t i = 0; i < bytes; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    out[i] = static_cast<unsigned char>(x | 1u);
  }
  return out;
}

/// One method: how rank 0 sends and rank 1 receives a message of `bytes` (and back).
struct Method {
  std::string name;
  std::function<void(int peer)> send;
  std::function<void(int peer)> recv;
  std::function<void(const std::vector<unsigned char>&)> load;  // set the message's contents
  std::function<std::vector<unsigned char>()> contents;
};

void send_bytes(const void* data, std::size_t bytes, int peer, int tag) {
  MPI_Send(data, static_cast<int>(bytes), MPI_BYTE, peer, tag, MPI_COMM_WORLD);
}
void recv_bytes(void* data, std::size_t bytes, int peer, int tag) {
  MPI_Recv(data, static_cast<int>(bytes), MPI_BYTE, peer, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
}

struct Result {
  double pingpong_s = 0;
  double stream_s = 0;  // per message
};

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::vector<std::size_t> sizes;
  double target_s = 0.2;
  int samples = 5;
  bool smoke = false;
  std::string device, device0, device1, memory, csv_path;
  clbuf::mpi::Options mpi_options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--sizes") {
      std::stringstream list(next());
      for (std::string item; std::getline(list, item, ',');) sizes.push_back(parse_size(item));
    } else if (arg == "--target-s") {
      target_s = std::stod(next());
    } else if (arg == "--samples") {
      samples = std::max(1, std::stoi(next()));
    } else if (arg == "--smoke") {
      smoke = true;
    } else if (arg == "--device") {
      device = next();
    } else if (arg == "--device0") {
      device0 = next();
    } else if (arg == "--device1") {
      device1 = next();
    } else if (arg == "--memory") {
      memory = next();
    } else if (arg == "--chunk") {
      mpi_options.chunk_bytes = parse_size(next());
    } else if (arg == "--depth") {
      mpi_options.depth = std::stoul(next());
    } else if (arg == "--no-verify") {
      mpi_options.verify_collectives = false;
    } else if (arg == "--csv") {
      csv_path = next();
    } else {
      if (rank == 0) std::cerr << "unknown argument " << arg << "\n";
      MPI_Finalize();
      return 2;
    }
  }
  if (sizes.empty()) {
    sizes = smoke ? std::vector<std::size_t>{0, 4, 4096, 65536, (1u << 20) + 3, 9u << 20}
                  : std::vector<std::size_t>{4,        64,        4096,      65536,     1u << 20,
                                             4u << 20, 16u << 20, 64u << 20, 256u << 20};
  }
  if (size < 2) {
    std::cerr << "mpi_bench needs 2 ranks (mpirun -np 2)\n";
    MPI_Finalize();
    return 2;
  }
  int status = 0;
  try {
    std::string selector = device;
    if (rank == 0 && !device0.empty()) selector = device0;
    if (rank == 1 && !device1.empty()) selector = device1;
    if (selector.empty()) selector = clbuf::mpi::local_device_selector();
    clbuf::Options options;
    if (memory == "host") options.memory = clbuf::MemoryModel::host;
    if (memory == "unified") options.memory = clbuf::MemoryModel::unified;
    if (memory == "discrete") options.memory = clbuf::MemoryModel::discrete;
    clbuf::BufferManager manager(selector, options);
    clbuf::mpi::Communicator comm(manager, MPI_COMM_WORLD, mpi_options);
    const bool active = rank < 2;
    const int peer = rank == 0 ? 1 : 0;
    if (rank == 0) {
      std::cout << "mpi_bench: 2 ranks; rank 0 on " << manager.device().name << " ("
                << clbuf::to_string(manager.memory_model()) << "), chunk "
                << size_name(comm.options().chunk_bytes) << " x " << comm.options().depth
                << "; one way: half a ping-pong round trip; GB/s = 1e9 B/s\n";
    }
    std::ofstream csv;
    if (rank == 0 && !csv_path.empty()) {
      csv.open(csv_path);
      csv << "bytes,method,pingpong_us,pingpong_gbs,stream_gbs\n";
    }
    if (rank == 0 && !smoke) {
      std::printf("%-9s | %-22s | %-22s | %-22s | %-22s | %s\n", "size", "host (pp / stream)",
                  "host_huge", "clbuf", "naive", "clbuf / host, host_huge, naive (pp; stream)");
    }
    for (std::size_t bytes : sizes) {
      HostBlock plain(bytes, false);
      HostBlock huge(bytes, true);
      HostBlock staging(bytes, false);  // the naive method's host copy
      clbuf::DeviceBuffer<unsigned char> buffer = manager.allocate<unsigned char>(bytes);
      std::vector<Method> methods;
      const auto host_method = [&](const char* name, HostBlock& block) {
        Method m;
        m.name = name;
        m.send = [&block, bytes](int to) { send_bytes(block.data, bytes, to, 1); };
        m.recv = [&block, bytes](int from) { recv_bytes(block.data, bytes, from, 1); };
        m.load = [&block](const std::vector<unsigned char>& v) {
          if (!v.empty()) std::memcpy(block.data, v.data(), v.size());
        };
        m.contents = [&block, bytes] {
          return std::vector<unsigned char>(block.data, block.data + bytes);
        };
        return m;
      };
      methods.push_back(host_method("host", plain));
      methods.push_back(host_method("host_huge", huge));
      Method clbuf_method;
      clbuf_method.name = "clbuf";
      clbuf_method.send = [&](int to) { comm.send(buffer, to, 1); };
      clbuf_method.recv = [&](int from) { comm.recv(buffer, from, 1); };
      clbuf_method.load = [&](const std::vector<unsigned char>& v) {
        if (!v.empty()) manager.upload(buffer, v);
      };
      clbuf_method.contents = [&] { return manager.download(buffer); };
      methods.push_back(clbuf_method);
      Method naive;
      naive.name = "naive";
      naive.send = [&](int to) {
        manager.download(buffer, staging.data, bytes);
        send_bytes(staging.data, bytes, to, 2);
      };
      naive.recv = [&](int from) {
        recv_bytes(staging.data, bytes, from, 2);
        manager.upload(buffer, staging.data, bytes);
      };
      naive.load = clbuf_method.load;
      naive.contents = clbuf_method.contents;
      methods.push_back(naive);

      // End-to-end check of every method: rank 0's random bytes arrive at rank 1 exactly.
      for (std::size_t m = 0; m < methods.size(); ++m) {
        const std::vector<unsigned char> expected = random_bytes(bytes, bytes * 7 + m);
        if (!active) continue;
        if (rank == 0) {
          methods[m].load(expected);
          methods[m].send(peer);
        } else {
          methods[m].load(random_bytes(bytes, bytes * 7 + m + 100));
          methods[m].recv(peer);
          if (methods[m].contents() != expected) {
            std::cerr << "mpi_bench: " << methods[m].name << " delivered wrong bytes at " << bytes
                      << " B\n";
            status = 1;
          }
        }
      }
      MPI_Allreduce(MPI_IN_PLACE, &status, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
      if (rank == 0 && smoke) {
        std::cout << size_name(bytes) << ": " << (status == 0 ? "every method exact" : "MISMATCH")
                  << "\n";
      }
      if (smoke || status != 0) continue;

      std::vector<Result> results(methods.size());
      std::vector<std::vector<double>> pp(methods.size()), st(methods.size());
      const int window = static_cast<int>(std::clamp<std::size_t>(
          (std::size_t{64} << 20) / std::max<std::size_t>(bytes, 1), 1, 16));
      for (int sample = 0; sample < samples + 1; ++sample) {  // sample 0: warm-up and sizing
        for (std::size_t m = 0; m < methods.size(); ++m) {
          int reps = 1;
          if (sample > 0) {
            // rank 0 sizes the sample from the warm-up; rank 1 follows
            double per = pp[m].empty() ? 1e-3 : pp[m].back();
            reps = static_cast<int>(
                std::clamp(target_s / samples / std::max(per * 2, 1e-7), 1.0, 100000.0));
          }
          MPI_Bcast(&reps, 1, MPI_INT, 0, MPI_COMM_WORLD);
          MPI_Barrier(MPI_COMM_WORLD);
          if (!active) continue;
          auto start = Clock::now();
          for (int r = 0; r < reps; ++r) {
            if (rank == 0) {
              methods[m].send(peer);
              methods[m].recv(peer);
            } else {
              methods[m].recv(peer);
              methods[m].send(peer);
            }
          }
          const double one_way =
              std::chrono::duration<double>(Clock::now() - start).count() / reps / 2;
          if (sample == 0) pp[m].clear();
          pp[m].push_back(one_way);
          // stream: `window` messages one way, then an ack
          const int stream_reps = std::max(1, reps / window / 2);
          unsigned char ack = 0;
          MPI_Barrier(MPI_COMM_WORLD);
          start = Clock::now();
          for (int r = 0; r < stream_reps; ++r) {
            if (m == 2) {  // clbuf: a window of requests in flight
              std::vector<clbuf::mpi::Request> requests;
              for (int w = 0; w < window; ++w) {
                requests.push_back(rank == 0 ? comm.isend(buffer, peer, 3)
                                             : comm.irecv(buffer, peer, 3));
              }
              clbuf::mpi::wait_all(requests);
            } else if (m < 2) {
              std::vector<MPI_Request> requests(static_cast<std::size_t>(window));
              HostBlock& block = m == 0 ? plain : huge;
              for (int w = 0; w < window; ++w) {
                if (rank == 0) {
                  MPI_Isend(block.data, static_cast<int>(bytes), MPI_BYTE, peer, 3, MPI_COMM_WORLD,
                            &requests[static_cast<std::size_t>(w)]);
                } else {
                  MPI_Irecv(block.data, static_cast<int>(bytes), MPI_BYTE, peer, 3, MPI_COMM_WORLD,
                            &requests[static_cast<std::size_t>(w)]);
                }
              }
              MPI_Waitall(window, requests.data(), MPI_STATUSES_IGNORE);
            } else {  // naive: each message downloaded then sent, received then uploaded
              for (int w = 0; w < window; ++w) {
                if (rank == 0) {
                  methods[m].send(peer);
                } else {
                  methods[m].recv(peer);
                }
              }
            }
            if (rank == 0) {
              recv_bytes(&ack, 1, peer, 4);
            } else {
              send_bytes(&ack, 1, peer, 4);
            }
          }
          const double per_message =
              std::chrono::duration<double>(Clock::now() - start).count() / stream_reps / window;
          if (sample == 0) st[m].clear();
          st[m].push_back(per_message);
        }
      }
      if (rank != 0) continue;
      const auto median = [](std::vector<double> v) {
        if (v.size() > 1) v.erase(v.begin());  // the warm-up
        std::sort(v.begin(), v.end());
        return v[v.size() / 2];
      };
      for (std::size_t m = 0; m < methods.size(); ++m) {
        results[m].pingpong_s = median(pp[m]);
        results[m].stream_s = median(st[m]);
      }
      const auto gbs = [bytes](double s) { return static_cast<double>(bytes) / s / 1e9; };
      const auto cell = [&](const Result& r) {
        char text[64];
        if (bytes < 65536) {
          std::snprintf(text, sizeof text, "%.2f us / %.2f GB/s", r.pingpong_s * 1e6,
                        gbs(r.stream_s));
        } else {
          std::snprintf(text, sizeof text, "%.2f / %.2f GB/s", gbs(r.pingpong_s), gbs(r.stream_s));
        }
        return std::string(text);
      };
      std::printf("%-9s | %-22s | %-22s | %-22s | %-22s |", size_name(bytes).c_str(),
                  cell(results[0]).c_str(), cell(results[1]).c_str(), cell(results[2]).c_str(),
                  cell(results[3]).c_str());
      for (std::size_t m : {std::size_t{0}, std::size_t{1}, std::size_t{3}}) {
        std::printf(" %.2fx;%.2fx", results[m].pingpong_s / results[2].pingpong_s,
                    results[m].stream_s / results[2].stream_s);
      }
      if (bytes < 65536) {
        std::printf("  (+%.2f us over host_huge)",
                    (results[2].pingpong_s - results[1].pingpong_s) * 1e6);
      }
      std::printf("\n");
      std::fflush(stdout);
      if (csv.is_open()) {
        for (std::size_t m = 0; m < methods.size(); ++m) {
          csv << bytes << "," << methods[m].name << "," << results[m].pingpong_s * 1e6 << ","
              << gbs(results[m].pingpong_s) << "," << gbs(results[m].stream_s) << "\n";
        }
      }
    }
    // allreduce (float sum) of the same bytes: MPI_Allreduce on huge-page host memory, clbuf's
    // allreduce (MPI on host memory below Options::device_reduce_bytes, a ring with an OpenCL
    // kernel from it), and download / MPI_Allreduce / upload by hand. Every rank takes part.
    if (!smoke && status == 0) {
      if (rank == 0) {
        std::printf("\nallreduce, float sum, %d ranks (GB/s of the vector; median)\n", size);
        std::printf("%-9s | %-10s | %-10s | %-10s | %s\n", "size", "host_huge", "clbuf", "naive",
                    "clbuf / host_huge, naive");
      }
      for (std::size_t bytes : sizes) {
        const std::size_t count = bytes / sizeof(float);
        if (count == 0) continue;
        HostBlock host(count * sizeof(float), true);
        std::vector<float> values(count, 1.0f);
        std::memcpy(host.data, values.data(), count * sizeof(float));
        clbuf::DeviceBuffer<float> buffer = manager.upload(values);
        std::vector<float> staging(count);
        const std::vector<std::function<void()>> ops = {
            [&] {
              MPI_Allreduce(MPI_IN_PLACE, host.data, static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                            MPI_COMM_WORLD);
            },
            [&] { comm.allreduce(buffer, clbuf::mpi::Op::sum); },
            [&] {
              manager.download(buffer, staging.data(), count);
              MPI_Allreduce(MPI_IN_PLACE, staging.data(), static_cast<int>(count), MPI_FLOAT,
                            MPI_SUM, MPI_COMM_WORLD);
              manager.upload(buffer, staging.data(), count);
            }};
        std::vector<std::vector<double>> times(ops.size());
        for (int sample = 0; sample < samples + 1; ++sample) {
          for (std::size_t m = 0; m < ops.size(); ++m) {
            int reps = 1;
            if (sample > 0) {
              reps = static_cast<int>(
                  std::clamp(target_s / samples / std::max(times[m].back(), 1e-7), 1.0, 10000.0));
            }
            MPI_Bcast(&reps, 1, MPI_INT, 0, MPI_COMM_WORLD);
            MPI_Barrier(MPI_COMM_WORLD);
            const auto start = Clock::now();
            for (int r = 0; r < reps; ++r) ops[m]();
            double per = std::chrono::duration<double>(Clock::now() - start).count() / reps;
            MPI_Bcast(&per, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
            if (sample == 0) times[m].clear();
            times[m].push_back(per);
          }
        }
        if (rank != 0) continue;
        double median[3];
        for (std::size_t m = 0; m < ops.size(); ++m) {
          std::vector<double> v(times[m].begin() + 1, times[m].end());
          std::sort(v.begin(), v.end());
          median[m] = v[v.size() / 2];
        }
        const double b = static_cast<double>(count * sizeof(float));
        std::printf("%-9s | %-10.2f | %-10.2f | %-10.2f | %.2fx, %.2fx\n", size_name(bytes).c_str(),
                    b / median[0] / 1e9, b / median[1] / 1e9, b / median[2] / 1e9,
                    median[0] / median[1], median[2] / median[1]);
        if (csv.is_open()) {
          csv << bytes << ",allreduce_host_huge,," << b / median[0] / 1e9 << ",\n"
              << bytes << ",allreduce_clbuf,," << b / median[1] / 1e9 << ",\n"
              << bytes << ",allreduce_naive,," << b / median[2] / 1e9 << ",\n";
        }
      }
    }
    if (rank == 0 && !smoke) {
      std::cout << "pinned staging memory: peak " << comm.peak_pinned_bytes() << " B in use, "
                << comm.pinned_bytes() << " B allocated at the end\n";
    }
  } catch (const std::exception& e) {
    std::cerr << "rank " << rank << ": " << e.what() << "\n";
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return status;
}
