// SPDX-License-Identifier: MIT
// Which release arrangements of overlapping sub-buffers survive NVIDIA's OpenCL driver? Plain
// OpenCL, no clbuf (issue 38). Companion of ../shared/repro/nvidia_overlapping_subbuffers.cpp,
// which shows the crash: overlapping sub-buffers, used while alive together, then released,
// SIGSEGV inside clReleaseMemObject. Each variant runs 3 times, each in a forked child (60 s
// alarm); the child's exit status or signal is printed.
//
//   g++ -O2 -std=c++17 docs/repro/nvidia_subbuffer_release.cpp -lOpenCL -pthread -o release
//   ./release [VARIANTS [mib]]      (letters; default: all)
//
// Unless a variant says otherwise: a 32 MiB buffer written from the host; five sub-buffers of it
// (CL_MEM_READ_WRITE) at 0, 4096, 12288, 27 MiB and 28672 bytes, 1 to 16 MiB long, all
// overlapping; each used (a blocking read of all its bytes, checked; with `mib`, of its first
// MiB only) while all are alive; then released, then the parent. The variants of the first file
// (questions of issue 38's brief):
//   G  baseline: released in creation order
//   H  each released right after its own use (clFinish first): one used one alive at a time
//   R  released in reverse creation order
//   P  the parent released first, then the sub-buffers in creation order
//   F  clFinish, then released in creation order
//   S  used as a kernel argument (a kernel copies the first MiB out), creation order
//   K  the queue and context released first, then the sub-buffers in creation order
//   N  the sub-buffers made CL_MEM_READ_ONLY, creation order
// Added for clbuf's design (what an owner of the sub-buffers could do):
//   W  as R, each also written (blocking write of all its bytes) after its read
//   O  used in the order 2 0 4 1 3, released in reverse creation order (4 3 2 1 0)
//   U  used in the order 2 0 4 1 3, released in reverse use order (3 1 4 0 2)
//   L  creation, use and release interleaved as a stack: made and used 0 1, released 1, made
//      and used 2 3, released 3 2, made and used 4, released 4 0
//   I  five sub-buffers of one region (4096, 8 MiB): identical, creation order
//   J  as I, reverse creation order
//   M  two overlapping sub-buffers (0, 8 MiB and 4096, 8 MiB), both read, creation order
//   m  as M, reverse creation order
//   T  a blocking read of the whole parent after the uses, then creation order
//   Z  nested only (0, 1..5 MiB), creation order
//   Y  two parents, their sub-buffers made alternately (A0 B0 A1 B1 ..), all used; A's released
//      in reverse order, then B's in reverse order (each parent's own reverse order only)
//   X  as W on four threads at once, each with a parent of its own, ten rounds each
//   Q  the conformance suite's test_sub_buffers_overlapping: 16 CL_MEM_READ_ONLY sub-buffers at
//      random offsets and sizes (multiples of CL_DEVICE_MEM_BASE_ADDR_ALIGN), each read by a
//      blocking read or a kernel (at random), released in reverse creation order (as its
//      wrappers are destroyed), ten rounds
//   q  as Q, released in creation order
//   V  as R, the oldest read again after all the others (use order is not creation order)
//   D  three sub-buffers: 0 and 2 overlap (0, 8 MiB and 4096, 8 MiB), 1 is disjoint from both
//      (16 MiB, 8 MiB); released 1 2 0 (1 before the newer 2, which does not overlap it)
//
// Measured on an H100 (driver 580.159.04, 2026-12-06, with `mib`: each use read the first MiB
// only; bench/results/h100/2026-12-06-issue38/before/): q SIGSEGV 3 of 3, Q exit 0 3 of 3 (30
// rounds); every other variant exit 0, also G: reading only the first MiB of the five
// sub-buffers does not reach the crash (reading all of them does: A and G of the companion).
// The runs reading whole sub-buffers (the default) are prepared in run_after.sh there.
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

[[noreturn]] void die(const char* what, cl_int err) {
  std::printf("  %s failed: %d\n", what, err);
  std::fflush(stdout);
  _exit(2);
}

void ok(cl_int err, const char* what) {
  if (err != CL_SUCCESS) die(what, err);
}

struct Env {
  cl_device_id device = nullptr;
  cl_context context = nullptr;
  cl_command_queue queue = nullptr;
  cl_kernel copy = nullptr;  // copy(in, out): out[i] = in[i], bytes
  std::size_t align = 1;
};

