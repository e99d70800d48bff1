// SPDX-License-Identifier: MIT
// Does a failed event poison later commands of an in-order queue on NVIDIA's driver, and which
// arrangement of clbuf's `after` avoids it? Plain OpenCL, no clbuf. Found by thread_test's
// Threads.EventsThatFailOnAManagerPerThread on an H100 (driver 580.159.04): 2 to 7 of the 40
// fills whose user event was set to CL_COMPLETE failed with -5, the status the previous round's
// event was failed with (bench/results/h100/2026-12-06-issue34/suite2/thread*).
//
//   g++ -std=c++17 -O2 docs/repro/nvidia_failed_events.cpp -lOpenCL -o failed_events
//   ./failed_events [VARIANT...] [--rounds N]        (default: every variant, 50 rounds)
//
// Each variant runs in a forked child (30 s alarm; the parent makes no OpenCL call): threads with
// a context each (as the test's manager per thread), an in-order "main" queue and a 16 KiB buffer,
// N rounds of: a user event `gate`; a fill of the buffer with a new value behind gate, as the
// variant arranges; clFlush; gate set to -5 when round + thread is odd, else CL_COMPLETE; a host
// wait for the fill, then for the variant's own events; a blocking read of the buffer on a second
// queue (a failed fill must have left it unchanged). A "later command" is a fill whose gate was
// set to CL_COMPLETE. At the end each thread fills and reads the buffer on main ("final").
//   barrier      clbuf today: clEnqueueBarrierWithWaitList(main, [gate]), kept until it has
//                ended, then the fill on main; -quiet: no read (the test exactly); -nofail: no
//                gate fails (control); -1t: 1 thread; -shared: 4 threads in one context;
//                -finish, -sleep: clFinish(main), a 2 ms sleep after each round; -released: the
//                barrier's event released at once (PoCL aborts: pocl_failed_events.cpp MODE 2)
//   waitlist     no barrier: [gate] in the fill's own wait list, on main
//   gated        the fill on a second in-order queue "gated" behind [gate, marker of main]; main
//                gets a barrier on a user event U that a callback on the fill's event sets to
//                CL_COMPLETE however the fill ended: main never waits for a failed event;
//                -reuse: one gated queue; -fresh: a new one after each failed fill
//   -thread      a host thread per round waits (clWaitForEvents) instead of the callback
//   deferred     nothing waits for gate: main gets a barrier on a user event U; a host thread
//                waits for gate and enqueues the fill on the gated queue behind [marker of main]
//                only if gate succeeded, then sets U to CL_COMPLETE and a user event D, which the
//                host waits for instead of the fill, to the outcome
//   relayed      (clbuf's branch nvidia-events) the gated queue gets a barrier on [marker of
//                main], a barrier on a user event `go`, the fill; main a barrier on a user event
//                U; a host thread waits for gate, sets go to CL_COMPLETE, or, if gate failed, to
//                its code once the first barrier has ended; then sets U to CL_COMPLETE once the
//                fill has ended; a new gated queue after a failure
//   -bystander   a fill of another buffer on main after the round's commands, before gate is set
// Printed per variant: `variant NAME: OK/TOTAL later commands succeeded`, then the other counts.
// Skipped on PoCL unless REPRO_POCL_ALL=1: -released, and the variants with callbacks (PoCL 3.1
// never calls the CL_COMPLETE callback of a failed event).
//
// Measured on PoCL 3.1 (Debian 12's, pthread CPU device, 2 cores, 2026-12-06, 50 rounds, 2-6 s):
// every variant run 100/100 (-1t 25/25), data unchanged, final 4/4; but barrier-, waitlist-
// bystander 100/200: a command queued behind a fill whose event fails fails too, wait list or not
// (the others' bystanders 200/200); gated-fresh-thread and gated-thread-bystander abort in PoCL
// about 1 run in 12 (pocl_lock_events_inorder, pocl_update_event_finished: a failure reaching a
// command whose other dependency still runs); deferred, relayed: 0 in 12. REPRO_POCL_ALL=1:
// -released aborts, the callbacks exit 3.
// Measured on NVIDIA H100 80GB HBM3 (driver 580.159.04, 2026-12-06, 50 rounds; output in
// bench/results/h100/2026-12-06-issue36/failed_events.txt): barrier 81/100 (19 later commands
// failed with -5, the earlier gate's status), barrier-quiet 63/100, barrier-shared 31/100,
// waitlist 99/100, barrier-released 99/100, -1t 25/25, barrier-finish and -sleep 100/100 (the
// poison lasts until the driver has processed the failure); every gated, deferred and relayed
// variant 100/100 with bystanders 200/200; barrier- and waitlist-bystander 99/200, as on PoCL.
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

