// SPDX-License-Identifier: MIT
// clbuf.Future: an asynchronous operation in flight and the Python objects it keeps alive.
#ifndef CLBUF_PYTHON_FUTURES_HPP
#define CLBUF_PYTHON_FUTURES_HPP

#include "buffers.hpp"

namespace clbuf_python {

/// clbuf.Future: the library's Future of an upload_async() (a DeviceBuffer) or a
/// download_async() (into an ndarray), plus the Python objects it hands out or keeps alive: the
/// host array the device reads or writes is held until the transfer is done.
class Pending {
 public:
  using Upload = clbuf::Future<clbuf::DeviceBuffer<std::uint8_t>>;
  using Download = clbuf::Future<void>;

  /// An upload: get() moves the buffer into `shell` (dtype and shape already set).
  Pending(Upload future, std::shared_ptr<Handle> shell, py::object host)
      : future_(std::move(future)), shell_(std::move(shell)), host_(std::move(host)) {}

  /// A download into `out`, which is both the result and the memory kept alive.
  Pending(Download future, py::object out)
      : future_(std::move(future)), result_(out), host_(std::move(out)) {}

  Pending(const Pending&) = delete;
  Pending& operator=(const Pending&) = delete;

  ~Pending() {
    // Destroying a library Future waits for its transfer; do that without the GIL, and before
    // host_ (a member declared later) is released.
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

  /// Blocks until the transfer is done; raises clbuf.Error if it failed on the device.
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
    host_ = py::none();  // the transfer has ended either way
    if (failure) std::rethrow_exception(failure);
  }

  /// wait(), then the result; the same object on every call.
  py::object get() {
    wait();
    if (result_.is_none()) {
      // An upload, done: take the buffer once (get() does not block any more).
      auto& upload = std::get<Upload>(future_);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (upload.valid()) shell_->memory = upload.get();
      }
      result_ = py::cast(shell_);
    }
    return result_;
  }

 private:
  void drop_future() noexcept {
    std::visit([](auto& future) { future = std::decay_t<decltype(future)>(); }, future_);
  }

  std::mutex mutex_;  // wait() and get() from several threads
  std::variant<Upload, Download> future_;
  std::shared_ptr<Handle> shell_;  // uploads
  py::object result_ = py::none();
  py::object host_;
};

template <>
struct PythonName<Pending> {
  static constexpr const char* name = "Future";
  static constexpr const char* made_by = "Futures come from upload_async() and download_async()";
};

void bind_futures(py::module_& m);

}  // namespace clbuf_python

#endif  // CLBUF_PYTHON_FUTURES_HPP
