// The Python module `clbuf`: the seed's BufferManager API (upload_to_device, download_from_device,
// copy_device_buffer, cleanup) over the clbuf C++ core.
//
// A clbuf.DeviceBuffer holds the raw bytes of an array (clbuf::DeviceBuffer<std::uint8_t>) plus
// the numpy dtype and shape it was uploaded with. Contiguous aligned input is uploaded straight
// from the array's memory; anything else is made contiguous once. Downloads read straight into a
// freshly allocated numpy array. The GIL is released during every transfer. Every failure is a
// clbuf.Error (a RuntimeError) with `.code`, the OpenCL error code, and nothing is changed.
// All OpenCL work, and every check of buffers, ranges and the manager's state, is the library's
// (clbuf::BufferManager); this file checks only what Python passes in.
#include <clbuf/clbuf.hpp>

#include <pybind11/eval.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

namespace py = pybind11;

namespace {

// numpy's array flags (numpy/ndarraytypes.h).
constexpr int npy_c_contiguous = 0x0001;
constexpr int npy_aligned = 0x0100;

// clbuf.Error, created in PYBIND11_MODULE; the module keeps it alive.
PyObject* error_type = nullptr;

/// Throws clbuf::Error as the library words it: "<operation>: <CL_NAME> (<code>): <details>".
[[noreturn]] void fail(const char* operation, cl_int code, const std::string& details) {
  std::string message = operation;
  message += ": ";
  if (code != CL_SUCCESS) {
    message += clbuf::error_name(code);
    message += " (" + std::to_string(code) + "): ";
  }
  message += details;
  throw clbuf::Error(code, message);
}

std::string text_of(const py::handle& object) { return py::str(object).cast<std::string>(); }

std::string type_name(const py::handle& object) {
  return text_of(py::type::handle_of(object).attr("__name__"));
}

std::string describe_shape(const std::vector<py::ssize_t>& shape) {
  std::string text = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    text += (i == 0 ? "" : ", ") + std::to_string(shape[i]);
  }
  return text + (shape.size() == 1 ? ",)" : ")");
}

std::string describe_dtype(const py::dtype& dtype) { return text_of(dtype); }

/// The dtypes whose values are plain bytes: bool, signed and unsigned integers, floats, complex.
bool is_numeric(const py::dtype& dtype) {
  const char kind = dtype.kind();
  return kind == 'b' || kind == 'i' || kind == 'u' || kind == 'f' || kind == 'c';
}

void require_numeric(const char* operation, const py::dtype& dtype) {
  if (!is_numeric(dtype)) {
    fail(operation, CL_INVALID_VALUE,
         "dtype " + describe_dtype(dtype) +
             " is not numeric; clbuf moves bool, int8-int64, uint8-uint64, float16-float64 and "
             "complex64/complex128 arrays");
  }
}

/// operator.index(value) as a non-negative size; `what` names the argument in messages.
std::size_t as_size(const char* operation, const py::handle& value, const char* what) {
  PyObject* index = PyNumber_Index(value.ptr());
  if (index == nullptr) {
    PyErr_Clear();
    fail(operation, CL_INVALID_VALUE,
         std::string(what) + " must be an integer, not " + type_name(value));
  }
  const py::int_ number = py::reinterpret_steal<py::int_>(index);
  if (PyObject_RichCompareBool(number.ptr(), py::int_(0).ptr(), Py_LT) == 1) {
    fail(operation, CL_INVALID_VALUE,
         std::string(what) + " must not be negative, got " + text_of(number));
  }
  const unsigned long long result = PyLong_AsUnsignedLongLong(number.ptr());
  if (PyErr_Occurred() != nullptr ||
      result > static_cast<unsigned long long>(std::numeric_limits<py::ssize_t>::max())) {
    PyErr_Clear();
    fail(operation, CL_INVALID_VALUE,
         std::string(what) + " " + text_of(number) + " is too large");
  }
  return static_cast<std::size_t>(result);
}

/// A shape given as an int or a sequence of ints (a tuple, a list, numpy integers).
std::vector<py::ssize_t> as_shape(const char* operation, const py::handle& value) {
  std::vector<py::ssize_t> shape;
  if (PySequence_Check(value.ptr()) == 0 || py::isinstance<py::str>(value) ||
      py::isinstance<py::bytes>(value)) {
    if (PyIndex_Check(value.ptr()) == 0) {
      fail(operation, CL_INVALID_VALUE,
           "shape must be an int or a sequence of ints, not " + type_name(value));
    }
    shape.push_back(static_cast<py::ssize_t>(as_size(operation, value, "shape")));
    return shape;
  }
  for (const py::handle extent : py::reinterpret_borrow<py::sequence>(value)) {
    shape.push_back(static_cast<py::ssize_t>(as_size(operation, extent, "each extent of shape")));
  }
  return shape;
}

