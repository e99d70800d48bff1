// SPDX-License-Identifier: MIT
// The shared parts of the extension (common.hpp).
#include "common.hpp"

#include <climits>

namespace clbuf_python {

PyObject* error_type = nullptr;

/// Throws clbuf::Error worded by the library's own message function (error.hpp's
/// detail::error_message: "<operation>: <CL_NAME> (<code>): <details>", a NUL written \0).
[[noreturn]] void fail(const char* operation, cl_int code, const std::string& details) {
  throw clbuf::Error(code, clbuf::detail::error_message(operation, code, details));
}

void rethrow_as(const std::string& operation, const clbuf::Error& error) {
  const std::string message = error.what();
  const std::size_t end = message.find(": ");
  if (end != std::string::npos && message.compare(0, end, operation) == 0) throw;
  throw clbuf::Error(error.code(),
                     operation + (end == std::string::npos ? ": " + message : message.substr(end)));
}

void show_as(const py::handle& cls, const char* module, const char* name) {
  cls.attr("__module__") = module;
  cls.attr("__name__") = name;
  cls.attr("__qualname__") = name;
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
namespace {

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

}  // namespace

NoGil::NoGil() {
  // Counted before the check, so that wait_for_threads_at_exit cannot miss this thread.
  threads_without_gil.fetch_add(1);
  if (must_not_take_the_gil()) {
    threads_without_gil.fetch_sub(1);
    PyEval_SaveThread();
    sleep_forever();
  }
  state_ = PyEval_SaveThread();
}

NoGil::~NoGil() {
  if (must_not_take_the_gil()) {
    threads_without_gil.fetch_sub(1);
    sleep_forever();
  }
  PyEval_RestoreThread(state_);
  threads_without_gil.fetch_sub(1);
}

namespace {

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

}  // namespace

void register_exit_handler() {
  // Interpreter exit with daemon threads still transferring: see NoGil.
  exiting_thread.store(
      py::module_::import("threading").attr("main_thread")().attr("ident").cast<unsigned long>());
  py::module_::import("atexit").attr("register")(py::cpp_function(&wait_for_threads_at_exit));
}

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
/// Three element counts (x, y, z) from a sequence of three.
std::array<std::size_t, 3> counts3(const char* operation, const py::handle& value,
                                   const std::string& what) {
  if (PySequence_Check(value.ptr()) == 0 || PySequence_Size(value.ptr()) != 3) {
    PyErr_Clear();
    fail(operation, CL_INVALID_VALUE,
         what + " must be a tuple of three element counts (x, y, z), not " + short_repr(value));
  }
  std::array<std::size_t, 3> out{};
  for (std::size_t i = 0; i < 3; ++i) {
    const auto item = py::reinterpret_steal<py::object>(
        PySequence_GetItem(value.ptr(), static_cast<Py_ssize_t>(i)));
    if (!item) throw py::error_already_set();
    out[i] = as_size(operation, item, what.c_str());
  }
  return out;
}

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

int as_int(const char* operation, const py::handle& value, const std::string& what) {
  PyObject* index = PyNumber_Index(value.ptr());
  if (index == nullptr) {
    if (PyErr_ExceptionMatches(PyExc_TypeError) == 0) throw py::error_already_set();
    PyErr_Clear();
    fail(operation, CL_INVALID_VALUE, what + " must be an integer, not " + type_name(value));
  }
  const py::int_ number = py::reinterpret_steal<py::int_>(index);
  int overflow = 0;
  const long long result = PyLong_AsLongLongAndOverflow(number.ptr(), &overflow);
  if (overflow != 0 || result < INT_MIN || result > INT_MAX) {
    PyErr_Clear();
    fail(operation, CL_INVALID_VALUE, what + " " + text_of(number) + " is not a C int");
  }
  return static_cast<int>(result);
}

std::size_t numpy_max_dims = 32;

/// At most the first `limit` characters of repr(value), for messages.
std::string short_repr(const py::handle& value, std::size_t limit) {
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
namespace {

/// clbuf.MappedArray whose mapping has been closed: refused as the array's own methods refuse
/// (clbuf/_mapping.py), so that clbuf's calls never read or write memory that is no longer
/// mapped (on a CPU device, the buffer's own).
void check_not_closed_mapping(const char* operation, const py::handle& value) {
  static PyObject* const mapped_array =
      py::object(py::module_::import("clbuf._mapping").attr("MappedArray")).release().ptr();
  if (PyObject_TypeCheck(value.ptr(), reinterpret_cast<PyTypeObject*>(mapped_array)) == 0) return;
  const py::object mapping = py::getattr(value, "_clbuf_mapping", py::none());
  if (!mapping.is_none() && py::getattr(mapping, "closed", py::bool_(false)).cast<bool>()) {
    fail(operation, CL_INVALID_OPERATION,
         "the array of a mapping was used after its with block ended (the buffer was unmapped "
         "at exit); map it again");
  }
}

}  // namespace

py::array as_contiguous_array(const char* operation, const py::handle& value) {
  check_not_closed_mapping(operation, value);
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
  if (!copy) {
    fail_host_allocation(
        operation, "a contiguous copy of the data",
        static_cast<std::size_t>(array.size()) * static_cast<std::size_t>(array.itemsize()));
  }
  return copy;
}

void fail_host_allocation(const char* operation, const std::string& what, std::size_t bytes) {
  const std::string why = take_python_error();
  fail(operation, CL_OUT_OF_HOST_MEMORY,
       "numpy could not allocate " + what + " (" + std::to_string(bytes) + " bytes): " + why);
}

py::array as_host_array(const char* operation, const py::handle& value, const char* what) {
  if (py::isinstance<py::array>(value)) {
    check_not_closed_mapping(operation, value);
    return py::reinterpret_borrow<py::array>(value);
  }
  if (PyObject_CheckBuffer(value.ptr()) == 0) {
    fail(operation, CL_INVALID_VALUE,
         std::string(what) +
             " must be a numpy.ndarray or an object with the buffer protocol (bytes, "
             "bytearray, memoryview, array.array), not " +
             type_name(value));
  }
  // numpy reads the buffer's format, shape and strides (a bytes object would otherwise be a
  // 0-d array of dtype S): the result shares the object's memory.
  const auto view = py::reinterpret_steal<py::object>(PyMemoryView_FromObject(value.ptr()));
  if (!view) {
    const std::string why = take_python_error();
    fail(operation, CL_INVALID_VALUE, std::string(what) + " (" + type_name(value) + "): " + why);
  }
  static const auto* asarray = new py::object(py::module_::import("numpy").attr("asarray"));
  try {
    return (*asarray)(view);
  } catch (py::error_already_set& error) {
    error.restore();
    const std::string why = take_python_error();
    fail(operation, CL_INVALID_VALUE,
         std::string(what) + " (" + type_name(value) + ") has a format numpy cannot read: " + why);
  }
}

py::array as_contiguous_host_array(const char* operation, const py::handle& value,
                                   const char* what) {
  if (py::isinstance<py::array>(value)) return as_contiguous_array(operation, value);
  return as_contiguous_array(operation, as_host_array(operation, value, what));
}

py::array as_writable_host_array(const char* operation, const py::handle& value, const char* what) {
  py::array array = as_host_array(operation, value, what);
  require_numeric(operation, array.dtype());
  const int flags = array.flags();
  if ((flags & npy_writeable) == 0) {
    fail(operation, CL_INVALID_VALUE, std::string(what) + " is read-only");
  }
  if ((flags & npy_c_contiguous) == 0 || (flags & npy_aligned) == 0) {
    fail(operation, CL_INVALID_VALUE,
         std::string(what) +
             " must be C-contiguous and aligned (the device writes into it in "
             "place); pass numpy.ascontiguousarray(...) and use the result");
  }
  return array;
}

std::size_t times(const char* operation, std::size_t count, std::size_t itemsize,
                  const char* what) {
  std::size_t bytes = 0;
  if (!clbuf::detail::checked_multiply(count, itemsize, bytes)) {
    fail(operation, CL_INVALID_VALUE,
         std::string(what) + " " + std::to_string(count) + " x " + std::to_string(itemsize) +
             " bytes overflows");
  }
  return bytes;
}

}  // namespace clbuf_python
