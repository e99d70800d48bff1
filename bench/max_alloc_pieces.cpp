// SPDX-License-Identifier: MIT
// An array larger than the device's max allocation, held as pieces on one device (issue 43):
// a DeviceGroup of the default device scatters max allocation + --extra-mib MiB bytes (its
// default cap on a shard is the max allocation, so the part is cut into pieces), gathers it back
// and compares every byte. Prints CL_DEVICE_MAX_MEM_ALLOC_SIZE, the device's memory, the shards
// and the times. Usage: max_alloc_pieces [--extra-mib N] [--cap-mib N (a smaller cap, for PoCL)]
#include <clbuf/clbuf.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  std::size_t extra_mib = 64, cap_mib = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string arg = argv[i];
    if (arg == "--extra-mib") extra_mib = std::strtoull(argv[i + 1], nullptr, 10);
    if (arg == "--cap-mib") cap_mib = std::strtoull(argv[i + 1], nullptr, 10);
  }
  clbuf::DeviceGroup group("0:0");
  const clbuf::DeviceInfo& device = group.manager(0).device();
  const std::size_t cap = cap_mib != 0 ? cap_mib << 20 : device.max_alloc_bytes;
  const std::size_t bytes = cap + (extra_mib << 20);
  std::printf("device: %s, global memory %llu bytes, CL_DEVICE_MAX_MEM_ALLOC_SIZE %llu bytes\n",
              device.name.c_str(), static_cast<unsigned long long>(device.global_mem_bytes),
              static_cast<unsigned long long>(device.max_alloc_bytes));
  std::vector<unsigned char> data(bytes);
  for (std::size_t i = 0; i < bytes; ++i)
    data[i] = static_cast<unsigned char>((i * 31 + i / 4093) & 0xff);
  const auto t0 = std::chrono::steady_clock::now();
  clbuf::ShardedBuffer<unsigned char> x =
      group.scatter(data, clbuf::Partition::even().max_shard_bytes(cap_mib << 20));
  const auto t1 = std::chrono::steady_clock::now();
  const std::vector<unsigned char> back = group.gather(x);
  const auto t2 = std::chrono::steady_clock::now();
  std::printf("array %zu bytes (%.2f x the max allocation) in %zu shards:", bytes,
              static_cast<double>(bytes) / static_cast<double>(device.max_alloc_bytes), x.shards());
  for (std::size_t i = 0; i < x.shards(); ++i) std::printf(" %zu", x.count(i));
  const bool exact =
      back.size() == data.size() && std::memcmp(back.data(), data.data(), bytes) == 0;
  std::printf("\nscatter %.2f s, gather %.2f s; exact: %s\n",
              std::chrono::duration<double>(t1 - t0).count(),
              std::chrono::duration<double>(t2 - t1).count(), exact ? "yes" : "NO");
  return exact ? 0 : 1;
}
