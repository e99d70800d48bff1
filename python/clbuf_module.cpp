// SPDX-License-Identifier: MIT
// The extension module `clbuf._clbuf` of the Python package `clbuf` (python/clbuf/): the seed's
// BufferManager API (upload_to_device, download_from_device, copy_device_buffer, cleanup) over
// the clbuf C++ core.
//
// A clbuf.DeviceBuffer holds the raw bytes of an array (clbuf::DeviceBuffer<std::uint8_t>) plus
// the numpy dtype and shape it was uploaded with. Contiguous aligned input is uploaded straight
// from the array's memory; anything else is made contiguous once. Downloads read straight into a
// freshly allocated numpy array. The GIL is released during every transfer (through NoGil, which
// also keeps daemon threads from aborting the process at exit). Every failure is a clbuf.Error (a
// RuntimeError) with `.code`, the OpenCL error code, and nothing is changed; an object Python
// made with cls.__new__(cls) and no __init__ holds no C++ object, and every method of it raises
// clbuf.Error (code 0) instead of touching one.
// All OpenCL work, and every check of buffers, ranges and the manager's state, is the library's
// (clbuf::BufferManager); this file checks only what Python passes in.
#include <clbuf/clbuf.hpp>

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

namespace py = pybind11;

namespace {

// numpy's array flags (numpy/ndarraytypes.h).
constexpr int npy_c_contiguous = 0x0001;
constexpr int npy_ensure_array = 0x0040;
constexpr int npy_aligned = 0x0100;

// clbuf.Error (python/clbuf/__init__.py), looked up in PYBIND11_MODULE; the module keeps it alive.
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

/// A type's name without its module ("ndarray", "int"), read from the type object.
std::string name_of(const PyTypeObject* type) {
  const char* name = type->tp_name;
  const char* dot = std::strrchr(name, '.');
  return dot != nullptr ? dot + 1 : name;
}

// ---- Releasing the GIL, and daemon threads at interpreter exit ------------------------------
//
// Python exits without waiting for daemon threads. Once Py_FinalizeEx has marked the runtime as
// finalizing, a thread other than the finalizing one that takes the GIL back
// (PyEval_RestoreThread) is ended on the spot with pthread_exit(), i.e. a forced unwind. Out of
// py::gil_scoped_release's destructor (noexcept) that is std::terminate(): "terminate called
// without an active exception", and the process aborts. Letting the unwind through would be no
// better: every C++ frame it crossed would drop Python references without the GIL while the
// main thread tears the interpreter down.
//
// So the module releases the GIL only through NoGil, and once the interpreter is exiting a
// thread other than the exiting one never takes the GIL back: it sleeps forever instead, as
// CPython 3.14 itself does with such threads (PyThread_hang_thread). It holds neither the GIL
// nor any lock of this module's or the library's (those are scoped inside the NoGil), it never
// touches a Python object again, and the process ends around it.
//
// "Is the interpreter exiting?" must not race with the exit: a thread that found it was not and
// is waiting for the GIL must get it before the runtime is marked finalizing. Python's atexit
// callbacks run in Py_FinalizeEx after the non-daemon threads are joined and before the runtime
// is marked finalizing, so the module registers one (wait_for_threads_at_exit) that sets
// `exiting`, then releases the GIL and waits until no thread is inside a NoGil: each has either
// taken the GIL back normally or gone to sleep. A thread that enters a NoGil after that sleeps
// at once, before any OpenCL work, so no transfer is still running while the process exits
// (when the OpenCL driver's own exit handlers run). The wait is as long as the transfers in
// progress. The runtime's finalizing flag is checked as well, for an exit that never ran the
// callback. (A program that calls the private atexit._run_exitfuncs() itself and goes on would
// put its other threads to sleep at their next transfer.)
std::atomic<bool> exiting{false};
std::atomic<long> threads_without_gil{0};
// The thread that may still take the GIL while exiting: the main thread until
// wait_for_threads_at_exit, then the thread that ran it (the one that finalizes).
std::atomic<unsigned long> exiting_thread{0};

bool interpreter_finalizing() noexcept {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing() != 0;
#else
  return _Py_IsFinalizing() != 0;
#endif
}

/// True on a thread that must not take the GIL again: the interpreter is exiting and this is not
/// the thread doing it.
bool must_not_take_the_gil() noexcept {
  if (!exiting.load() && !interpreter_finalizing()) return false;
  return PyThread_get_thread_ident() != exiting_thread.load();
}

[[noreturn]] void sleep_forever() noexcept {
  for (;;) std::this_thread::sleep_for(std::chrono::hours(24));
}

/// The GIL released for the object's lifetime, like py::gil_scoped_release, except at exit (see
/// above): a thread that may not take the GIL back sleeps forever rather than abort the process.
/// Made and destroyed with the GIL held, on the same thread.
class NoGil {
 public:
  NoGil() {
    // Counted before the check, so that wait_for_threads_at_exit cannot miss this thread.
    threads_without_gil.fetch_add(1);
    if (must_not_take_the_gil()) {
      threads_without_gil.fetch_sub(1);
      PyEval_SaveThread();
      sleep_forever();
    }
    state_ = PyEval_SaveThread();
  }
  NoGil(const NoGil&) = delete;
  NoGil& operator=(const NoGil&) = delete;
  ~NoGil() {
    if (must_not_take_the_gil()) {
      threads_without_gil.fetch_sub(1);
      sleep_forever();
    }
    PyEval_RestoreThread(state_);
    threads_without_gil.fetch_sub(1);
  }