Env open_env() {
  Env env;
  cl_platform_id platform = nullptr;
  ok(clGetPlatformIDs(1, &platform, nullptr), "clGetPlatformIDs");
  ok(clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 1, &env.device, nullptr), "clGetDeviceIDs");
  cl_int err = CL_SUCCESS;
  env.context = clCreateContext(nullptr, 1, &env.device, nullptr, nullptr, &err);
  ok(err, "clCreateContext");
  env.queue = clCreateCommandQueue(env.context, env.device, 0, &err);
  ok(err, "clCreateCommandQueue");
  cl_uint bits = 0;
  ok(clGetDeviceInfo(env.device, CL_DEVICE_MEM_BASE_ADDR_ALIGN, sizeof(bits), &bits, nullptr),
     "clGetDeviceInfo");
  env.align = bits / 8;
  const char* source =
      "__kernel void copy(__global const char* in, __global char* out) {"
      " size_t i = get_global_id(0); out[i] = in[i]; }";
  cl_program program = clCreateProgramWithSource(env.context, 1, &source, nullptr, &err);
  ok(err, "clCreateProgramWithSource");
  ok(clBuildProgram(program, 1, &env.device, "", nullptr, nullptr), "clBuildProgram");
  env.copy = clCreateKernel(program, "copy", &err);
  ok(err, "clCreateKernel");
  clReleaseProgram(program);
  return env;
}

cl_mem make_buffer(const Env& env, std::size_t bytes) {
  cl_int err = CL_SUCCESS;
  cl_mem buffer = clCreateBuffer(env.context, CL_MEM_READ_WRITE, bytes, nullptr, &err);
  ok(err, "clCreateBuffer");
  return buffer;
}

cl_mem make_sub(cl_mem parent, std::size_t offset, std::size_t bytes, cl_mem_flags flags) {
  const cl_buffer_region region{offset, bytes};
  cl_int err = CL_SUCCESS;
  cl_mem sub = clCreateSubBuffer(parent, flags, CL_BUFFER_CREATE_TYPE_REGION, &region, &err);
  ok(err, "clCreateSubBuffer");
  return sub;
}

bool first_mib_only = false;  // argument "mib": each use reads only the first MiB

// Reads `sub` (all of it, or its first MiB) by a blocking read or a kernel and compares the bytes
// with `expected`; returns 1 on a mismatch.
int read_and_check(const Env& env, cl_mem sub, std::size_t bytes, const char* expected,
                   bool kernel) {
  const std::size_t n = first_mib_only ? std::min<std::size_t>(bytes, 1 << 20) : bytes;
  std::vector<char> got(n);
  if (kernel) {
    cl_mem out = make_buffer(env, n);
    ok(clSetKernelArg(env.copy, 0, sizeof(cl_mem), &sub), "clSetKernelArg");
    ok(clSetKernelArg(env.copy, 1, sizeof(cl_mem), &out), "clSetKernelArg");
    ok(clEnqueueNDRangeKernel(env.queue, env.copy, 1, nullptr, &n, nullptr, 0, nullptr, nullptr),
       "clEnqueueNDRangeKernel");
    ok(clEnqueueReadBuffer(env.queue, out, CL_TRUE, 0, n, got.data(), 0, nullptr, nullptr),
       "clEnqueueReadBuffer");
    clReleaseMemObject(out);
  } else {
    ok(clEnqueueReadBuffer(env.queue, sub, CL_TRUE, 0, n, got.data(), 0, nullptr, nullptr),
       "clEnqueueReadBuffer");
  }
  return std::memcmp(got.data(), expected, n) != 0;
}

// Writes all of `sub` with `value` and records it in the host's copy of the parent.
void write_all(const Env& env, cl_mem sub, std::size_t offset, std::size_t bytes, char value,
               std::vector<char>& host) {
  std::vector<char> fresh(bytes, value);
  ok(clEnqueueWriteBuffer(env.queue, sub, CL_TRUE, 0, bytes, fresh.data(), 0, nullptr, nullptr),
     "clEnqueueWriteBuffer");
  std::memset(host.data() + offset, value, bytes);
}

std::vector<char> pattern(std::size_t bytes, unsigned salt) {
  std::vector<char> host(bytes);
  for (std::size_t i = 0; i < bytes; ++i) host[i] = static_cast<char>(i * 131 + 7 + salt);
  return host;
}

const std::size_t total = std::size_t{32} << 20;
const std::size_t mib = std::size_t{1} << 20;

struct Layout {
  std::vector<std::size_t> offsets{0, 4096, 12288, 27 * mib, 28672};
  std::vector<std::size_t> sizes{8 * mib, 8 * mib, 16 * mib + 4096, 5 * mib, mib};
};

