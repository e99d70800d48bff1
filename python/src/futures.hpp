// SPDX-License-Identifier: MIT
// clbuf.Future: an asynchronous operation in flight and the Python objects it keeps alive.
#ifndef CLBUF_PYTHON_FUTURES_HPP
#define CLBUF_PYTHON_FUTURES_HPP

#include "buffers.hpp"

namespace clbuf_python {

/// clbuf.Future: the library's Future of an upload into new memory (a DeviceBuffer) or of any
/// other asynchronous call (no value), plus the Python objects it hands out or keeps alive: the
/// host memory and the buffers the device reads or writes are held until the operation is done.
class Pending {
 public:
  using Upload = clbuf::Future<clbuf::DeviceBuffer<std::uint8_t>>;
  using Done = clbuf::Future<void>;

  /// An upload into new memory: get() moves the buffer into `shell` (dtype and shape set).
  Pending(Upload future, std::shared_ptr<Handle> shell, py::object keep)
      : future_(std::move(future)), shell_(std::move(shell)), keep_(std::move(keep)) {}

  /// Any other operation: get() returns `result` (None, or the array downloaded into).
  Pending(Done future, py::object result, py::object keep)
      : future_(std::move(future)), result_(std::move(result)), keep_(std::move(keep)) {}

  Pending(const Pending&) = delete;
  Pending& operator=(const Pending&) = delete;

  ~Pending() {
    // Destroying a library Future waits for its operation; do that without the GIL, and before
    // keep_ (a member declared later) is released.
    if (Py_IsInitialized() != 0 && PyGILState_Check() != 0) {
      NoGil release;
      drop_future();
    } else {
      drop_future();
    }
  }

  bool ready() const {
    return std::visit([](const auto& future) { return future.ready(); }, future_);
  }

  /// The library Future's event (null when nothing was left to wait for).
  cl_event event() const {
    return std::visit([](const auto& future) { return future.event()(); }, future_);
  }

  /// Blocks until the operation is done; raises clbuf.Error if it failed on the device.
  void wait() {
    std::exception_ptr failure;
    {
      NoGil release;
      std::lock_guard<std::mutex> lock(mutex_);
      try {
        std::visit([](const auto& future) { future.wait(); }, future_);
      } catch (...) {
        failure = std::current_exception();
      }
    }
    keep_ = py::none();  // the operation has ended either way
    if (failure) std::rethrow_exception(failure);
  }

  /// wait(), then the result; the same object on every call.
  FutureResult get() {
    wait();
    if (shell_) {
      // An upload, done: take the buffer once (get() does not block any more).
      auto& upload = std::get<Upload>(future_);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (upload.valid()) shell_->own(upload.get());
      }
      if (result_.is_none()) result_ = py::cast(shell_);
    }
    return result_;
  }

 private:
  void drop_future() noexcept {
    std::visit([](auto& future) { future = std::decay_t<decltype(future)>(); }, future_);
  }

  std::mutex mutex_;  // wait() and get() from several threads
  std::variant<Upload, Done> future_;
  std::shared_ptr<Handle> shell_;  // uploads into new memory
  py::object result_ = py::none();
  py::object keep_;
};

template <>
struct PythonName<Pending> {
  static constexpr const char* name = "Future";
  static constexpr const char* scope = "Future.";
  static constexpr const char* made_by = "Futures come from the *_async() calls";
};

void bind_futures(py::module_& m);

}  // namespace clbuf_python

#endif  // CLBUF_PYTHON_FUTURES_HPP