py::dtype as_dtype(const char* operation, const py::handle& value) {
  py::dtype dtype;
  try {
    dtype = py::dtype::from_args(py::reinterpret_borrow<py::object>(value));
  } catch (const py::error_already_set& error) {
    fail(operation, CL_INVALID_VALUE,
         "dtype " + py::repr(value).cast<std::string>() + " is not a numpy dtype: " + error.what());
  }
  require_numeric(operation, dtype);
  return dtype;
}

/// Elements times item size, or an Error when it does not fit.
std::size_t shape_bytes(const char* operation, const std::vector<py::ssize_t>& shape,
                        const py::dtype& dtype) {
  std::size_t elements = 1;
  bool zero = false;
  bool overflow = false;
  for (py::ssize_t extent : shape) {
    const auto e = static_cast<std::size_t>(extent);
    if (e == 0) zero = true;
    if (!overflow && !clbuf::detail::checked_multiply(elements, e, elements)) overflow = true;
  }
  if (zero) return 0;
  std::size_t bytes = 0;
  if (overflow || !clbuf::detail::checked_multiply(
                      elements, static_cast<std::size_t>(dtype.itemsize()), bytes) ||
      bytes > static_cast<std::size_t>(std::numeric_limits<py::ssize_t>::max())) {
    fail(operation, CL_INVALID_VALUE,
         "shape " + describe_shape(shape) + " of " + describe_dtype(dtype) +
             " holds more bytes than fit in memory");
  }
  return bytes;
}

/// `value` as a C-contiguous, aligned ndarray of a numeric dtype: the array itself when it
/// already is one (no copy), else one contiguous copy.
py::array as_contiguous_array(const char* operation, const py::handle& value) {
  if (!py::isinstance<py::array>(value)) {
    fail(operation, CL_INVALID_VALUE, "data must be a numpy.ndarray, not " + type_name(value));
  }
  auto array = py::reinterpret_borrow<py::array>(value);
  require_numeric(operation, array.dtype());
  const int flags = array.flags();
  if ((flags & npy_c_contiguous) != 0 && (flags & npy_aligned) != 0) return array;
  return py::module_::import("numpy").attr("require")(array, py::none(), "CA");
}

/// Device memory holding an array's bytes, with the dtype and shape it was uploaded with.
struct Handle {
  clbuf::DeviceBuffer<std::uint8_t> memory;
  py::dtype dtype;
  std::vector<py::ssize_t> shape;

  std::size_t nbytes() const noexcept { return memory.size_bytes(); }
  std::size_t size() const noexcept {
    const auto item = static_cast<std::size_t>(dtype.itemsize());
    return item == 0 ? 0 : nbytes() / item;
  }
};

std::shared_ptr<Handle> as_handle(const char* operation, const py::handle& value,
                                  const char* what) {
  if (!py::isinstance<Handle>(value)) {
    fail(operation, CL_INVALID_MEM_OBJECT,
         std::string(what) + " must be a clbuf.DeviceBuffer, not " + type_name(value));
  }
  return value.cast<std::shared_ptr<Handle>>();
}

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
      py::gil_scoped_release release;
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
      py::gil_scoped_release release;
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

std::string to_string(clbuf::MemoryModel model) {
  switch (model) {
    case clbuf::MemoryModel::automatic:
      return "automatic";
    case clbuf::MemoryModel::host:
      return "host";
    case clbuf::MemoryModel::unified:
      return "unified";
    case clbuf::MemoryModel::discrete:
      return "discrete";
  }
  return "unknown";
}

py::dict to_dict(const clbuf::DirectionStats& d) {
  py::dict out;
  out["operations"] = d.operations;
  out["bytes"] = d.bytes;
  out["nanoseconds"] = d.nanoseconds;
  out["gigabytes_per_second"] = d.gigabytes_per_second();
  return out;
}

