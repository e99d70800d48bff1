// SPDX-License-Identifier: MIT
// What tracing costs (issue 37): the seed's round trip (1000 float32 into a fresh buffer and back)
// and a staged transfer (a pageable upload and download of 64 MiB through pinned chunks, forced
// with the discrete memory model) on managers that do not trace and on managers that trace to a
// file, interleaved in one process on one device. Each case has three managers alike but for
// tracing: "off" (A), "off" again (B: the A/A control, which shows the noise of the machine) and
// "on"; each round runs the case once on each of them, in an order that rotates, so that drift
// hits all alike. Reported: median, quartiles and mean per manager, and the ratios on / off and
// off B / off A of the medians and of the means.
//
//   trace_cost [--rounds N (default 20000; staged: N / 200, at least 20)] [--mib M (default 64)]
//              [--device SELECTOR] [--trace FILE (default /tmp/clbuf_trace_cost.json)]
#include <clbuf/clbuf.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(q * static_cast<double>(v.size() - 1))];
}

double mean(const std::vector<double>& v) {
  double sum = 0;
  for (const double x : v) sum += x;
  return sum / static_cast<double>(v.size());
}

struct Side {
  const char* name;
  std::unique_ptr<clbuf::BufferManager> manager;
  std::vector<double> us;
};

/// Runs `work` on each side `rounds` times, interleaved (the order rotates each round), after a
/// warm-up; prints each side and the ratios.
void measure(const char* title, std::vector<Side>& sides, int rounds,
             const std::function<void(clbuf::BufferManager&, int)>& work) {
  const int warmup = std::max(rounds / 20, 5);
  for (int r = -warmup; r < rounds; ++r) {
    for (std::size_t k = 0; k < sides.size(); ++k) {
      Side& side = sides[(k + static_cast<std::size_t>(r + warmup)) % sides.size()];
      const auto t0 = Clock::now();
      work(*side.manager, r);
      const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
      if (r >= 0) side.us.push_back(us);
    }
  }
  std::printf("# %s, %d rounds; microseconds\n", title, rounds);
  std::printf("%-10s %12s %12s %12s %12s\n", "manager", "median", "p25", "p75", "mean");
  for (const Side& side : sides) {
    std::printf("%-10s %12.2f %12.2f %12.2f %12.2f\n", side.name, quantile(side.us, 0.5),
                quantile(side.us, 0.25), quantile(side.us, 0.75), mean(side.us));
  }
  // The mean counts what the median leaves out: the rare round that writes a full buffer out.
  const double a = quantile(sides[0].us, 0.5);
  const double am = mean(sides[0].us);
  std::printf(
      "median: on / off A %.3f, off B / off A %.3f; mean: on / off A %.3f, off B / off A "
      "%.3f\n\n",
      quantile(sides[2].us, 0.5) / a, quantile(sides[1].us, 0.5) / a, mean(sides[2].us) / am,
      mean(sides[1].us) / am);
}

std::vector<Side> sides_of(const std::string& device, clbuf::Options options,
                           const std::string& trace) {
  std::vector<Side> sides;
  options.trace_path.clear();
  sides.push_back({"off A", std::make_unique<clbuf::BufferManager>(device, options), {}});
  sides.push_back({"off B", std::make_unique<clbuf::BufferManager>(device, options), {}});
  options.trace_path = trace;
  sides.push_back({"on", std::make_unique<clbuf::BufferManager>(device, options), {}});
  return sides;
}

void check(bool same, const char* what) {
  if (!same) {
    std::fprintf(stderr, "trace_cost: %s: wrong bytes\n", what);
    std::exit(1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 20000;
  std::size_t mib = 64;
  std::string device;
  std::string trace = "/tmp/clbuf_trace_cost.json";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--rounds") rounds = std::max(std::atoi(argv[i + 1]), 1);
    if (a == "--mib") mib = static_cast<std::size_t>(std::max(std::atoi(argv[i + 1]), 1));
    if (a == "--device") device = argv[i + 1];
    if (a == "--trace") trace = argv[i + 1];
  }
  if (std::getenv("CLBUF_TRACE") != nullptr) {
    std::fprintf(stderr, "trace_cost: unset CLBUF_TRACE (it would trace the \"off\" managers)\n");
    return 2;
  }
  try {
    std::vector<float> seed(1000);
    for (std::size_t i = 0; i < seed.size(); ++i) seed[i] = static_cast<float>(i) * 0.5f + 1;
    const auto round_trip = [&](clbuf::BufferManager& m, int r) {
      seed[static_cast<std::size_t>(r + 1000) % seed.size()] += 1.0f;  // new bytes every round
      check(m.download(m.upload(seed)) == seed, "seed");
    };
    // The host model where the device is a CPU device (PoCL), and the discrete one everywhere.
    const bool cpu = clbuf::BufferManager(device).device().type == clbuf::DeviceType::cpu;
    std::vector<clbuf::MemoryModel> models{clbuf::MemoryModel::discrete};
    if (cpu) models.insert(models.begin(), clbuf::MemoryModel::host);
    for (const clbuf::MemoryModel model : models) {
      clbuf::Options options;
      options.memory = model;
      std::vector<Side> sides = sides_of(device, options, trace);
      const std::string title = "seed round trip, " + sides[0].manager->device().name + " (" +
                                clbuf::to_string(model) + " memory)";
      measure(title.c_str(), sides, rounds, round_trip);
    }
    clbuf::Options options;
    options.memory = clbuf::MemoryModel::discrete;  // PoCL: the staged paths
    std::vector<Side> sides = sides_of(device, options, trace);
    const std::size_t n = mib * (std::size_t{1} << 20) / sizeof(float);
    std::vector<float> data(n, 1.5f), back(n);
    std::vector<clbuf::DeviceBuffer<float>> buffers;
    for (Side& side : sides) buffers.push_back(side.manager->allocate<float>(n));
    const auto staged = [&](clbuf::BufferManager& m, int r) {
      data[static_cast<std::size_t>(r + 1000) % n] += 1.0f;
      const std::size_t k = static_cast<std::size_t>(
          std::find_if(sides.begin(), sides.end(),
                       [&](const Side& s) { return s.manager.get() == &m; }) -
          sides.begin());
      m.upload(buffers[k], data);
      m.download(buffers[k], back.data(), n);
    };
    const std::string title =
        "staged upload + download of " + std::to_string(mib) + " MiB, discrete memory";
    measure(title.c_str(), sides, std::max(rounds / 200, 20), staged);
    check(back == data, "staged");
    for (const Side& side : sides) {
      const clbuf::TransferStats stats = side.manager->stats();
      if (stats.upload.paths.staged == 0 || stats.download.paths.staged == 0) {
        std::fprintf(stderr, "trace_cost: %s: the transfers were not staged\n", side.name);
        return 1;
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "trace_cost: %s\n", e.what());
    return 1;
  }
  return 0;
}
