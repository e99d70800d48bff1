// SPDX-License-Identifier: MIT
// PoCL 3.1 (Debian 12's pocl-opencl-icd, the pthread CPU device) aborts or hangs when events
// fail while several threads enqueue on one in-order queue: plain OpenCL, no clbuf.
//
//   g++ -O1 -std=c++17 docs/repro/pocl_failed_events.cpp -lOpenCL -pthread -o pocl_failed_events
//   ./pocl_failed_events THREADS MODE [QUEUES]
//
// Each of THREADS threads, 200 times: a user event; MODE 0 a barrier waiting for it then a fill,
// MODE 1 a fill with the event in its own wait list, MODE 2 as 0 with the barrier's event
// released at once (one thread is enough); the user event set to an error every other time;
// wait for the fill; release. QUEUES "per-thread" gives each thread a queue of its own.
// Measured on the CI machine (2026-12-05):
//   1 0, 1 1: "alive".  1 2: "PTHREAD ERROR in pocl_update_event_failed()" (abort).
//   2 0, 2 1, 4 1: "PTHREAD ERROR in pocl_lock_events_inorder()" or an assertion in
//   pocl_update_event_running_unlocked / pocl_lock_events_inorder (abort), or a hang; keeping
//   every event alive until clFinish does not help.  2 0 per-thread, 4 1 per-thread: "alive".
// clbuf keeps the barriers it enqueues until they end (which avoids MODE 2, the one-thread
// case); the concurrent cases are PoCL's own and need a queue, so a manager, per thread.
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const int mode = argc > 2 ? std::atoi(argv[2]) : 0;
  const bool per_thread = argc > 3 && std::strcmp(argv[3], "per-thread") == 0;
  cl_platform_id platform;
  cl_device_id device;
  cl_int err = clGetPlatformIDs(1, &platform, nullptr);
  if (err == CL_SUCCESS) err = clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 1, &device, nullptr);
  if (err != CL_SUCCESS) {
    std::fprintf(stderr, "no OpenCL device: %d\n", err);
    return 2;
  }
  cl_context context = clCreateContext(nullptr, 1, &device, nullptr, nullptr, &err);
  std::vector<cl_command_queue> queues;
  std::vector<cl_mem> buffers;
  for (int k = 0; k < threads; ++k) {
    if (k == 0 || per_thread) queues.push_back(clCreateCommandQueue(context, device, 0, &err));
    buffers.push_back(clCreateBuffer(context, CL_MEM_READ_WRITE, 16384, nullptr, &err));
  }
  std::vector<std::thread> workers;
  for (int k = 0; k < threads; ++k) {
    workers.emplace_back([&, k] {
      cl_command_queue queue = queues[per_thread ? k : 0];
      for (int i = 0; i < 200; ++i) {
        cl_int e = CL_SUCCESS;
        cl_event gate = clCreateUserEvent(context, &e);
        cl_event barrier = nullptr, fill = nullptr;
        const unsigned value = static_cast<unsigned>(i);
        if (mode == 1) {
          clEnqueueFillBuffer(queue, buffers[k], &value, 4, 0, 16384, 1, &gate, &fill);
        } else {
          clEnqueueBarrierWithWaitList(queue, 1, &gate, &barrier);
          if (mode == 2) {
            clReleaseEvent(barrier);
            barrier = nullptr;
          }
          clEnqueueFillBuffer(queue, buffers[k], &value, 4, 0, 16384, 0, nullptr, &fill);
        }
        clFlush(queue);
        clSetUserEventStatus(gate, (i + k) % 2 == 1 ? -5 : CL_COMPLETE);
        clWaitForEvents(1, &fill);
        if (barrier != nullptr) {
          clWaitForEvents(1, &barrier);
          clReleaseEvent(barrier);
        }
        clReleaseEvent(fill);
        clReleaseEvent(gate);
      }
    });
  }
  for (std::thread& worker : workers) worker.join();
  for (cl_command_queue queue : queues) clFinish(queue);
  std::puts("alive");
  return 0;
}
