// SPDX-License-Identifier: MIT
// How a command stands, asked of its event: the one place clbuf queries
// CL_EVENT_COMMAND_EXECUTION_STATUS. The query itself may be refused; each caller decides what
// that means for it (keep the event, count the command as ended, or report the refusal).
#ifndef CLBUF_DETAIL_EVENT_HPP
#define CLBUF_DETAIL_EVENT_HPP

#include <clbuf/error.hpp>

namespace clbuf {
namespace detail {

/// A command's execution status as clGetEventInfo reported it.
struct EventStatus {
  cl_int query = CL_SUCCESS;    // clGetEventInfo's own code: `status` is known only on success
  cl_int status = CL_COMPLETE;  // CL_QUEUED .. CL_COMPLETE, or the command's (negative) error

  bool known() const noexcept { return query == CL_SUCCESS; }
  /// Known to have failed on the device.
  bool failed() const noexcept { return known() && status < 0; }
  /// Known to have ended: completed or failed.
  bool ended() const noexcept { return known() && status <= CL_COMPLETE; }
  /// Known to be queued, submitted or running.
  bool running() const noexcept { return known() && status > CL_COMPLETE; }
};

/// Asks how the command of `event` stands (clGetEventInfo, CL_EVENT_COMMAND_EXECUTION_STATUS).
inline EventStatus event_status(cl_event event) noexcept {
  EventStatus asked;
  asked.query = CLBUF_CL(clGetEventInfo)(event, CL_EVENT_COMMAND_EXECUTION_STATUS,
                                         sizeof(asked.status), &asked.status, nullptr);
  return asked;
}

/// The status of the command of `event`; a refused query is an Error of `operation`.
inline cl_int checked_event_status(const char* operation, cl_event event) {
  const EventStatus asked = event_status(event);
  check(asked.query, operation, "clGetEventInfo");
  return asked.status;
}

/// How a command ended once waited for: clWaitForEvents's code, and its status asked afterwards.
struct EventEnd {
  cl_int waited = CL_SUCCESS;
  EventStatus asked;

  /// The command's own failure first, else the wait's, else the query's; CL_SUCCESS when none.
  cl_int error() const noexcept {
    return asked.failed() ? asked.status : waited != CL_SUCCESS ? waited : asked.query;
  }
};

/// Blocks until the command of `event` has ended, then asks how.
inline EventEnd wait_for_event(cl_event event) noexcept {
  EventEnd end;
  end.waited = CLBUF_CL(clWaitForEvents)(1, &event);
  end.asked = event_status(event);
  return end;
}

/// The device's start and end times of `event`'s command in ns (a profiling queue's), into
/// `at`; both 0 where the driver has none.
inline void profiled_times(cl_event event, cl_ulong (&at)[2]) noexcept {
  if (CLBUF_CL(clGetEventProfilingInfo)(event, CL_PROFILING_COMMAND_START, sizeof(cl_ulong), &at[0],
                                        nullptr) != CL_SUCCESS ||
      CLBUF_CL(clGetEventProfilingInfo)(event, CL_PROFILING_COMMAND_END, sizeof(cl_ulong), &at[1],
                                        nullptr) != CL_SUCCESS) {
    at[0] = at[1] = 0;
  }
}

}  // namespace detail
}  // namespace clbuf

#endif  // CLBUF_DETAIL_EVENT_HPP
