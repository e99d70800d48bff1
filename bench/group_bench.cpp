// SPDX-License-Identifier: MIT
// A DeviceGroup's moves against the same moves by hand, per device, with the group's own managers:
//   upload   group.upload(sharded, data)        vs  manager(i).upload(shard(i), part i) in turn
//   download group.download(sharded, out)       vs  manager(i).download(shard(i), part i) in turn
//   scatter  group.scatter(data) (new buffers)  vs  manager(i).upload(part i) (new buffers) in turn
//   halo     ShardedHalo::exchange(field)       vs  manager(to).copy_from(manager(from), ...) of
//            each ghost layer in turn (views of the same shards)
// for a context per platform (device copies between the group's devices) and a context per
// device (pinned host memory between them). Interleaved repetitions (rotating who goes first),
// medians; ratio = group time / by-hand time (below 1: the group is faster). Every method's
// result is checked byte-exactly once per size (exit status 1 on a mismatch); no time is asserted.
//   group_bench [--sizes 64K,1M,16M,64M] [--devices SEL] [--memory host|discrete] [--reps N]
// Defaults: every device of the type clbuf picks ("all" devices on PoCL with POCL_DEVICES), the
// automatic memory model, 9 repetitions. The halo's planes are 1/16 of a shard's elements.
#include <clbuf/clbuf.hpp>

#include "size_list.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
using Word = std::uint32_t;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::string size_label(std::size_t bytes) {
  if (bytes >= (1U << 20) && bytes % (1U << 20) == 0) return std::to_string(bytes >> 20) + "M";
  if (bytes >= (1U << 10) && bytes % (1U << 10) == 0) return std::to_string(bytes >> 10) + "K";
  return std::to_string(bytes);
}

struct Pair {
  std::string name;
  std::function<void()> group;
  std::function<void()> hand;
  std::function<bool()> check;  // after one run of each: both gave the expected bytes
};

/// Times each pair's two methods interleaved (rotating which goes first): medians in ms.
void measure(const std::vector<Pair>& pairs, std::size_t reps, const std::string& size,
             const std::string& contexts, int& failures) {
  for (const Pair& pair : pairs) {
    pair.group();
    pair.hand();
    if (!pair.check()) {
      std::fprintf(stderr, "MISMATCH: %s %s %s\n", size.c_str(), contexts.c_str(),
                   pair.name.c_str());
      ++failures;
    }
    std::vector<double> group_ms, hand_ms;
    for (std::size_t rep = 0; rep < reps; ++rep) {
      for (int turn = 0; turn < 2; ++turn) {
        const bool group_now = (turn == 0) == (rep % 2 == 0);
        const Clock::time_point start = Clock::now();
        (group_now ? pair.group : pair.hand)();
        const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
        (group_now ? group_ms : hand_ms).push_back(ms);
      }
    }
    const double g = median(group_ms), h = median(hand_ms);
    std::printf("%-6s %-9s %-9s %12.4f %12.4f %7.2f\n", size.c_str(), contexts.c_str(),
                pair.name.c_str(), g, h, g / h);
    std::fflush(stdout);
  }
}