enum class Mode { barrier, waitlist, gated, deferred, relayed };

// flags: s one context for all threads; f clFinish(main), z sleep, after each round; q no read;
// n no failed gate; r barrier released at once; F a new gated queue after a failed fill; t a host
// thread, not a callback; b a bystander.
struct Variant {
  const char* name;
  Mode mode;
  int threads;
  const char* flags;
  bool has(char flag) const { return std::strchr(flags, flag) != nullptr; }
};

// clang-format off
const Variant variants[] = {
    {"barrier", Mode::barrier, 4, ""},             {"barrier-quiet", Mode::barrier, 4, "q"},
    {"barrier-nofail", Mode::barrier, 4, "n"},     {"barrier-1t", Mode::barrier, 1, ""},
    {"barrier-shared", Mode::barrier, 4, "s"},     {"barrier-finish", Mode::barrier, 4, "f"},
    {"barrier-sleep", Mode::barrier, 4, "z"},      {"barrier-released", Mode::barrier, 4, "r"},
    {"waitlist", Mode::waitlist, 4, ""},           {"waitlist-1t", Mode::waitlist, 1, ""},
    {"gated-reuse", Mode::gated, 4, ""},           {"gated-fresh", Mode::gated, 4, "F"},
    {"gated-reuse-thread", Mode::gated, 4, "t"},   {"gated-fresh-thread", Mode::gated, 4, "Ft"},
    {"deferred", Mode::deferred, 4, ""},           {"relayed", Mode::relayed, 4, "F"},
    {"relayed-shared", Mode::relayed, 4, "Fs"},    {"barrier-bystander", Mode::barrier, 4, "b"},
    {"waitlist-bystander", Mode::waitlist, 4, "b"},
    {"gated-thread-bystander", Mode::gated, 4, "Ftb"},
    {"deferred-bystander", Mode::deferred, 4, "b"},
    {"relayed-bystander", Mode::relayed, 4, "Fb"},
};
// clang-format on

constexpr std::size_t words = 4096;
int rounds = 50;

void ok(cl_int err, const char* what) {
  if (err == CL_SUCCESS) return;
  std::printf("  %s failed: %d\n", what, err);
  std::fflush(stdout);
  _exit(2);
}

cl_command_queue new_queue(cl_context context, cl_device_id device) {
  cl_int err = CL_SUCCESS;
  cl_command_queue queue = clCreateCommandQueue(context, device, 0, &err);
  return ok(err, "clCreateCommandQueue"), queue;
}

cl_event new_user_event(cl_context context) {
  cl_int err = CL_SUCCESS;
  cl_event event = clCreateUserEvent(context, &err);
  return ok(err, "clCreateUserEvent"), event;
}

cl_int status_of(cl_event event) {
  cl_int status = CL_SUCCESS;
  ok(clGetEventInfo(event, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof(status), &status, nullptr),
     "clGetEventInfo");
  return status;
}