py::dict to_dict(const clbuf::TransferStats& stats) {
  py::dict pool;
  pool["hits"] = stats.pool.hits;
  pool["misses"] = stats.pool.misses;
  pool["released"] = stats.pool.released;
  pool["trims"] = stats.pool.trims;
  pool["retries"] = stats.pool.retries;
  pool["cached_buffers"] = stats.pool.cached_buffers;
  pool["cached_bytes"] = stats.pool.cached_bytes;
  pool["limit_bytes"] = stats.pool.limit_bytes;
  py::dict out;
  out["summary"] = stats.summary();
  out["upload"] = to_dict(stats.upload);
  out["download"] = to_dict(stats.download);
  out["copy"] = to_dict(stats.copy);
  out["pool"] = pool;
  return out;
}

/// clbuf.BufferManager: the seed's API over one clbuf::BufferManager. Every check of buffers,
/// ranges and the manager's state is the library's; this class checks only the Python side
/// (types, dtypes, shapes). The library's manager is safe to share between threads and
/// orders cleanup() after calls in progress, so no lock is needed here.
class Manager {
 public:
  explicit Manager(const std::optional<std::string>& selector) {
    py::gil_scoped_release release;
    manager_ = selector ? std::make_unique<clbuf::BufferManager>(*selector)
                        : std::make_unique<clbuf::BufferManager>();
  }

  const clbuf::DeviceInfo& device() const noexcept { return manager_->device(); }
  const std::string& selection_reason() const noexcept { return manager_->selection_reason(); }
  std::string memory_model() const { return to_string(manager_->memory_model()); }
  py::dict stats() const { return to_dict(manager_->stats()); }
  void reset_stats() noexcept { manager_->reset_stats(); }

  std::shared_ptr<Handle> upload_to_device(const py::handle& data) {
    const py::array array = as_contiguous_array("upload_to_device", data);
    auto handle = new_handle(array);
    const auto* bytes = static_cast<const std::uint8_t*>(array.data());
    const auto count = static_cast<std::size_t>(array.nbytes());
    {
      py::gil_scoped_release release;
      handle->memory = manager_->upload(bytes, count);
    }
    return handle;
  }

  py::array download_from_device(const py::handle& device_buffer, const py::handle& shape,
                                 const py::handle& dtype) {
    const char* op = "download_from_device";
    const std::shared_ptr<Handle> handle = as_handle(op, device_buffer, "device_buffer");
    py::array out = new_array(op, *handle, shape, dtype);
    auto* bytes = static_cast<std::uint8_t*>(out.mutable_data());
    const std::size_t count = handle->nbytes();
    {
      py::gil_scoped_release release;
      manager_->download(handle->memory, bytes, count, 0);
    }
    return out;
  }

  void copy_device_buffer(const py::handle& source_buffer, const py::handle& dest_buffer,
                          const py::handle& size_bytes) {
    const char* op = "copy_device_buffer";
    const std::shared_ptr<Handle> source = as_handle(op, source_buffer, "source_buffer");
    const std::shared_ptr<Handle> dest = as_handle(op, dest_buffer, "dest_buffer");
    const std::size_t bytes = as_size(op, size_bytes, "size_bytes");
    // Blocking: measured faster than copy_bytes_async on small copies (one queue command less on
    // a CPU device), and no slower on large ones once the next read waits for the copy.
    py::gil_scoped_release release;
    manager_->copy_bytes(source->memory, dest->memory, bytes);
  }

  std::unique_ptr<Pending> upload_async(const py::handle& data) {
    const py::array array = as_contiguous_array("upload_async", data);
    auto handle = new_handle(array);
    const auto* bytes = static_cast<const std::uint8_t*>(array.data());
    const auto count = static_cast<std::size_t>(array.nbytes());
    Pending::Upload future;
    {
      py::gil_scoped_release release;
      future = manager_->upload_async(bytes, count);
    }
    // The device reads the array in place: the Pending keeps it alive until the upload is done.
    return std::make_unique<Pending>(std::move(future), std::move(handle), array);
  }

  std::unique_ptr<Pending> download_async(const py::handle& device_buffer, const py::handle& shape,
                                          const py::handle& dtype) {
    const char* op = "download_async";
    const std::shared_ptr<Handle> handle = as_handle(op, device_buffer, "device_buffer");
    py::array out = new_array(op, *handle, shape, dtype);
    auto* bytes = static_cast<std::uint8_t*>(out.mutable_data());
    const std::size_t count = handle->nbytes();
    Pending::Download future;
    {
      py::gil_scoped_release release;
      future = manager_->download_async(handle->memory, bytes, count, 0);
    }
    return std::make_unique<Pending>(std::move(future), std::move(out));
  }