// The five-sub-buffer variants, one parent: everything but L, Y, X, Q and q.
void five(const Env& env, char v, unsigned salt) {
  Layout layout;
  if (v == 'I' || v == 'J') {
    layout.offsets.assign(5, 4096);
    layout.sizes.assign(5, 8 * mib);
  }
  if (v == 'M' || v == 'm') {
    layout.offsets = {0, 4096};
    layout.sizes = {8 * mib, 8 * mib};
  }
  if (v == 'D') {
    layout.offsets = {0, 16 * mib, 4096};
    layout.sizes = {8 * mib, 8 * mib, 8 * mib};
  }
  if (v == 'Z') {
    layout.offsets.assign(5, 0);
    layout.sizes = {mib, 2 * mib, 3 * mib, 4 * mib, 5 * mib};
  }
  const int n = static_cast<int>(layout.offsets.size());
  std::vector<char> host = pattern(total, salt);
  cl_mem parent = make_buffer(env, total);
  ok(clEnqueueWriteBuffer(env.queue, parent, CL_TRUE, 0, total, host.data(), 0, nullptr, nullptr),
     "clEnqueueWriteBuffer");
  std::vector<cl_mem> subs(n);
  const cl_mem_flags flags = v == 'N' ? CL_MEM_READ_ONLY : CL_MEM_READ_WRITE;
  for (int i = 0; i < n; ++i) subs[i] = make_sub(parent, layout.offsets[i], layout.sizes[i], flags);
  std::vector<int> use_order;
  for (int i = 0; i < n; ++i) use_order.push_back(i);
  if (v == 'O' || v == 'U') use_order = {2, 0, 4, 1, 3};
  int bad = 0;
  for (int i : use_order) {
    bad += read_and_check(env, subs[i], layout.sizes[i], host.data() + layout.offsets[i], v == 'S');
    if (v == 'W') write_all(env, subs[i], layout.offsets[i], layout.sizes[i], char(i + 1), host);
    if (v == 'H') {
      clFinish(env.queue);
      clReleaseMemObject(subs[i]);
      subs[i] = nullptr;
    }
  }
  if (v == 'V') bad += read_and_check(env, subs[0], layout.sizes[0], host.data(), false);
  std::vector<int> release_order;
  for (int i = 0; i < n; ++i) release_order.push_back(i);
  if (v == 'D') release_order = {1, 2, 0};
  if (v == 'V' || v == 'W' || v == 'O' || v == 'J' || v == 'm') {
    std::reverse(release_order.begin(), release_order.end());
  }
  if (v == 'U') release_order = {3, 1, 4, 0, 2};
  if (v == 'T') bad += read_and_check(env, parent, total, host.data(), false);
  std::printf("  variant %c: %d mismatches; releasing\n", v, bad);
  std::fflush(stdout);
  if (v == 'F') clFinish(env.queue);
  if (v == 'P') {
    clReleaseMemObject(parent);
    parent = nullptr;
  }
  if (v == 'K') {
    clFinish(env.queue);
    clReleaseCommandQueue(env.queue);
    clReleaseKernel(env.copy);
    clReleaseContext(env.context);
  }
  for (int i : release_order) {
    if (subs[i] != nullptr) clReleaseMemObject(subs[i]);
  }
  if (parent != nullptr) clReleaseMemObject(parent);
}

// L: creation, use and release interleaved, always releasing the newest live sub-buffer first.
void stack(const Env& env, unsigned salt) {
  const Layout layout;
  std::vector<char> host = pattern(total, salt);
  cl_mem parent = make_buffer(env, total);
  ok(clEnqueueWriteBuffer(env.queue, parent, CL_TRUE, 0, total, host.data(), 0, nullptr, nullptr),
     "clEnqueueWriteBuffer");
  std::vector<cl_mem> live;
  int bad = 0;
  const auto push = [&](int i) {
    live.push_back(make_sub(parent, layout.offsets[i], layout.sizes[i], CL_MEM_READ_WRITE));
    bad +=
        read_and_check(env, live.back(), layout.sizes[i], host.data() + layout.offsets[i], false);
  };
  const auto pop = [&] {
    clReleaseMemObject(live.back());
    live.pop_back();
  };
  push(0), push(1), pop(), push(2), push(3), pop(), pop(), push(4), pop(), pop();
  std::printf("  variant L: %d mismatches; all released\n", bad);
  clReleaseMemObject(parent);
}

