// SPDX-License-Identifier: MIT
// bench/files_bench (issue 44): .npy files to and from device memory, ratios measured in one run.
//   load:  manager.load_npy<float>(path)                        (pinned chunks, pipelined)
//   2pass: read the whole file into a std::vector, then manager.upload(vector)  (the usual way)
//   cat:   read the file into a 1 MiB buffer and drop it          (the storage ceiling)
//   save:  manager.save_npy(path, buffer)                        (temporary file, fsync, rename)
//   write: download into a vector, write() it to a new file, fsync (the same bytes, write alone)
//   ckpt:  clbuf::Checkpoint::save of the buffer                  (save + CRC32C + manifest)
// Each on the host memory model (PoCL's own memory) and the discrete model (pinned chunks), with
// the file in the page cache ("warm") and, for the reads, evicted first by
// posix_fadvise(POSIX_FADV_DONTNEED) after an fsync ("cold"). Medians of --reps runs; the
// ratios are the figures to read (a shared 2-core machine's absolute numbers move).
//   files_bench [--mib 64,256] [--reps 5] [--dir /tmp] [--smoke]
#include <clbuf/checkpoint.hpp>
#include <clbuf/clbuf.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double seconds(const std::function<void()>& work) {
  const auto start = std::chrono::steady_clock::now();
  work();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void evict(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

void cat(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  std::vector<char> block(std::size_t{1} << 20);
  while (::read(fd, block.data(), block.size()) > 0) {
  }
  ::close(fd);
}

std::vector<float> read_whole(const std::string& path, std::size_t count) {
  const clbuf::NpyHeader header = clbuf::read_npy_header(path);
  std::vector<float> data(count);
  const int fd = ::open(path.c_str(), O_RDONLY);
  std::size_t done = 0;
  char* out = reinterpret_cast<char*>(data.data());
  while (done < count * sizeof(float)) {
    const ssize_t got = ::pread(fd, out + done, count * sizeof(float) - done,
                                static_cast<off_t>(header.data_offset + done));
    if (got <= 0) break;
    done += static_cast<std::size_t>(got);
  }
  ::close(fd);
  return data;
}

/// write() and fsync of a new file (as save_npy's temporary file is new).
void write_fsync(const std::string& path, const std::vector<float>& data) {
  ::unlink(path.c_str());
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
  const char* in = reinterpret_cast<const char*>(data.data());
  std::size_t done = 0;
  while (done < data.size() * sizeof(float)) {
    const ssize_t put = ::write(fd, in + done, data.size() * sizeof(float) - done);
    if (put <= 0) break;
    done += static_cast<std::size_t>(put);
  }
  ::fsync(fd);
  ::close(fd);
}

void run(clbuf::MemoryModel model, std::size_t mib, int reps, const std::string& dir) {
  clbuf::Options options;
  options.memory = model;
  clbuf::BufferManager manager("", options);
  const std::size_t count = (mib << 20) / sizeof(float);
  std::vector<float> data(count);
  for (std::size_t i = 0; i < count; ++i) data[i] = static_cast<float>(i % 1000);
  auto buffer = manager.upload(data);
  const std::string path = dir + "/files_bench.npy";
  const std::string plain = dir + "/files_bench.raw";
  const std::string folder = dir + "/files_bench_ckpt";
  manager.save_npy(path, buffer);
  clbuf::Checkpoint checkpoint(manager, folder);
  checkpoint.add("u", buffer);
  std::vector<double> load_warm, load_cold, two_warm, two_cold, cat_warm, cat_cold, save, write,
      ckpt;
  {  // untimed: the pool's first buffer of this size (fresh memory's first touch) is not the file's
    auto first = manager.load_npy<float>(path);
    manager.finish();
  }
  for (int r = 0; r < reps; ++r) {
    cat(path);
    cat_warm.push_back(seconds([&] { cat(path); }));
    load_warm.push_back(seconds([&] {
      auto b = manager.load_npy<float>(path);
      manager.finish();
    }));
    two_warm.push_back(seconds([&] {
      auto b = manager.upload(read_whole(path, count));
      manager.finish();
    }));
    evict(path);
    cat_cold.push_back(seconds([&] { cat(path); }));
    evict(path);
    load_cold.push_back(seconds([&] {
      auto b = manager.load_npy<float>(path);
      manager.finish();
    }));
    evict(path);
    two_cold.push_back(seconds([&] {
      auto b = manager.upload(read_whole(path, count));
      manager.finish();
    }));
    save.push_back(seconds([&] { manager.save_npy(path, buffer); }));
    write.push_back(seconds([&] { write_fsync(plain, manager.download(buffer)); }));
    ckpt.push_back(seconds([&] { checkpoint.save(); }));
  }
  const double gb = static_cast<double>(count * sizeof(float)) / 1e9;
  const auto rate = [&](const std::vector<double>& t) { return gb / median(t); };
  std::printf(
      "%-8s %5zu MiB  warm: load %6.2f GB/s  2-pass %6.2f  cat %6.2f  | load/2-pass %.2f"
      "  load/cat %.2f\n",
      clbuf::to_string(model), mib, rate(load_warm), rate(two_warm), rate(cat_warm),
      median(two_warm) / median(load_warm), median(cat_warm) / median(load_warm));
  std::printf(
      "%-8s %5zu MiB  cold: load %6.2f GB/s  2-pass %6.2f  cat %6.2f  | load/2-pass %.2f"
      "  load/cat %.2f\n",
      clbuf::to_string(model), mib, rate(load_cold), rate(two_cold), rate(cat_cold),
      median(two_cold) / median(load_cold), median(cat_cold) / median(load_cold));
  std::printf(
      "%-8s %5zu MiB  save %6.2f GB/s  write+fsync %6.2f  checkpoint %6.2f  | "
      "save/write %.2f  checkpoint/write %.2f\n",
      clbuf::to_string(model), mib, rate(save), rate(write), rate(ckpt),
      median(write) / median(save), median(write) / median(ckpt));
  std::remove(path.c_str());
  std::remove(plain.c_str());
  clbuf::detail::remove_tree("files_bench", folder);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::size_t> sizes = {64, 256};
  int reps = 5;
  std::string dir = "/tmp";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--smoke") {
      sizes = {4};
      reps = 1;
    } else if (arg == "--reps" && i + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++i]));
    } else if (arg == "--dir" && i + 1 < argc) {
      dir = argv[++i];
    } else if (arg == "--mib" && i + 1 < argc) {
      sizes.clear();
      std::string list = argv[++i];
      for (std::size_t at = 0; at < list.size();) {
        const std::size_t comma = std::min(list.find(',', at), list.size());
        sizes.push_back(std::strtoull(list.substr(at, comma - at).c_str(), nullptr, 10));
        at = comma + 1;
      }
    } else {
      std::fprintf(stderr, "usage: files_bench [--mib 64,256] [--reps 5] [--dir D] [--smoke]\n");
      return 2;
    }
  }
  std::printf(
      "ratios > 1: clbuf's call is faster (load/2-pass, save/write), or the share of the "
      "storage ceiling reached (load/cat)\n");
  for (std::size_t mib : sizes) {
    for (clbuf::MemoryModel model : {clbuf::MemoryModel::host, clbuf::MemoryModel::discrete}) {
      // The host path needs a CPU device (a GPU's manager refuses it): discrete alone there.
      if (model == clbuf::MemoryModel::host &&
          clbuf::BufferManager().device().type != clbuf::DeviceType::cpu) {
        continue;
      }
      run(model, mib, reps, dir);
    }
  }
  return 0;
}