  void cleanup() {
    py::gil_scoped_release release;
    manager_->cleanup();
  }

 private:
  static std::shared_ptr<Handle> new_handle(const py::array& array) {
    auto handle = std::make_shared<Handle>();
    handle->dtype = array.dtype();
    handle->shape.assign(array.shape(), array.shape() + array.ndim());
    return handle;
  }

  /// An uninitialised array for the whole of `handle`: `shape`/`dtype`, or (None) as uploaded.
  static py::array new_array(const char* operation, const Handle& handle, const py::handle& shape,
                             const py::handle& dtype) {
    const py::dtype type = dtype.is_none() ? handle.dtype : as_dtype(operation, dtype);
    const std::vector<py::ssize_t> extents =
        shape.is_none() ? handle.shape : as_shape(operation, shape);
    const std::size_t bytes = shape_bytes(operation, extents, type);
    if (bytes != handle.nbytes()) {
      fail(operation, CL_INVALID_VALUE,
           "shape " + describe_shape(extents) + " of " + describe_dtype(type) + " holds " +
               std::to_string(bytes) + " bytes but the buffer holds " +
               std::to_string(handle.nbytes()) + " bytes (uploaded as shape " +
               describe_shape(handle.shape) + " of " + describe_dtype(handle.dtype) + ")");
    }
    return py::array(type, extents);
  }

  std::unique_ptr<clbuf::BufferManager> manager_;
};

const char* const error_class_source = R"(
class Error(RuntimeError):
    """A failed clbuf operation. `code` is the OpenCL error code (0 for misuse OpenCL has no
    code for, such as using a cleaned-up BufferManager); `name` is its name, e.g.
    "CL_INVALID_VALUE"; str(error) is the whole message."""

    def __init__(self, message="", code=0):
        super().__init__(message)
        self.code = code

    @property
    def name(self):
        return _error_name(self.code)
)";

}  // namespace

