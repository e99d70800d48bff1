// SPDX-License-Identifier: MIT
// Copies between two devices or contexts, in one process: BufferManager::copy_from() from
// manager A to manager B against the same copy by hand in plain CLHPP (through a pageable
// std::vector, and through pinned memory of A's context mapped once), and copy_from_async() in
// both directions at once. Interleaved repetitions, medians, GB/s (1e9 bytes/s); every method's
// result is checked byte-exactly once per size (exit status 1 on a mismatch). No time is
// asserted. Two managers made from selectors always have separate contexts, so even one device
// twice takes the cross-context path.
//   cross_device [--sizes 1M,16M,64M,256M,1G] [--from SEL] [--to SEL] [--reps N] [--csv FILE]
// Defaults: --from 0:0, --to 0:1 when platform 0 has two devices (else 0:0), --reps 5 (at least 3).
#include <clbuf/clbuf.hpp>

#include "size_list.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
using Byte = unsigned char;
constexpr std::size_t KiB = std::size_t{1} << 10;
constexpr std::size_t MiB = std::size_t{1} << 20;
constexpr std::size_t GiB = std::size_t{1} << 30;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::string size_label(std::size_t bytes) {
  if (bytes >= GiB && bytes % GiB == 0) return std::to_string(bytes / GiB) + "G";
  if (bytes >= MiB && bytes % MiB == 0) return std::to_string(bytes / MiB) + "M";
  if (bytes >= KiB && bytes % KiB == 0) return std::to_string(bytes / KiB) + "K";
  return std::to_string(bytes);
}

// Depends on the position in the low and the high bits, so a chunk in the wrong place shows.
void fill_pattern(std::vector<Byte>& data, unsigned seed) {
  for (std::size_t i = 0; i < data.size(); ++i) {
    data[i] = static_cast<Byte>((i >> 12) * 131u + i * 7u + seed);
  }
}

std::string describe(const clbuf::BufferManager& manager) {
  const clbuf::DeviceInfo& info = manager.device();
  return info.name + " [" + std::to_string(info.platform_index) + ":" +
         std::to_string(info.device_index) + ", " + info.platform + ", " +
         clbuf::to_string(manager.memory_model()) + "]";
}

struct Row {
  std::string size;
  std::size_t bytes = 0;
  std::string method;
  double ms = 0;
  double gbps = 0;
  double ratio = 0;
};

struct Method {
  std::string name;
  std::function<void()> run;  // one copy, returns when it is complete
};

void usage() {
  std::fprintf(stderr,
               "usage: cross_device [--sizes 1M,16M,64M,256M,1G] [--from SEL] [--to SEL] "
               "[--reps N (>= 3)] [--csv FILE]\n");
}

}  // namespace

