// SPDX-License-Identifier: MIT
// What every part of the extension clbuf._clbuf shares: clbuf.Error raised as the library words
// it, releasing the GIL (NoGil), methods of objects Python made with __new__ alone (Self<T>), and
// the checks of what Python passes in (sizes, shapes, dtypes, host data).
#ifndef CLBUF_PYTHON_COMMON_HPP
#define CLBUF_PYTHON_COMMON_HPP

#include <clbuf/clbuf.hpp>

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <array>
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

namespace clbuf_python {

// numpy's array flags (numpy/ndarraytypes.h).
constexpr int npy_c_contiguous = 0x0001;
constexpr int npy_forcecast = 0x0010;
constexpr int npy_ensure_array = 0x0040;
constexpr int npy_aligned = 0x0100;
constexpr int npy_writeable = 0x0400;

// clbuf.Error (python/clbuf/__init__.py), looked up in PYBIND11_MODULE; the module keeps it alive.
extern PyObject* error_type;

/// Throws clbuf::Error as the library words it, through its own message function
/// (clbuf::detail::error_message, an access point docs/architecture.md lists):
/// "<operation>: <CL_NAME> (<code>): <details>", a NUL in the details written as \0.
[[noreturn]] void fail(const char* operation, cl_int code, const std::string& details);

/// A type's name without its module ("ndarray", "int"), read from the type object.
std::string name_of(const PyTypeObject* type);

/// The GIL released for the object's lifetime, like py::gil_scoped_release, except at exit
/// (common.cpp): a thread that may not take the GIL back sleeps forever rather than abort the
/// process. Made and destroyed with the GIL held, on the same thread.
class NoGil {
 public:
  NoGil();
  NoGil(const NoGil&) = delete;
  NoGil& operator=(const NoGil&) = delete;
  ~NoGil();