PYBIND11_MODULE(clbuf, m) {
  m.doc() = "Typed, checked host<->device transfers over OpenCL (the clbuf C++ library).";
  m.attr("__version__") = std::to_string(CLBUF_VERSION_MAJOR) + "." +
                          std::to_string(CLBUF_VERSION_MINOR) + "." +
                          std::to_string(CLBUF_VERSION_PATCH);

  m.def("_error_name", [](cl_int code) { return clbuf::error_name(code); });
  m.def("error_name", [](cl_int code) { return clbuf::error_name(code); }, py::arg("code"),
        "The name of an OpenCL error code, e.g. error_name(-30) == 'CL_INVALID_VALUE'.");
  py::dict scope;
  scope["__builtins__"] = py::module_::import("builtins");
  scope["__name__"] = "clbuf";
  scope["_error_name"] = m.attr("_error_name");
  py::exec(error_class_source, scope);
  py::object error = scope["Error"];
  m.attr("Error") = error;
  error_type = error.ptr();  // the module's attribute keeps it alive

  py::register_exception_translator([](std::exception_ptr pointer) {
    try {
      if (pointer) std::rethrow_exception(pointer);
    } catch (const clbuf::Error& e) {
      py::object instance = py::reinterpret_borrow<py::object>(error_type)(e.what(), e.code());
      PyErr_SetObject(error_type, instance.ptr());
    }
  });

  py::class_<clbuf::DeviceInfo>(m, "DeviceInfo", "What clbuf knows of one OpenCL device.")
      .def_readonly("name", &clbuf::DeviceInfo::name)
      .def_readonly("platform", &clbuf::DeviceInfo::platform)
      .def_property_readonly("type",
                             [](const clbuf::DeviceInfo& info) { return clbuf::to_string(info.type); })
      .def_readonly("global_mem_bytes", &clbuf::DeviceInfo::global_mem_bytes)
      .def_readonly("max_alloc_bytes", &clbuf::DeviceInfo::max_alloc_bytes)
      .def_readonly("platform_index", &clbuf::DeviceInfo::platform_index)
      .def_readonly("device_index", &clbuf::DeviceInfo::device_index)
      .def("__getitem__",
           [](const clbuf::DeviceInfo& info, const std::string& key) -> py::object {
             return py::cast(info).attr(key.c_str());
           })
      .def("__repr__", [](const clbuf::DeviceInfo& info) {
        return "<clbuf.DeviceInfo [" + std::to_string(info.platform_index) + ":" +
               std::to_string(info.device_index) + "] " + info.name + " (" +
               clbuf::to_string(info.type) + ", " + info.platform + ")>";
      });

  m.def("list_devices", &clbuf::list_devices,
        "Every device of every OpenCL platform, numbered as the 'P:D' selector counts them.");

  py::class_<Handle, std::shared_ptr<Handle>>(
      m, "DeviceBuffer",
      "Device memory holding an uploaded array's bytes, with its dtype and shape. Made by "
      "BufferManager.upload_to_device(); freed when the last reference goes.")
      .def_property_readonly("nbytes", &Handle::nbytes)
      .def_property_readonly("size", &Handle::size)
      .def_property_readonly("dtype", [](const Handle& h) { return h.dtype; })
      .def_property_readonly("shape", [](const Handle& h) { return py::tuple(py::cast(h.shape)); })
      .def("__len__",
           [](const Handle& h) -> py::ssize_t {
             if (h.shape.empty()) throw py::type_error("len() of a 0-d DeviceBuffer");
             return h.shape[0];
           })
      .def("__repr__", [](const Handle& h) {
        return "<clbuf.DeviceBuffer shape=" + describe_shape(h.shape) +
               " dtype=" + describe_dtype(h.dtype) + " nbytes=" + std::to_string(h.nbytes()) +
               ">";
      });

  py::class_<Pending>(m, "Future",
                      "An asynchronous transfer in flight. The host array it reads or writes "
                      "must not be modified until wait() returns.")
      .def("wait", &Pending::wait, "Blocks until the transfer is done (the GIL is released).")
      .def("ready", &Pending::ready, "True once the transfer is done.")
      .def("get", &Pending::get,
           "wait(), then the result: a DeviceBuffer for upload_async, an ndarray for "
           "download_async.");

  py::class_<Manager>(m, "BufferManager",
                      "Manages buffer transfers between host numpy arrays and one OpenCL device.")
      .def(py::init<const std::optional<std::string>&>(), py::arg("selector") = py::none(),
           "Picks a device: `selector` ('gpu', 'cpu', 'accelerator', 'P:D' or part of a device "
           "name), else CLBUF_DEVICE, else the first GPU, else the first CPU device.")
      .def("upload_to_device", &Manager::upload_to_device, py::arg("data"),
           "Copies a numpy array into new device memory; returns a DeviceBuffer.")
      .def("download_from_device", &Manager::download_from_device, py::arg("device_buffer"),
           py::arg("shape") = py::none(), py::arg("dtype") = py::none(),
           "Reads a whole DeviceBuffer into a new array of `shape` and `dtype` (None: as "
           "uploaded), whose byte count must equal the buffer's.")
      .def("copy_device_buffer", &Manager::copy_device_buffer, py::arg("source_buffer"),
           py::arg("dest_buffer"), py::arg("size_bytes"),
           "Copies the first `size_bytes` bytes of source_buffer to dest_buffer on the device.")
      .def("upload_async", &Manager::upload_async, py::arg("data"),
           "Starts an upload; Future.get() returns the DeviceBuffer. Do not modify `data` until "
           "the Future is done.")
      .def("download_async", &Manager::download_async, py::arg("device_buffer"),
           py::arg("shape") = py::none(), py::arg("dtype") = py::none(),
           "Starts a download; Future.get() returns the ndarray.")
      .def("cleanup", &Manager::cleanup,
           "Waits for queued work, then releases the queue and context. Idempotent; every later "
           "transfer raises clbuf.Error (code 0).")
      .def_property_readonly("device", &Manager::device, py::return_value_policy::copy)
      .def_property_readonly("selection_reason", &Manager::selection_reason)
      .def_property_readonly("memory_model", &Manager::memory_model,
                             "The transfer paths in use: 'host' (a CPU device; bytes move by "
                             "memcpy), 'unified' (shares host memory) or 'discrete' (own memory; "
                             "large transfers are staged through pinned memory).")
      .def("stats", &Manager::stats,
           "The transfers so far: a dict with 'summary' (one line of text), 'upload', "
           "'download' and 'copy' (each a dict of operations, bytes, nanoseconds and "
           "gigabytes_per_second) and 'pool' (hits, misses, released, trims, retries, "
           "cached_buffers, cached_bytes, limit_bytes). Still answers after cleanup().")
      .def("reset_stats", &Manager::reset_stats, "Sets the transfer counters of stats() to 0.")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__",
           [](Manager& self, const py::args&) {
             self.cleanup();
             return false;
           });
}