// Y: two parents, sub-buffers made alternately; each parent's released in its own reverse order.
void two_parents(const Env& env, unsigned salt) {
  const Layout layout;
  std::vector<char> host = pattern(total, salt);
  cl_mem parents[2] = {make_buffer(env, total), make_buffer(env, total)};
  std::vector<cl_mem> subs[2];
  for (cl_mem parent : parents) {
    ok(clEnqueueWriteBuffer(env.queue, parent, CL_TRUE, 0, total, host.data(), 0, nullptr, nullptr),
       "clEnqueueWriteBuffer");
  }
  for (int i = 0; i < 5; ++i) {
    for (int p = 0; p < 2; ++p) {
      subs[p].push_back(
          make_sub(parents[p], layout.offsets[i], layout.sizes[i], CL_MEM_READ_WRITE));
    }
  }
  int bad = 0;
  for (int i = 0; i < 5; ++i) {
    for (int p = 0; p < 2; ++p) {
      bad += read_and_check(env, subs[p][i], layout.sizes[i], host.data() + layout.offsets[i],
                            i % 2 == 1);
    }
  }
  std::printf("  variant Y: %d mismatches; releasing\n", bad);
  std::fflush(stdout);
  for (int p = 0; p < 2; ++p) {
    for (int i = 4; i >= 0; --i) clReleaseMemObject(subs[p][i]);
  }
  for (cl_mem parent : parents) clReleaseMemObject(parent);
}

// Q and q: test_sub_buffers_overlapping of the OpenCL conformance suite, `rounds` times.
void conformance(const Env& env, bool reverse, unsigned salt) {
  std::mt19937 rng(salt);
  const auto between = [&](std::size_t low, std::size_t high) {
    return std::uniform_int_distribution<std::size_t>(low, high)(rng);
  };
  int bad = 0;
  for (int round = 0; round < 10; ++round) {
    std::vector<char> host = pattern(total, salt + static_cast<unsigned>(round));
    cl_mem parent = make_buffer(env, total);
    ok(clEnqueueWriteBuffer(env.queue, parent, CL_TRUE, 0, total, host.data(), 0, nullptr, nullptr),
       "clEnqueueWriteBuffer");
    std::vector<cl_mem> subs;
    std::vector<std::size_t> offsets;
    for (int i = 0; i < 16; ++i) {
      const std::size_t offset = between(0, total / env.align - 1) * env.align;
      const std::size_t size = between(1, (total - offset) / env.align) * env.align;
      subs.push_back(make_sub(parent, offset, size, CL_MEM_READ_ONLY));
      offsets.push_back(offset);
      bad += read_and_check(env, subs.back(), size, host.data() + offset, between(0, 1) == 1);
    }
    if (reverse) std::reverse(subs.begin(), subs.end());
    for (cl_mem sub : subs) clReleaseMemObject(sub);
    clReleaseMemObject(parent);
  }
  std::printf("  variant %c: %d mismatches in 10 rounds; all released\n", reverse ? 'Q' : 'q', bad);
}

void variant(char v, unsigned salt) {
  Env env = open_env();
  if (v == 'L') return stack(env, salt);
  if (v == 'Y') return two_parents(env, salt);
  if (v == 'Q' || v == 'q') return conformance(env, v == 'Q', salt);
  if (v != 'X') return five(env, v, salt);
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < 4; ++t) {
    threads.emplace_back([&env, salt, t] {
      Env mine = env;  // one context; a queue of the thread's own
      cl_int err = CL_SUCCESS;
      mine.queue = clCreateCommandQueue(env.context, env.device, 0, &err);
      ok(err, "clCreateCommandQueue");
      cl_program program = nullptr;
      ok(clGetKernelInfo(env.copy, CL_KERNEL_PROGRAM, sizeof(program), &program, nullptr),
         "clGetKernelInfo");
      mine.copy = clCreateKernel(program, "copy", &err);  // kernels are not thread-safe
      ok(err, "clCreateKernel");
      for (unsigned round = 0; round < 10; ++round) five(mine, 'W', salt + 16 * t + round);
    });
  }
  for (std::thread& thread : threads) thread.join();
}

}  // namespace

int main(int argc, char** argv) {
  const std::string all = "GHRPFSKNWOULIJMmTZYXQqVD";
  const std::string chosen = argc > 1 ? argv[1] : all;
  first_mib_only = argc > 2 && std::string(argv[2]) == "mib";
  for (char v : chosen) {
    for (unsigned rep = 0; rep < 3; ++rep) {
      std::fflush(stdout);
      const pid_t pid = fork();
      if (pid == 0) {
        alarm(60);
        variant(v, rep);
        std::fflush(stdout);
        _exit(0);
      }
      int status = 0;
      waitpid(pid, &status, 0);
      if (WIFSIGNALED(status)) {
        std::printf("variant %c rep %u: SIGNAL %d (%s)\n", v, rep, WTERMSIG(status),
                    strsignal(WTERMSIG(status)));
      } else {
        std::printf("variant %c rep %u: exit %d\n", v, rep, WEXITSTATUS(status));
      }
      std::fflush(stdout);
    }
  }
}