 private:
  PyThreadState* state_ = nullptr;
};

/// Registers the atexit callback that makes interpreter exit safe for threads inside a NoGil.
void register_exit_handler();

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

/// A class's Python name (`name`, after "clbuf."), how its objects are made (`made_by`) and the
/// operation its members' errors name (`scope`; see operation_of()).
template <class T>
struct PythonName;

/// The operation an error of T's `member` names: the member itself for BufferManager,
/// DeviceBuffer and clbuf.mpi.Communicator (scope "": "fill", "to_pyopencl", "send"),
/// "Class.member" for the others (scope "Future.": "Future.get"), or the call that made the
/// object for every member (scope "map": the mapping of `with bm.map(buf) as a:`).
template <class T>
std::string operation_of(const char* member) {
  const std::string scope = PythonName<T>::scope;
  if (scope.empty()) return member;
  return scope.back() == '.' ? scope + member : scope;
}

template <class T>
[[noreturn]] void fail_uninitialised(const char* member) {
  const std::string name = PythonName<T>::name;
  fail(operation_of<T>(member).c_str(), CL_SUCCESS,
       "this clbuf." + name + " was never initialised (made by clbuf." + name +
           ".__new__ without __init__); " + PythonName<T>::made_by);
}

/// Throws `error` again naming `operation`, the call the user made, where it names another
/// (the library's operation: "copy_bytes" for copy_device_buffer, "queue" for to_pyopencl);
/// code and details unchanged. Called in a catch block.
[[noreturn]] void rethrow_as(const std::string& operation, const clbuf::Error& error);

/// call(); a clbuf.Error it throws names operation_of<T>(member).
template <class T, class F>
decltype(auto) reported(const char* member, F&& call) {
  try {
    return call();
  } catch (const clbuf::Error& error) {
    rethrow_as(operation_of<T>(member), error);
  }
}

/// pybind11's record of T's Python class, looked up once (pybind11 looks it up by the hash of
/// the type's name on every cast: a measurable part of a small transfer).
template <class T>
const py::detail::type_info* type_info_of() {
  static const py::detail::type_info* const info = py::detail::get_type_info(typeid(T));
  return info;
}

/// For an object whose type is exactly T's Python class (not a subclass): true, and its C++
/// object in `out` (null when it has none), read from the instance without a type lookup.
/// False for any other object; the caller then takes pybind11's general path.
template <class T>
bool exact_held(const py::handle& object, std::shared_ptr<T>& out) {
  const py::detail::type_info* info = type_info_of<T>();
  if (info == nullptr || Py_TYPE(object.ptr()) != info->type) return false;
  const py::detail::value_and_holder held =
      reinterpret_cast<py::detail::instance*>(object.ptr())->get_value_and_holder(info, false);
  out = held && held.holder_constructed() ? held.template holder<std::shared_ptr<T>>() : nullptr;
  return true;
}

/// The C++ object of `self`, an instance of T's Python class; nullptr when it has none.
template <class T>
std::shared_ptr<T> held_object(const py::handle& self) {
  std::shared_ptr<T> held;
  if (exact_held(self, held)) return held;
  try {
    return self.cast<std::shared_ptr<T>>();
  } catch (const py::cast_error&) {  // "Unable to cast from non-held to held instance"
    return nullptr;
  }
}

/// `held` as a new Python object of T's class, as py::cast(held) makes it, without the type
/// lookup (type_info_of()).
template <class T>
py::object to_python(const std::shared_ptr<T>& held) {
  return py::reinterpret_steal<py::object>(py::detail::type_caster_generic::cast(
      held.get(), py::return_value_policy::take_ownership, py::handle(), type_info_of<T>(), nullptr,
      nullptr, &held));
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

/// A method as a function of a checked `self`, its errors naming operation_of<C>(member).
template <class C, class R, class... A>
auto checked(const char* member, R (C::*method)(A...)) {
  return [member, method](Self<C> self, A... args) -> R {
    return reported<C>(member, [&]() -> R {
      return ((*initialised(self, member)).*method)(std::forward<A>(args)...);
    });
  };
}
template <class C, class R, class... A>
auto checked(const char* member, R (C::*method)(A...) const) {
  return [member, method](Self<C> self, A... args) -> R {
    return reported<C>(member, [&]() -> R {
      return ((*initialised(self, member)).*method)(std::forward<A>(args)...);
    });
  };
}

/// A wait for an operation already started (Future.wait, Request.test, ...) as a function of a
/// checked `self`: its errors are that operation's, and name it ("upload_async", "irecv").
template <class C, class R>
auto waiting(const char* member, R (C::*method)()) {
  return [member, method](Self<C> self) -> R { return ((*initialised(self, member)).*method)(); };
}
template <class C, class R>
auto waiting(const char* member, R (C::*method)() const) {
  return [member, method](Self<C> self) -> R { return ((*initialised(self, member)).*method)(); };
}

/// BufferManager's `selector` argument, as given; as_selector() reads it.
struct Selector {
  py::handle object;
};

// ---- Python types in signatures ------------------------------------------------------------
//
// pybind11 writes an argument or result of type py::handle or py::object as `handle` or
// `object` in help() and __doc__. The extension takes most arguments as any object and checks
// them itself (so that a wrong one is a clbuf.Error naming the call, never pybind11's
// TypeError), so those are Typed<Name>: any object, shown as the Python type Name::name, the
// way python/clbuf/_clbuf.pyi writes it (python/tests/test_package.py compares the two).

/// Any Python object, shown in signatures as the Python type `Name` (a string).
template <const auto& Name>
class Typed : public py::object {
 public:
  Typed() = default;
  Typed(py::object value) : py::object(std::move(value)) {}  // NOLINT: results convert
  Typed(py::handle h, borrowed_t tag) : py::object(h, tag) {}
  Typed(py::handle h, stolen_t tag) : py::object(h, tag) {}
  /// pybind11 loads any object into it (py::isinstance<Typed<Name>>).
  static bool check_(py::handle h) { return h.ptr() != nullptr; }
};

/// The Python types of the extension's arguments and results, as _clbuf.pyi writes them.
namespace names {
inline constexpr char device_buffer[] = "clbuf.DeviceBuffer";
inline constexpr char buffer_manager[] = "clbuf.BufferManager";
inline constexpr char host_data[] =
    "Union[numpy.ndarray, bytes, bytearray, memoryview, array.array]";
inline constexpr char writable_data[] = "Union[numpy.ndarray, bytearray, memoryview, array.array]";
inline constexpr char optional_writable_data[] =
    "Optional[Union[numpy.ndarray, bytearray, memoryview, array.array]]";
inline constexpr char shape[] = "Union[int, Sequence[int]]";
inline constexpr char optional_shape[] = "Optional[Union[int, Sequence[int]]]";
inline constexpr char dtype_like[] = "numpy.typing.DTypeLike";
inline constexpr char optional_dtype_like[] = "Optional[numpy.typing.DTypeLike]";
inline constexpr char integer[] = "int";
inline constexpr char str[] = "str";
inline constexpr char number[] = "Union[bool, int, float, complex, numpy.number, numpy.bool_]";
inline constexpr char region[] = "clbuf.Region";
inline constexpr char wait_for[] = "Optional[Sequence[Union[clbuf.Future, pyopencl.Event]]]";
inline constexpr char future_result[] =
    "Optional[Union[clbuf.DeviceBuffer, numpy.ndarray, bytearray, memoryview, array.array]]";
inline constexpr char mapped_array[] = "clbuf.MappedArray";
inline constexpr char dtype[] = "numpy.dtype";
inline constexpr char shape_tuple[] = "Tuple[int, ...]";
inline constexpr char str_or_int[] = "Union[str, int]";
inline constexpr char slice[] = "slice";
inline constexpr char dict[] = "Dict[str, Any]";
inline constexpr char pyopencl_queue[] = "pyopencl.CommandQueue";
inline constexpr char pyopencl_memory[] = "Union[pyopencl.Buffer, pyopencl.array.Array]";
inline constexpr char pyopencl_array[] = "pyopencl.array.Array";
inline constexpr char pyopencl_event[] = "Optional[pyopencl.Event]";
}  // namespace names

/// The arguments and results of the extension, by the Python type they are.
using AnyBuffer = Typed<names::device_buffer>;
using AnyManager = Typed<names::buffer_manager>;
using HostData = Typed<names::host_data>;
using WritableData = Typed<names::writable_data>;
using OptionalWritableData = Typed<names::optional_writable_data>;
using Shape = Typed<names::shape>;
using OptionalShape = Typed<names::optional_shape>;
using DType = Typed<names::dtype_like>;
using OptionalDType = Typed<names::optional_dtype_like>;
using Int = Typed<names::integer>;
using Str = Typed<names::str>;
using Number = Typed<names::number>;
using RegionArg = Typed<names::region>;
using WaitFor = Typed<names::wait_for>;
using FutureResult = Typed<names::future_result>;
using MappedArrayResult = Typed<names::mapped_array>;
using DtypeResult = Typed<names::dtype>;
using ShapeTuple = Typed<names::shape_tuple>;
using StrOrInt = Typed<names::str_or_int>;
using SliceArg = Typed<names::slice>;
using Dict = Typed<names::dict>;
using PyopenclQueue = Typed<names::pyopencl_queue>;
using PyopenclMemory = Typed<names::pyopencl_memory>;
using PyopenclArray = Typed<names::pyopencl_array>;
using PyopenclEvent = Typed<names::pyopencl_event>;

/// A class as Python shows it (repr, help, signatures): `module.name`.
void show_as(const py::handle& cls, const char* module, const char* name);

/// T's Python class, registered in `m` as `attribute` and shown as clbuf.<PythonName<T>::name>
/// ("clbuf.DeviceBuffer", "clbuf.mpi.Request" for the attribute _MpiRequest): named so before
/// any method is bound, since pybind11 writes a class's name into each signature it binds.
template <class T>
py::class_<T, std::shared_ptr<T>> python_class(py::module_& m, const char* attribute,
                                               const char* doc) {
  py::class_<T, std::shared_ptr<T>> cls(m, attribute, doc);
  const std::string shown = std::string("clbuf.") + PythonName<T>::name;
  const std::size_t dot = shown.rfind('.');
  show_as(cls, shown.substr(0, dot).c_str(), shown.substr(dot + 1).c_str());
  return cls;
}

}  // namespace clbuf_python

namespace pybind11 {
namespace detail {
using clbuf_python::Selector;
using clbuf_python::Self;
template <class T>
struct type_caster<Self<T>> {
  // The name of T's Python class in signatures and docstrings, as for a T& self.
  PYBIND11_TYPE_CASTER(Self<T>, make_caster<T>::name);
  bool load(handle source, bool convert) {
    if (source.is_none()) return false;  // the holder caster would take None for a null holder
    if (clbuf_python::exact_held(source, value.held)) {  // the usual case, without a type lookup
      value.object = source;
      return true;
    }
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
template <const auto& Name>
struct handle_type_name<clbuf_python::Typed<Name>> {
  static constexpr auto name = const_name(Name);
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

namespace clbuf_python {

/// The most dimensions a numpy array may have (NPY_MAXDIMS): 32, and 64 from numpy 2.0. Set
/// from numpy's version when the module is imported.
extern std::size_t numpy_max_dims;

/// str(object) as UTF-8; characters UTF-8 cannot hold (lone surrogates) as backslash escapes.
std::string text_of(const py::handle& object);

/// The object's type's name ("ndarray", "int"): read from the type object, so no Python code
/// (a metaclass's __getattribute__) runs.
std::string type_name(const py::handle& object);

/// The Python exception being raised, as "TypeError: message", cleared.
std::string take_python_error();

/// Throws the Python exception numpy raised making a host array of `bytes` bytes for `what`
/// as a clbuf.Error: CL_OUT_OF_HOST_MEMORY (numpy's MemoryError, or "array is too big"),
/// with numpy's message.
[[noreturn]] void fail_host_allocation(const char* operation, const std::string& what,
                                       std::size_t bytes);

std::string describe_shape(const std::vector<py::ssize_t>& shape);

std::string describe_dtype(const py::dtype& dtype);

/// The dtypes whose values are plain bytes: bool, signed and unsigned integers, floats, complex.
bool is_numeric(const py::dtype& dtype);

void require_numeric(const char* operation, const py::dtype& dtype);

/// operator.index(value) as a non-negative size; `what` names the argument in messages. An
/// object without __index__, or whose __index__ raises TypeError, is not an integer (clbuf.Error);
/// any other exception its __index__ raises is the caller's own and propagates.
std::size_t as_size(const char* operation, const py::handle& value, const char* what);

/// operator.index(value) as a C int (an error code, an MPI rank or tag; negative allowed);
/// `what` names the argument in messages.
int as_int(const char* operation, const py::handle& value, const std::string& what);

/// Three element counts (x, y, z) from a sequence of three; `what` names it in messages.
std::array<std::size_t, 3> counts3(const char* operation, const py::handle& value,
                                   const std::string& what);

/// At most the first `limit` characters of repr(value), for messages.
std::string short_repr(const py::handle& value, std::size_t limit = 80);

/// A shape given as an int or a sequence of ints (a tuple, a list, numpy integers, an integer
/// ndarray of at most one dimension). More dimensions than numpy allows are refused here, before
/// anything is allocated or transferred.
std::vector<py::ssize_t> as_shape(const char* operation, const py::handle& value);

py::dtype as_dtype(const char* operation, const py::handle& value);

/// The bytes of an array of `shape` and `dtype`, or an Error when numpy could not make it. As
/// numpy does, the size check covers the non-zero extents even when another extent is 0.
std::size_t shape_bytes(const char* operation, const std::vector<py::ssize_t>& shape,
                        const py::dtype& dtype);

/// `value` as a C-contiguous, aligned ndarray of a numeric dtype: the array itself when it
/// already is one (no copy), else one contiguous copy.
py::array as_contiguous_array(const char* operation, const py::handle& value);

/// Host data as an ndarray: a numpy array as it is, any other object with the buffer protocol
/// (bytes, bytearray, memoryview, array.array) as its format's dtype and shape, sharing its
/// memory. clbuf.Error for anything else, or a format numpy cannot read.
py::array as_host_array(const char* operation, const py::handle& value, const char* what);

/// as_host_array(), then C-contiguous and aligned (one copy in C order when it is not).
py::array as_contiguous_host_array(const char* operation, const py::handle& value,
                                   const char* what);

/// A host array the device writes into: writable, C-contiguous and aligned, of a numeric dtype
/// (as_host_array() for the object), else clbuf.Error. Never copied.
py::array as_writable_host_array(const char* operation, const py::handle& value, const char* what);

/// Element count times itemsize, or clbuf.Error on overflow.
std::size_t times(const char* operation, std::size_t count, std::size_t itemsize, const char* what);

}  // namespace clbuf_python

#endif  // CLBUF_PYTHON_COMMON_HPP