/// The four pairs for `words` elements on `group`.
void run_size(clbuf::DeviceGroup& group, std::size_t words, std::size_t reps,
              const std::string& contexts, int& failures) {
  std::vector<Word> data(words), out(words, 0), hand_out(words, 0);
  for (std::size_t i = 0; i < words; ++i) data[i] = static_cast<Word>(i * 2654435761U + 1);
  const std::size_t unit = std::max<std::size_t>(1, words / (16 * group.size()));
  const std::size_t field_words = words / unit * unit;
  clbuf::ShardedBuffer<Word> sharded = group.scatter(data);
  clbuf::ShardedBuffer<Word> field =
      group.scatter(data.data(), field_words, clbuf::Partition::even(unit), 1);
  clbuf::ShardedHalo<Word> halo(group, field);
  std::vector<clbuf::DeviceBuffer<Word>> made(group.size());
  auto part = [&](std::size_t i) { return data.data() + sharded.offset(i); };
  std::vector<Pair> pairs;
  pairs.push_back({"upload", [&] { group.upload(sharded, data); },
                   [&] {
                     for (std::size_t i = 0; i < group.size(); ++i) {
                       group.manager(i).upload(sharded.shard(i), part(i), sharded.count(i));
                     }
                   },
                   [&] { return group.gather(sharded) == data; }});
  pairs.push_back({"download", [&] { group.download(sharded, out.data(), out.size()); },
                   [&] {
                     for (std::size_t i = 0; i < group.size(); ++i) {
                       group.manager(i).download(
                           sharded.shard(i), hand_out.data() + sharded.offset(i), sharded.count(i));
                     }
                   },
                   [&] { return out == data && hand_out == data; }});
  pairs.push_back({"scatter", [&] { sharded = group.scatter(data); },
                   [&] {
                     for (std::size_t i = 0; i < group.size(); ++i) {
                       made[i] = group.manager(i).upload(part(i), sharded.count(i));
                     }
                   },
                   [&] {
                     bool same = group.gather(sharded) == data;
                     for (std::size_t i = 0; i < group.size(); ++i) {
                       const std::vector<Word> back = group.manager(i).download(made[i]);
                       same = same && std::equal(back.begin(), back.end(), part(i));
                     }
                     return same;
                   }});
  pairs.push_back(
      {"halo", [&] { halo.exchange(field); },
       [&] {
         for (const clbuf::ShardCopy& c : halo.copies()) {
           clbuf::BufferManager& from = group.manager(c.from);
           clbuf::BufferManager& to = group.manager(c.to);
           clbuf::DeviceBuffer<Word> src = from.view(field.shard(c.from), c.from_offset, c.count);
           clbuf::DeviceBuffer<Word> dst = to.view(field.shard(c.to), c.to_offset, c.count);
           to.copy_from(from, src, dst);
         }
       },
       [&] {
         for (std::size_t i = 0; i < field.shards(); ++i) {
           const std::vector<Word> local = group.manager(i).download(field.shard(i));
           for (std::size_t k = 0; k < local.size(); ++k) {
             const std::size_t global = field.offset(i) + k;
             const bool inside = global >= field.ghost() && global - field.ghost() < field_words;
             if (inside && local[k] != data[global - field.ghost()]) return false;
           }
         }
         return true;
       }});
  measure(pairs, reps, size_label(words * sizeof(Word)), contexts, failures);
}

}  // namespace

int main(int argc, char** argv) try {
  std::vector<std::size_t> sizes;
  std::string devices;
  clbuf::Options options;
  std::size_t reps = 9;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--sizes") {
      sizes = bench::parse_sizes(value);
    } else if (flag == "--devices") {
      devices = value;
    } else if (flag == "--memory") {
      options.memory =
          value == "discrete" ? clbuf::MemoryModel::discrete : clbuf::MemoryModel::host;
    } else if (flag == "--reps") {
      reps = std::max<std::size_t>(3, static_cast<std::size_t>(std::stoul(value)));
    } else {
      std::fprintf(
          stderr,
          "usage: group_bench [--sizes ...] [--devices SEL] [--memory host|discrete] [--reps N]\n");
      return 2;
    }
  }
  if (sizes.empty()) sizes = {64 << 10, 1 << 20, 16 << 20, 64 << 20};
  int failures = 0;
  std::printf(
      "# ratio = group median / by-hand median (below 1: the group is faster); ms per move\n");
  std::printf("%-6s %-9s %-9s %12s %12s %7s\n", "size", "contexts", "move", "group ms", "hand ms",
              "ratio");
  for (clbuf::ContextSharing sharing :
       {clbuf::ContextSharing::per_platform, clbuf::ContextSharing::per_device}) {
    clbuf::DeviceGroup group(devices, options, sharing);
    const std::string contexts =
        sharing == clbuf::ContextSharing::per_platform ? "shared" : "separate";
    std::printf("# %s: %zu devices (%s, %s)\n", contexts.c_str(), group.size(),
                group.manager(0).device().name.c_str(),
                clbuf::to_string(group.manager(0).memory_model()));
    for (std::size_t bytes : sizes) run_size(group, bytes / sizeof(Word), reps, contexts, failures);
  }
  if (failures > 0) {
    std::fprintf(stderr, "group_bench: %d result(s) differ\n", failures);
    return 1;
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "group_bench: %s\n", e.what());
  return 1;
}