 private:
  PyThreadState* state_ = nullptr;
};

/// The atexit callback (the GIL held): from now on only this thread takes the GIL back; waits,
/// without the GIL, until every other thread has left its NoGil or gone to sleep in it.
void wait_for_threads_at_exit() {
  exiting_thread.store(PyThread_get_thread_ident());
  exiting.store(true);
  PyThreadState* state = PyEval_SaveThread();
  while (threads_without_gil.load() != 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  PyEval_RestoreThread(state);
}

// ---- Objects Python made with __new__ alone ------------------------------------------------
//
// cls.__new__(cls) without __init__ gives an instance whose C++ object was never constructed.
// pybind11 does not refuse it: a method that takes `self` as T& or T* gets raw, unconstructed
// memory (pybind11 allocates it on first use), and stats() or cleanup() then read garbage. What
// pybind11 does track is whether the instance's holder was constructed, and it refuses to cast
// an instance without one to the holder type. So every class here is held by a std::shared_ptr,
// and every method and property takes `self` as a Self<T> (its type checked, nothing read) and
// gets the object through initialised(): the holder, or clbuf.Error (code 0) saying the object
// was never initialised. (The shared_ptr also keeps the object alive for the call's length.)

template <class T>
struct PythonName;

template <class T>
[[noreturn]] void fail_uninitialised(const char* member) {
  const std::string name = PythonName<T>::name;
  throw clbuf::Error(CL_SUCCESS, name + "." + member + ": this clbuf." + name +
                                     " was never initialised (made by clbuf." + name +
                                     ".__new__ without __init__); " + PythonName<T>::made_by);
}

/// The C++ object of `self`, an instance of T's Python class; nullptr when it has none.
template <class T>
std::shared_ptr<T> held_object(const py::handle& self) {
  try {
    return self.cast<std::shared_ptr<T>>();
  } catch (const py::cast_error&) {  // "Unable to cast from non-held to held instance"
    return nullptr;
  }
}

/// `self` of a method of T's Python class (pybind11 raises its usual TypeError for another
/// object) and its C++ object, null when it was never initialised; initialised() checks that.
template <class T>
struct Self {
  py::handle object;
  std::shared_ptr<T> held;
};

/// The C++ object of `self`; clbuf.Error (code 0) when it was never initialised.
template <class T>
const std::shared_ptr<T>& initialised(const Self<T>& self, const char* member) {
  if (!self.held) fail_uninitialised<T>(member);
  return self.held;
}

/// A method as a function of a checked `self`.
template <class C, class R, class... A>
auto checked(const char* member, R (C::*method)(A...)) {
  return [member, method](Self<C> self, A... args) -> R {
    return ((*initialised(self, member)).*method)(std::forward<A>(args)...);
  };
}
template <class C, class R, class... A>
auto checked(const char* member, R (C::*method)(A...) const) {
  return [member, method](Self<C> self, A... args) -> R {
    return ((*initialised(self, member)).*method)(std::forward<A>(args)...);
  };
}

/// BufferManager's `selector` argument, as given; as_selector() reads it.
struct Selector {
  py::handle object;
};

}  // namespace

namespace pybind11 {
namespace detail {
template <class T>
struct type_caster<Self<T>> {
  // The name of T's Python class in signatures and docstrings, as for a T& self.
  PYBIND11_TYPE_CASTER(Self<T>, make_caster<T>::name);
  bool load(handle source, bool convert) {
    if (source.is_none()) return false;  // the holder caster would take None for a null holder
    copyable_holder_caster<T, std::shared_ptr<T>> holder;
    try {
      if (!holder.load(source, convert)) return false;  // not a T
      value.held = static_cast<std::shared_ptr<T>&>(holder);
    } catch (const cast_error&) {  // a T without a C++ object: "non-held to held instance"
      value.held = nullptr;
    }
    value.object = source;
    return true;
  }
  static handle cast(const Self<T>& self, return_value_policy /*policy*/, handle /*parent*/) {
    return self.object.inc_ref();
  }
};
template <>
struct type_caster<Selector> {
  // Any object: as_selector() checks it, so that a wrong one gets clbuf.Error with a message
  // saying what is wrong, not pybind11's "incompatible constructor arguments".
  PYBIND11_TYPE_CASTER(Selector, const_name("Optional[str]"));
  bool load(handle source, bool /*convert*/) {
    value.object = source;
    return true;
  }
  static handle cast(const Selector& selector, return_value_policy /*policy*/, handle /*parent*/) {
    return selector.object.inc_ref();
  }
};
}  // namespace detail
}  // namespace pybind11

namespace {

/// str(object) as UTF-8; characters UTF-8 cannot hold (lone surrogates) as backslash escapes.
std::string text_of(const py::handle& object) {
  const py::str text(object);
  const auto bytes = py::reinterpret_steal<py::object>(
      PyUnicode_AsEncodedString(text.ptr(), "utf-8", "backslashreplace"));
  if (!bytes) throw py::error_already_set();
  return py::reinterpret_borrow<py::bytes>(bytes).cast<std::string>();
}

/// The object's type's name ("ndarray", "int"): read from the type object, so no Python code
/// (a metaclass's __getattribute__) runs.
std::string type_name(const py::handle& object) { return name_of(Py_TYPE(object.ptr())); }

/// The Python exception being raised, as "TypeError: message", cleared.
std::string take_python_error() {
  PyObject* type = nullptr;
  PyObject* value = nullptr;
  PyObject* trace = nullptr;
  PyErr_Fetch(&type, &value, &trace);
  PyErr_NormalizeException(&type, &value, &trace);
  const auto owned_type = py::reinterpret_steal<py::object>(type);
  const auto owned_value = py::reinterpret_steal<py::object>(value);
  const auto owned_trace = py::reinterpret_steal<py::object>(trace);
  if (!owned_type) return "unknown error";
  std::string text = name_of(reinterpret_cast<PyTypeObject*>(owned_type.ptr()));
  if (owned_value) {
    try {
      const std::string message = text_of(owned_value);
      if (!message.empty()) text += ": " + message;
    } catch (const py::error_already_set&) {  // a str() that raises: the type alone
    }
  }
  return text;
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

/// operator.index(value) as a non-negative size; `what` names the argument in messages. An
/// object without __index__, or whose __index__ raises TypeError, is not an integer (clbuf.Error);
/// any other exception its __index__ raises is the caller's own and propagates.
std::size_t as_size(const char* operation, const py::handle& value, const char* what) {
  PyObject* index = PyNumber_Index(value.ptr());
  if (index == nullptr) {
    if (PyErr_ExceptionMatches(PyExc_TypeError) == 0) throw py::error_already_set();
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
    fail(operation, CL_INVALID_VALUE, std::string(what) + " " + text_of(number) + " is too large");
  }
  return static_cast<std::size_t>(result);
}

/// The most dimensions a numpy array may have (NPY_MAXDIMS): 32, and 64 from numpy 2.0. Set
/// from numpy's version when the module is imported.
std::size_t numpy_max_dims = 32;

/// At most the first `limit` characters of repr(value), for messages.
std::string short_repr(const py::handle& value, std::size_t limit = 80) {
  std::string text;
  try {
    text = text_of(py::repr(value));
  } catch (const py::error_already_set&) {
    return "<" + type_name(value) + " object>";
  }
  if (text.size() > limit) text = text.substr(0, limit) + "...";
  return text;
}

/// A shape given as an int or a sequence of ints (a tuple, a list, numpy integers, an integer
/// ndarray of at most one dimension). More dimensions than numpy allows are refused here, before
/// anything is allocated or transferred.
std::vector<py::ssize_t> as_shape(const char* operation, const py::handle& value) {
  std::vector<py::ssize_t> shape;
  const bool zero_d_array =
      py::isinstance<py::array>(value) && py::reinterpret_borrow<py::array>(value).ndim() == 0;
  if (zero_d_array || PySequence_Check(value.ptr()) == 0 || py::isinstance<py::str>(value) ||
      py::isinstance<py::bytes>(value)) {
    if (PyIndex_Check(value.ptr()) == 0) {
      fail(operation, CL_INVALID_VALUE,
           "shape must be an int or a sequence of ints, not " + type_name(value));
    }
    shape.push_back(static_cast<py::ssize_t>(as_size(operation, value, "shape")));
    return shape;
  }
  const Py_ssize_t count = PySequence_Size(value.ptr());
  if (count < 0) {
    const std::string why = take_python_error();
    fail(operation, CL_INVALID_VALUE,
         "shape must be an int or a sequence of ints, not " + type_name(value) + " (" + why + ")");
  }
  if (static_cast<std::size_t>(count) > numpy_max_dims) {
    fail(operation, CL_INVALID_VALUE,
         "shape " + short_repr(value) + " has " + std::to_string(count) +
             " dimensions; numpy arrays have at most " + std::to_string(numpy_max_dims));
  }
  shape.reserve(static_cast<std::size_t>(count));
  for (Py_ssize_t i = 0; i < count; ++i) {
    const auto extent = py::reinterpret_steal<py::object>(PySequence_GetItem(value.ptr(), i));
    if (!extent) throw py::error_already_set();  // the sequence's own error, e.g. IndexError
    shape.push_back(static_cast<py::ssize_t>(as_size(operation, extent, "each extent of shape")));
  }
  return shape;
}

py::dtype as_dtype(const char* operation, const py::handle& value) {
  py::dtype dtype;
  try {
    dtype = py::dtype::from_args(py::reinterpret_borrow<py::object>(value));
  } catch (py::error_already_set& error) {
    error.restore();
    const std::string why = take_python_error();
    fail(operation, CL_INVALID_VALUE,
         "dtype " + short_repr(value) + " is not a numpy dtype: " + why);
  }
  require_numeric(operation, dtype);
  return dtype;
}

/// The bytes of an array of `shape` and `dtype`, or an Error when numpy could not make it. As
/// numpy does, the size check covers the non-zero extents even when another extent is 0.
std::size_t shape_bytes(const char* operation, const std::vector<py::ssize_t>& shape,
                        const py::dtype& dtype) {
  std::size_t bytes = static_cast<std::size_t>(dtype.itemsize());
  bool zero = false;
  for (py::ssize_t extent : shape) {
    const auto e = static_cast<std::size_t>(extent);
    if (e == 0) {
      zero = true;
      continue;
    }
    if (!clbuf::detail::checked_multiply(bytes, e, bytes) ||
        bytes > static_cast<std::size_t>(std::numeric_limits<py::ssize_t>::max())) {
      fail(operation, CL_INVALID_VALUE,
           "shape " + describe_shape(shape) + " of " + describe_dtype(dtype) +
               " holds more bytes than fit in memory");
    }
  }
  return zero ? 0 : bytes;
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
  // One contiguous copy of the same dtype, a plain ndarray (numpy's C API: no Python code, not
  // even a subclass's __array_finalize__, runs).
  auto copy = py::reinterpret_steal<py::array>(py::detail::npy_api::get().PyArray_FromAny_(
      array.ptr(), nullptr, 0, 0, npy_c_contiguous | npy_aligned | npy_ensure_array, nullptr));
  if (!copy) throw py::error_already_set();  // MemoryError
  return copy;
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

template <>
struct PythonName<Handle> {
  static constexpr const char* name = "DeviceBuffer";
  static constexpr const char* made_by =
      "DeviceBuffers come from upload_to_device() and upload_async()";
};

template <>
struct PythonName<clbuf::DeviceInfo> {
  static constexpr const char* name = "DeviceInfo";
  static constexpr const char* made_by =
      "DeviceInfos come from BufferManager.device and list_devices()";
};

std::shared_ptr<Handle> as_handle(const char* operation, const py::handle& value,
                                  const char* what) {
  if (!py::isinstance<Handle>(value)) {
    fail(operation, CL_INVALID_MEM_OBJECT,
         std::string(what) + " must be a clbuf.DeviceBuffer, not " + type_name(value));
  }
  std::shared_ptr<Handle> handle = held_object<Handle>(value);
  if (!handle) {
    fail(operation, CL_INVALID_MEM_OBJECT,
         std::string(what) +
             " is an uninitialised clbuf.DeviceBuffer (made by clbuf.DeviceBuffer.__new__); "
             "DeviceBuffers come from upload_to_device() and upload_async()");
  }
  return handle;
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
    NoGil release;
    manager_ = selector ? std::make_unique<clbuf::BufferManager>(*selector)
                        : std::make_unique<clbuf::BufferManager>();
  }

  const clbuf::DeviceInfo& device() const noexcept { return manager_->device(); }
  const std::string& selection_reason() const noexcept { return manager_->selection_reason(); }
  std::string memory_model() const { return clbuf::to_string(manager_->memory_model()); }
  py::dict stats() const { return to_dict(manager_->stats()); }
  void reset_stats() noexcept { manager_->reset_stats(); }

  std::shared_ptr<Handle> upload_to_device(const py::handle& data) {
    const py::array array = as_contiguous_array("upload_to_device", data);
    auto handle = new_handle(array);
    const auto* bytes = static_cast<const std::uint8_t*>(array.data());
    const auto count = static_cast<std::size_t>(array.nbytes());
    {
      NoGil release;
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
      NoGil release;
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
    NoGil release;
    manager_->copy_bytes(source->memory, dest->memory, bytes);
  }

  std::shared_ptr<Pending> upload_async(const py::handle& data) {
    const py::array array = as_contiguous_array("upload_async", data);
    auto handle = new_handle(array);
    const auto* bytes = static_cast<const std::uint8_t*>(array.data());
    const auto count = static_cast<std::size_t>(array.nbytes());
    Pending::Upload future;
    {
      NoGil release;
      future = manager_->upload_async(bytes, count);
    }
    // The device reads the array in place: the Pending keeps it alive until the upload is done.
    return std::make_shared<Pending>(std::move(future), std::move(handle), array);
  }

  std::shared_ptr<Pending> download_async(const py::handle& device_buffer, const py::handle& shape,
                                          const py::handle& dtype) {
    const char* op = "download_async";
    const std::shared_ptr<Handle> handle = as_handle(op, device_buffer, "device_buffer");
    py::array out = new_array(op, *handle, shape, dtype);
    auto* bytes = static_cast<std::uint8_t*>(out.mutable_data());
    const std::size_t count = handle->nbytes();
    Pending::Download future;
    {
      NoGil release;
      future = manager_->download_async(handle->memory, bytes, count, 0);
    }
    return std::make_shared<Pending>(std::move(future), std::move(out));
  }

  void cleanup() {
    NoGil release;
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

template <>
struct PythonName<Manager> {
  static constexpr const char* name = "BufferManager";
  static constexpr const char* made_by = "create one with clbuf.BufferManager(selector)";
};

/// BufferManager's `selector`: None or a str that UTF-8 can hold.
std::optional<std::string> as_selector(const py::handle& value) {
  const char* op = "BufferManager";
  if (value.is_none()) return std::nullopt;
  if (!PyUnicode_Check(value.ptr())) {
    fail(op, CL_INVALID_VALUE, "selector must be a str or None, not " + type_name(value));
  }
  Py_ssize_t size = 0;
  const char* text = PyUnicode_AsUTF8AndSize(value.ptr(), &size);
  if (text == nullptr) {  // a lone surrogate such as '\ud800'
    const std::string why = take_python_error();
    const auto shown = py::reinterpret_steal<py::object>(PyObject_ASCII(value.ptr()));
    if (!shown) PyErr_Clear();
    fail(op, CL_INVALID_VALUE,
         "selector " + (shown ? text_of(shown) : std::string("?")) + " is not valid UTF-8 text (" +
             why + ")");
  }
  return std::string(text, static_cast<std::size_t>(size));
}

}  // namespace

// The private extension of the package `clbuf` (python/clbuf/__init__.py), which defines the
// Python class clbuf.Error before it imports this module.
PYBIND11_MODULE(_clbuf, m) {
  m.doc() = "Typed, checked host<->device transfers over OpenCL (the clbuf C++ library).";
  m.attr("__version__") = std::to_string(CLBUF_VERSION_MAJOR) + "." +
                          std::to_string(CLBUF_VERSION_MINOR) + "." +
                          std::to_string(CLBUF_VERSION_PATCH);

  m.def(
      "error_name", [](cl_int code) { return clbuf::error_name(code); }, py::arg("code"),
      "The name of an OpenCL error code, e.g. error_name(-30) == 'CL_INVALID_VALUE'.");
  py::object error = py::module_::import("clbuf").attr("Error");
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

  // Objects made by __new__ alone hold no C++ object: every method and property below takes
  // `self` as a Self<T> and gets the object through initialised() or checked(); repr() answers
  // all the same. Every class is held by a std::shared_ptr for that (see held_object()).
  using Info = clbuf::DeviceInfo;
  py::class_<Info, std::shared_ptr<Info>>(m, "DeviceInfo", "What clbuf knows of one OpenCL device.")
      .def_property_readonly("name",
                             [](Self<Info> self) { return initialised(self, "name")->name; })
      .def_property_readonly(
          "platform", [](Self<Info> self) { return initialised(self, "platform")->platform; })
      .def_property_readonly(
          "type", [](Self<Info> self) { return clbuf::to_string(initialised(self, "type")->type); })
      .def_property_readonly(
          "global_mem_bytes",
          [](Self<Info> self) { return initialised(self, "global_mem_bytes")->global_mem_bytes; })
      .def_property_readonly(
          "max_alloc_bytes",
          [](Self<Info> self) { return initialised(self, "max_alloc_bytes")->max_alloc_bytes; })
      .def_property_readonly(
          "platform_index",
          [](Self<Info> self) { return initialised(self, "platform_index")->platform_index; })
      .def_property_readonly(
          "device_index",
          [](Self<Info> self) { return initialised(self, "device_index")->device_index; })
      .def("__getitem__",
           [](Self<Info> self, const py::handle& key) -> py::object {
             initialised(self, "__getitem__");
             // The fields only: any other key (an attribute such as "__class__" included) is a
             // KeyError, as in a dict.
             static const char* const fields[] = {
                 "name",           "platform",    "type", "global_mem_bytes", "max_alloc_bytes",
                 "platform_index", "device_index"};
             if (py::isinstance<py::str>(key)) {
               for (const char* field : fields) {
                 if (py::str(field).equal(key)) return self.object.attr(field);
               }
             }
             PyErr_SetObject(PyExc_KeyError, key.ptr());
             throw py::error_already_set();
           })
      .def("__repr__", [](Self<Info> self) -> std::string {
        const std::shared_ptr<Info>& info = self.held;
        if (!info) return "<clbuf.DeviceInfo (never initialised)>";
        return "<clbuf.DeviceInfo [" + std::to_string(info->platform_index) + ":" +
               std::to_string(info->device_index) + "] " + info->name + " (" +
               clbuf::to_string(info->type) + ", " + info->platform + ")>";
      });

  m.def("list_devices", &clbuf::list_devices,
        "Every device of every OpenCL platform, numbered as the 'P:D' selector counts them.");

  py::class_<Handle, std::shared_ptr<Handle>>(
      m, "DeviceBuffer",
      "Device memory holding an uploaded array's bytes, with its dtype and shape. Made by "
      "BufferManager.upload_to_device(); freed when the last reference goes.")
      .def_property_readonly("nbytes", checked("nbytes", &Handle::nbytes))
      .def_property_readonly("size", checked("size", &Handle::size))
      .def_property_readonly("dtype",
                             [](Self<Handle> self) { return initialised(self, "dtype")->dtype; })
      .def_property_readonly(
          "shape",
          [](Self<Handle> self) { return py::tuple(py::cast(initialised(self, "shape")->shape)); })
      .def("__len__",
           [](Self<Handle> self) -> py::ssize_t {
             const std::shared_ptr<Handle> h = initialised(self, "__len__");
             if (h->shape.empty()) throw py::type_error("len() of a 0-d DeviceBuffer");
             return h->shape[0];
           })
      .def("__repr__", [](Self<Handle> self) -> std::string {
        const std::shared_ptr<Handle>& h = self.held;
        if (!h) return "<clbuf.DeviceBuffer (never initialised)>";
        return "<clbuf.DeviceBuffer shape=" + describe_shape(h->shape) +
               " dtype=" + describe_dtype(h->dtype) + " nbytes=" + std::to_string(h->nbytes()) +
               ">";
      });

  py::class_<Pending, std::shared_ptr<Pending>>(
      m, "Future",
      "An asynchronous transfer in flight. The host array it reads or writes "
      "must not be modified until wait() returns.")
      .def("wait", checked("wait", &Pending::wait),
           "Blocks until the transfer is done (the GIL is released).")
      .def("ready", checked("ready", &Pending::ready), "True once the transfer is done.")
      .def("get", checked("get", &Pending::get),
           "wait(), then the result: a DeviceBuffer for upload_async, an ndarray for "
           "download_async.");

  py::class_<Manager, std::shared_ptr<Manager>>(
      m, "BufferManager",
      "Manages buffer transfers between host numpy arrays and one OpenCL device.")
      .def(py::init([](Selector selector) {
             return std::make_shared<Manager>(as_selector(selector.object));
           }),
           py::arg("selector") = py::none(),
           "Picks a device: `selector` ('gpu', 'cpu', 'accelerator', 'P:D' or part of a device "
           "name), else CLBUF_DEVICE, else the first GPU, else the first CPU device.")
      .def("upload_to_device", checked("upload_to_device", &Manager::upload_to_device),
           py::arg("data"), "Copies a numpy array into new device memory; returns a DeviceBuffer.")
      .def("download_from_device", checked("download_from_device", &Manager::download_from_device),
           py::arg("device_buffer"), py::arg("shape") = py::none(), py::arg("dtype") = py::none(),
           "Reads a whole DeviceBuffer into a new array of `shape` and `dtype` (None: as "
           "uploaded), whose byte count must equal the buffer's.")
      .def("copy_device_buffer", checked("copy_device_buffer", &Manager::copy_device_buffer),
           py::arg("source_buffer"), py::arg("dest_buffer"), py::arg("size_bytes"),
           "Copies the first `size_bytes` bytes of source_buffer to dest_buffer on the device.")
      .def("upload_async", checked("upload_async", &Manager::upload_async), py::arg("data"),
           "Starts an upload; Future.get() returns the DeviceBuffer. Do not modify `data` until "
           "the Future is done.")
      .def("download_async", checked("download_async", &Manager::download_async),
           py::arg("device_buffer"), py::arg("shape") = py::none(), py::arg("dtype") = py::none(),
           "Starts a download; Future.get() returns the ndarray.")
      .def("cleanup", checked("cleanup", &Manager::cleanup),
           "Waits for queued work, then releases the queue and context. Idempotent; every later "
           "transfer raises clbuf.Error (code 0).")
      .def_property_readonly("device", checked("device", &Manager::device),
                             py::return_value_policy::copy)
      .def_property_readonly("selection_reason",
                             checked("selection_reason", &Manager::selection_reason))
      .def_property_readonly("memory_model", checked("memory_model", &Manager::memory_model),
                             "The transfer paths in use: 'host' (a CPU device; bytes move by "
                             "memcpy), 'unified' (shares host memory) or 'discrete' (own memory; "
                             "large transfers are staged through pinned memory).")
      .def("stats", checked("stats", &Manager::stats),
           "The transfers so far: a dict with 'summary' (one line of text), 'upload', "
           "'download' and 'copy' (each a dict of operations, bytes, nanoseconds and "
           "gigabytes_per_second) and 'pool' (hits, misses, released, trims, retries, "
           "cached_buffers, cached_bytes, limit_bytes). Still answers after cleanup().")
      .def("reset_stats", checked("reset_stats", &Manager::reset_stats),
           "Sets the transfer counters of stats() to 0.")
      .def("__enter__",
           [](Self<Manager> self) {
             initialised(self, "__enter__");
             return py::reinterpret_borrow<py::object>(self.object);
           })
      .def("__exit__", [](Self<Manager> self, const py::args&) {
        initialised(self, "__exit__")->cleanup();
        return false;
      });

  // numpy's limit on dimensions (NPY_MAXDIMS) went from 32 to 64 in numpy 2.0.
  const std::string numpy_version = text_of(py::module_::import("numpy").attr("__version__"));
  int numpy_major = 0;
  for (const char c : numpy_version) {
    if (c < '0' || c > '9') break;
    numpy_major = numpy_major * 10 + (c - '0');
  }
  numpy_max_dims = numpy_major >= 2 ? 64 : 32;

  // Interpreter exit with daemon threads still transferring: see NoGil.
  exiting_thread.store(
      py::module_::import("threading").attr("main_thread")().attr("ident").cast<unsigned long>());
  py::module_::import("atexit").attr("register")(py::cpp_function(&wait_for_threads_at_exit));
}