int main(int argc, char** argv) try {
  std::vector<std::size_t> sizes;
  std::string from, to, csv;
  std::size_t reps = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      usage();
      return 0;
    }
    if (i + 1 >= argc) {
      usage();
      return 2;
    }
    const std::string value = argv[++i];
    if (flag == "--sizes") {
      sizes = bench::parse_sizes(value);
    } else if (flag == "--from") {
      from = value;
    } else if (flag == "--to") {
      to = value;
    } else if (flag == "--reps") {
      reps = static_cast<std::size_t>(std::stoul(value));
    } else if (flag == "--csv") {
      csv = value;
    } else {
      usage();
      return 2;
    }
  }
  if (sizes.empty()) sizes = {MiB, 16 * MiB, 64 * MiB, 256 * MiB, GiB};
  if (reps < 3) {
    std::fprintf(stderr, "cross_device: --reps %zu raised to the minimum, 3\n", reps);
    reps = 3;
  }
  if (from.empty()) from = "0:0";
  if (to.empty()) {
    std::size_t on_platform0 = 0;
    for (const clbuf::DeviceInfo& info : clbuf::list_devices()) {
      if (info.platform_index == 0) ++on_platform0;
    }
    to = on_platform0 >= 2 ? "0:1" : "0:0";
  }

  clbuf::BufferManager a(from);
  clbuf::BufferManager b(to);
  const bool same_device = a.device().platform_index == b.device().platform_index &&
                           a.device().device_index == b.device().device_index;
  std::printf("# A (--from %s): %s\n", from.c_str(), describe(a).c_str());
  std::printf("# B (--to %s): %s\n", to.c_str(), describe(b).c_str());
  std::printf(
      "# separate contexts (cross-context path)%s; %zu reps interleaved, medians; "
      "GB/s = 1e9 B/s; ratio = GB/s / hand_pageable GB/s\n",
      same_device ? ", one device twice" : "", reps);
  std::printf(
      "# both_*: copy_from_async A->B and B->A started together; both_total counts the "
      "bytes of both over the time until both completed\n");
  std::printf("%-6s %-16s %12s %10s %8s\n", "size", "method", "median ms", "GB/s", "ratio");
  std::fflush(stdout);

  std::vector<Row> rows;
  int failures = 0;
  cl::CommandQueue qa = a.queue();
  cl::CommandQueue qb = b.queue();
  for (const std::size_t n : sizes) {
    if (n == 0) continue;
    std::vector<Byte> pattern_a(n), pattern_b(n), scratch(n);
    fill_pattern(pattern_a, 1);
    fill_pattern(pattern_b, 2);
    clbuf::DeviceBuffer<Byte> src_a = a.upload(pattern_a);
    clbuf::DeviceBuffer<Byte> src_b = b.upload(pattern_b);
    clbuf::DeviceBuffer<Byte> dst_b = b.allocate<Byte>(n);
    clbuf::DeviceBuffer<Byte> dst_a = a.allocate<Byte>(n);
    // Pinned memory by hand: a CL_MEM_ALLOC_HOST_PTR buffer of A's context, mapped once.
    cl::Buffer pinned(a.context(), CL_MEM_ALLOC_HOST_PTR | CL_MEM_READ_WRITE, n);
    Byte* staging =
        static_cast<Byte*>(qa.enqueueMapBuffer(pinned, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0, n));

    double both_ab = 0, both_ba = 0;  // the last both-directions run, per direction
    const std::vector<Method> methods = {
        {"hand_pageable",
         [&] {
           qa.enqueueReadBuffer(src_a.native(), CL_TRUE, 0, n, scratch.data());
           qb.enqueueWriteBuffer(dst_b.native(), CL_TRUE, 0, n, scratch.data());
         }},
        {"hand_pinned",
         [&] {
           qa.enqueueReadBuffer(src_a.native(), CL_TRUE, 0, n, staging);
           qb.enqueueWriteBuffer(dst_b.native(), CL_TRUE, 0, n, staging);
         }},
        {"copy_from", [&] { b.copy_from(a, src_a, dst_b); }},
        {"copy_from_async", [&] { b.copy_from_async(a, src_a, dst_b).get(); }},
        {"both_directions",
         [&] {
           const Clock::time_point start = Clock::now();
           clbuf::Future<void> ab = b.copy_from_async(a, src_a, dst_b);
           clbuf::Future<void> ba = a.copy_from_async(b, src_b, dst_a);
           both_ab = both_ba = -1;
           while (both_ab < 0 || both_ba < 0) {
             if (both_ab < 0 && ab.ready()) both_ab = ms_since(start);
             if (both_ba < 0 && ba.ready()) both_ba = ms_since(start);
             if (both_ab < 0 || both_ba < 0) std::this_thread::yield();
           }
           ab.get();  // rethrows a failure of either copy
           ba.get();
         }},
    };

    // A checked, untimed run of each method (also the warm-up): the destinations are set to
    // another value first, so a copy that did nothing shows.
    auto check = [&](clbuf::BufferManager& manager, clbuf::DeviceBuffer<Byte>& dst,
                     const std::vector<Byte>& expected, const std::string& what) {
      manager.download(dst, scratch.data(), n);
      if (std::memcmp(scratch.data(), expected.data(), n) != 0) {
        std::size_t at = 0;
        while (scratch[at] == expected[at]) ++at;
        std::fprintf(stderr, "MISMATCH: %s, %s: first wrong byte at %zu (%u, expected %u)\n",
                     size_label(n).c_str(), what.c_str(), at, unsigned{scratch[at]},
                     unsigned{expected[at]});
        ++failures;
      }
    };
    for (const Method& method : methods) {
      b.fill(dst_b, Byte{0x5A});
      a.fill(dst_a, Byte{0x5A});
      method.run();
      check(b, dst_b, pattern_a, method.name + " A->B");
      if (method.name == "both_directions") check(a, dst_a, pattern_b, method.name + " B->A");
    }

    std::vector<std::vector<double>> times(methods.size() + 2);  // + both_a_to_b, both_b_to_a
    for (std::size_t rep = 0; rep < reps; ++rep) {
      for (std::size_t m = 0; m < methods.size(); ++m) {
        a.finish();
        b.finish();
        const Clock::time_point start = Clock::now();
        methods[m].run();
        times[m].push_back(ms_since(start));
      }
      times[methods.size()].push_back(both_ab);
      times[methods.size() + 1].push_back(both_ba);
    }
    qa.enqueueUnmapMemObject(pinned, staging);
    qa.finish();

    std::vector<std::string> names;
    for (const Method& method : methods) names.push_back(method.name);
    names.back() = "both_total";
    names.push_back("both_a_to_b");
    names.push_back("both_b_to_a");
    const double bytes = static_cast<double>(n);
    const double base = bytes / median(times[0]) / 1e6;  // hand_pageable GB/s
    for (std::size_t m = 0; m < names.size(); ++m) {
      Row row;
      row.size = size_label(n);
      row.bytes = n;
      row.method = names[m];
      row.ms = median(times[m]);
      row.gbps = (names[m] == "both_total" ? 2 * bytes : bytes) / row.ms / 1e6;
      row.ratio = row.gbps / base;
      std::printf("%-6s %-16s %12.4f %10.2f %8.2f\n", row.size.c_str(), row.method.c_str(), row.ms,
                  row.gbps, row.ratio);
      rows.push_back(row);
    }
    std::fflush(stdout);
    a.trim_pool();
    b.trim_pool();
  }

  if (!csv.empty()) {
    std::ofstream file(csv);
    file << "size,bytes,method,median_ms,gb_s,ratio_to_hand_pageable\n";
    for (const Row& row : rows) {
      file << row.size << ',' << row.bytes << ',' << row.method << ',' << row.ms << ',' << row.gbps
           << ',' << row.ratio << '\n';
    }
    if (!file) {
      std::fprintf(stderr, "cross_device: cannot write %s\n", csv.c_str());
      return 1;
    }
  }
  if (failures > 0) {
    std::fprintf(stderr, "cross_device: %d result(s) differ\n", failures);
    return 1;
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "cross_device: %s\n", e.what());
  return 1;
}