// The relaying variants' waits: polled, so that a callback that is never called (PoCL 3.1, for a
// failed event) costs 2 s and a line, not the alarm.
void wait_briefly(cl_event event, const char* what) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (status_of(event) > 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      std::printf("  %s: still waiting after 2 s (a callback not called?)\n", what);
      std::fflush(stdout);
      _exit(3);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

// gated: sets the user event `data` to CL_COMPLETE once the fill has ended, however.
void CL_CALLBACK release_main(cl_event, cl_int, void* data) {
  cl_event hold = static_cast<cl_event>(data);
  clSetUserEventStatus(hold, CL_COMPLETE);
  clReleaseEvent(hold);
}

struct Tally {
  std::atomic<int> later{0}, later_ok{0};  // rounds whose gate was set to CL_COMPLETE
  std::atomic<int> failed{0}, unchanged{0}, ran_behind_failed{0}, final_ok{0}, bad_reads{0};
  std::atomic<int> bystanders{0}, bystanders_ok{0};
  std::mutex mutex;
  std::map<cl_int, int> codes;  // of the later commands that failed
};

void run_thread(const Variant& v, cl_context context, cl_device_id device, int t, Tally& tally) {
  cl_command_queue main_queue = new_queue(context, device);
  cl_command_queue probe = new_queue(context, device);
  cl_command_queue gated = nullptr;
  cl_int err = CL_SUCCESS;
  cl_mem target = clCreateBuffer(context, CL_MEM_READ_WRITE, words * 4, nullptr, &err);
  ok(err, "clCreateBuffer");
  cl_mem other = clCreateBuffer(context, CL_MEM_READ_WRITE, words * 4, nullptr, &err);
  ok(err, "clCreateBuffer");
  std::vector<cl_uint> host(words, 0xdeadbeefu);
  ok(clEnqueueWriteBuffer(main_queue, target, CL_TRUE, 0, words * 4, host.data(), 0, nullptr,
                          nullptr),
     "clEnqueueWriteBuffer");
  cl_uint current = 0xdeadbeefu;  // what the buffer holds, as far as the probe saw
  for (int i = 0; i < rounds; ++i) {
    const bool fails = !v.has('n') && (i + t) % 2 == 1;
    const cl_uint value = 0x51000000u + (static_cast<cl_uint>(t) << 16) + static_cast<cl_uint>(i);
    cl_event gate = new_user_event(context);
    cl_event done = nullptr, barrier = nullptr, marker = nullptr;
    std::thread relay;
    if (v.mode > Mode::waitlist) {
      if (gated == nullptr) gated = new_queue(context, device);
      ok(clEnqueueMarkerWithWaitList(main_queue, 0, nullptr, &marker), "marker");
    }
    if (v.mode == Mode::barrier) {
      ok(clEnqueueBarrierWithWaitList(main_queue, 1, &gate, &barrier), "barrier");
      if (v.has('r')) clReleaseEvent(barrier), barrier = nullptr;
      ok(clEnqueueFillBuffer(main_queue, target, &value, 4, 0, words * 4, 0, nullptr, &done),
         "clEnqueueFillBuffer");
    } else if (v.mode == Mode::waitlist) {
      ok(clEnqueueFillBuffer(main_queue, target, &value, 4, 0, words * 4, 1, &gate, &done),
         "clEnqueueFillBuffer");
    } else if (v.mode == Mode::gated) {
      const cl_event wait[2] = {gate, marker};
      ok(clEnqueueFillBuffer(gated, target, &value, 4, 0, words * 4, 2, wait, &done),
         "clEnqueueFillBuffer");
      ok(clFlush(gated), "clFlush");
      cl_event hold = new_user_event(context);
      ok(clEnqueueBarrierWithWaitList(main_queue, 1, &hold, &barrier), "barrier");
      if (v.has('t')) {
        relay = std::thread([done, hold] {
          clWaitForEvents(1, &done);
          release_main(done, status_of(done), hold);
        });
      } else {
        ok(clSetEventCallback(done, CL_COMPLETE, release_main, hold), "clSetEventCallback");
      }
    } else if (v.mode == Mode::deferred) {
      cl_event hold = new_user_event(context);
      done = new_user_event(context);
      ok(clEnqueueBarrierWithWaitList(main_queue, 1, &hold, &barrier), "barrier");
      relay = std::thread([=] {  // enqueues the fill only once gate has succeeded
        clWaitForEvents(1, &gate);
        cl_int end = status_of(gate);
        cl_event fill = nullptr;
        if (end == CL_COMPLETE) {
          end = clEnqueueFillBuffer(gated, target, &value, 4, 0, words * 4, 1, &marker, &fill);
          if (end == CL_SUCCESS) clFlush(gated), clWaitForEvents(1, &fill), end = status_of(fill);
          if (fill != nullptr) clReleaseEvent(fill);
        }
        release_main(nullptr, 0, hold);
        clSetUserEventStatus(done, end < 0 ? end : CL_COMPLETE);
      });
    } else {
      cl_event go = new_user_event(context), ahead = nullptr, held = nullptr;
      ok(clEnqueueBarrierWithWaitList(gated, 1, &marker, &ahead), "barrier");
      ok(clEnqueueBarrierWithWaitList(gated, 1, &go, &held), "barrier");
      ok(clEnqueueFillBuffer(gated, target, &value, 4, 0, words * 4, 0, nullptr, &done),
         "clEnqueueFillBuffer");
      ok(clFlush(gated), "clFlush");
      cl_event hold = new_user_event(context);
      ok(clEnqueueBarrierWithWaitList(main_queue, 1, &hold, &barrier), "barrier");
      relay = std::thread([=] {  // fails go only once nothing before it on gated is running
        clWaitForEvents(1, &gate);
        const cl_int end = status_of(gate);
        if (end < 0) clWaitForEvents(1, &ahead);
        clSetUserEventStatus(go, end < 0 ? end : CL_COMPLETE);
        clWaitForEvents(1, &done);
        release_main(done, 0, hold);
        for (cl_event event : {go, ahead, held}) clReleaseEvent(event);
      });
    }
    cl_event bystander = nullptr;
    if (v.has('b')) {
      ok(clEnqueueFillBuffer(main_queue, other, &value, 4, 0, words * 4, 0, nullptr, &bystander),
         "clEnqueueFillBuffer");
    }
    ok(clFlush(main_queue), "clFlush");
    ok(clSetUserEventStatus(gate, fails ? -5 : CL_COMPLETE), "clSetUserEventStatus");
    const bool relays = v.mode > Mode::waitlist;
    if (relays) wait_briefly(done, "the fill");
    clWaitForEvents(1, &done);  // CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST when it failed
    const cl_int status = status_of(done);
    if (barrier != nullptr && relays) wait_briefly(barrier, "main's barrier");
    if (barrier != nullptr) clWaitForEvents(1, &barrier), clReleaseEvent(barrier);
    if (relay.joinable()) relay.join();
    if (bystander != nullptr) {
      clWaitForEvents(1, &bystander);
      ++tally.bystanders, tally.bystanders_ok += status_of(bystander) == CL_COMPLETE ? 1 : 0;
      clReleaseEvent(bystander);
    }
    if (marker != nullptr) clReleaseEvent(marker);
    clReleaseEvent(done);
    clReleaseEvent(gate);
    if (!fails) ++tally.later;
    if (!fails && status == CL_COMPLETE) ++tally.later_ok;
    if (fails && status == CL_COMPLETE) ++tally.ran_behind_failed;
    if (status != CL_COMPLETE) ++tally.failed;
    if (!fails && status != CL_COMPLETE) {
      std::lock_guard<std::mutex> lock(tally.mutex);
      ++tally.codes[status];
    }
    if (!v.has('q')) {
      err = clEnqueueReadBuffer(probe, target, CL_TRUE, 0, words * 4, host.data(), 0, nullptr,
                                nullptr);
      bool uniform = err == CL_SUCCESS;
      for (cl_uint x : host) uniform = uniform && x == host[0];
      if (!uniform || (status == CL_COMPLETE && host[0] != value)) ++tally.bad_reads;
      if (uniform && status != CL_COMPLETE && host[0] == current) ++tally.unchanged;
      if (uniform) current = host[0];
    }
    if (gated != nullptr && v.has('F') && status != CL_COMPLETE) {
      clFinish(gated);
      clReleaseCommandQueue(gated), gated = nullptr;
    }
    if (v.has('f')) clFinish(main_queue);
    if (v.has('z')) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  // Final: does the main queue still work? A blocking fill and read.
  const cl_uint seven = 7;
  bool final_ok = clEnqueueFillBuffer(main_queue, target, &seven, 4, 0, words * 4, 0, nullptr,
                                      nullptr) == CL_SUCCESS;
  final_ok = final_ok && clEnqueueReadBuffer(main_queue, target, CL_TRUE, 0, words * 4, host.data(),
                                             0, nullptr, nullptr) == CL_SUCCESS;
  for (cl_uint x : host) final_ok = final_ok && x == 7;
  for (cl_command_queue queue : {main_queue, probe, gated}) {
    if (queue != nullptr) clFinish(queue), clReleaseCommandQueue(queue);
  }
  clReleaseMemObject(target), clReleaseMemObject(other);
  if (final_ok) ++tally.final_ok;
}

void run_variant(const Variant& v) {
  cl_platform_id platform = nullptr;
  cl_device_id device = nullptr;
  ok(clGetPlatformIDs(1, &platform, nullptr), "clGetPlatformIDs");
  ok(clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 1, &device, nullptr), "clGetDeviceIDs");
  char name[256] = {};
  clGetPlatformInfo(platform, CL_PLATFORM_NAME, sizeof(name) - 1, name, nullptr);
  const char* env = std::getenv("REPRO_POCL_ALL");
  const bool callbacks = v.mode == Mode::gated && !v.has('t');
  if ((v.has('r') || callbacks) && std::strstr(name, "Portable") != nullptr &&
      (env == nullptr || std::strcmp(env, "1") != 0)) {
    std::printf(
        "variant %s: skipped on PoCL, which %s (REPRO_POCL_ALL=1 runs it)\n", v.name,
        callbacks ? "never calls a CL_COMPLETE callback of a failed event (hangs)" : "aborts");
    return;
  }
  std::vector<cl_context> contexts(v.has('s') ? 1 : v.threads);
  for (cl_context& context : contexts) {
    cl_int err = CL_SUCCESS;
    context = clCreateContext(nullptr, 1, &device, nullptr, nullptr, &err);
    ok(err, "clCreateContext");
  }
  Tally tally;
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < v.threads; ++t) {
    cl_context context = contexts[v.has('s') ? 0 : static_cast<std::size_t>(t)];
    threads.emplace_back(
        [&v, context, device, t, &tally] { run_thread(v, context, device, t, tally); });
  }
  for (std::thread& thread : threads) thread.join();
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  std::string codes;
  for (const auto& code : tally.codes) {
    codes += " " + std::to_string(code.first) + " x" + std::to_string(code.second);
  }
  std::printf(
      "variant %s: %d/%d later commands succeeded; failed fills that left the data "
      "unchanged: %d/%d%s; bad reads: %d; fills behind a failed gate that ran: %d; codes "
      "of failed later commands:%s; final fill+read on main: %d/%d; bystanders that "
      "succeeded: %d/%d; %.3f ms a round\n",
      v.name, tally.later_ok.load(), tally.later.load(), tally.unchanged.load(),
      tally.failed.load(), v.has('q') ? " (not read)" : "", tally.bad_reads.load(),
      tally.ran_behind_failed.load(), codes.empty() ? " none" : codes.c_str(),
      tally.final_ok.load(), v.threads, tally.bystanders_ok.load(), tally.bystanders.load(),
      ms / rounds);
  for (cl_context context : contexts) clReleaseContext(context);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> chosen;
  for (int a = 1; a < argc; ++a) {
    if (std::strcmp(argv[a], "--rounds") == 0 && a + 1 < argc) {
      rounds = std::atoi(argv[++a]);
    } else {
      chosen.push_back(argv[a]);
    }
  }
  for (const Variant& v : variants) {
    bool wanted = chosen.empty();
    for (std::string& name : chosen) wanted = wanted || (name == v.name && (name = "", true));
    if (!wanted) continue;
    std::fflush(stdout);
    const pid_t pid = fork();  // before any OpenCL call of this process: PoCL hangs forked children
    if (pid == 0) {
      alarm(30);
      run_variant(v);
      std::fflush(stdout);
      _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    if (WIFSIGNALED(status)) {
      std::printf("variant %s: SIGNAL %d (%s)\n", v.name, WTERMSIG(status),
                  strsignal(WTERMSIG(status)));
    } else if (WEXITSTATUS(status) != 0) {
      std::printf("variant %s: exit %d\n", v.name, WEXITSTATUS(status));
    }
    std::fflush(stdout);
  }
  for (const std::string& name : chosen) {
    if (!name.empty()) std::printf("unknown variant %s\n", name.c_str());
  }
}
