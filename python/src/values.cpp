// SPDX-License-Identifier: MIT
// A Python number as one element of a numpy dtype, exactly or not at all (values.hpp).
#include "values.hpp"

#include <climits>
#include <cmath>

namespace clbuf_python {
namespace {

/// numpy's scalar types that hold no integer: numpy's integers have __index__, as Python's do.
PyTypeObject* numpy_bool = nullptr;
PyTypeObject* numpy_floating = nullptr;
PyTypeObject* numpy_complexfloating = nullptr;
PyTypeObject* numpy_longdouble = nullptr;

enum class Kind { boolean, integer, real, complex };

[[noreturn]] void refuse(const char* operation, const py::handle& value, const std::string& why) {
  fail(operation, CL_INVALID_VALUE, "value " + short_repr(value) + " " + why);
}

/// The one element of a 0-d array, as a numpy scalar.
py::object element_of(const py::handle& array) {
  auto element =
      py::reinterpret_steal<py::object>(PyObject_GetItem(array.ptr(), py::tuple().ptr()));
  if (!element) throw py::error_already_set();
  return element;
}

std::string bytes_of(const py::array& element) {
  return std::string(static_cast<const char*>(element.data()),
                     static_cast<std::size_t>(element.itemsize()));
}

bool equal(const py::handle& a, const py::handle& b) {
  const int result = PyObject_RichCompareBool(a.ptr(), b.ptr(), Py_EQ);
  if (result < 0) throw py::error_already_set();
  return result == 1;
}

/// The double nearest a float (Python's or numpy's), exact unless it is a long double.
double double_of(const py::handle& real) {
  const double d = PyFloat_AsDouble(real.ptr());
  if (d == -1.0 && PyErr_Occurred() != nullptr) throw py::error_already_set();
  return d;
}

bool is_long_double(const py::handle& real) {
  return PyObject_TypeCheck(real.ptr(), numpy_longdouble) != 0;
}

Kind kind_of(const char* operation, const py::handle& value, const py::dtype& dtype) {
  PyObject* v = value.ptr();
  // numpy.bool_ first: numpy 1.x still gives it a (deprecated) __index__.
  if (PyBool_Check(v) || PyObject_TypeCheck(v, numpy_bool) != 0) return Kind::boolean;
  if (PyFloat_Check(v) || PyObject_TypeCheck(v, numpy_floating) != 0) return Kind::real;
  if (PyComplex_Check(v) || PyObject_TypeCheck(v, numpy_complexfloating) != 0) {
    return Kind::complex;
  }
  if (PyIndex_Check(v) != 0) return Kind::integer;
  if (PySequence_Check(v) != 0 && !PyUnicode_Check(v) && !PyBytes_Check(v) &&
      !PyByteArray_Check(v)) {
    refuse(operation, value, "must be a single value, not a " + type_name(value));
  }
  refuse(operation, value,
         "(" + type_name(value) + ") cannot be cast to " + describe_dtype(dtype) +
             ": the value is a bool, int, float or complex (Python's or numpy's)");
}

/// The whole number a float holds; clbuf.Error when it holds none (1.7, nan, inf).
py::object whole_number(const char* operation, const py::handle& value, const py::handle& real,
                        const py::dtype& dtype) {
  const auto not_whole = [&] {
    refuse(operation, value,
           "is not a whole number; " + describe_dtype(dtype) + " holds whole numbers only");
  };
  const double d = double_of(real);
  if (!is_long_double(real)) {  // the double is the value itself
    if (!std::isfinite(d) || std::trunc(d) != d) not_whole();
    return py::reinterpret_steal<py::object>(PyLong_FromDouble(d));
  }
  // A long double has more digits than its double: numpy's own arithmetic decides.
  if (std::isnan(d) || (std::isinf(d) && equal(real, py::float_(d)))) not_whole();
  const auto fraction =
      py::reinterpret_steal<py::object>(PyNumber_Remainder(real.ptr(), py::int_(1).ptr()));
  if (!fraction) throw py::error_already_set();
  if (!equal(fraction, py::int_(0))) not_whole();
  const auto whole = py::reinterpret_steal<py::object>(PyNumber_Long(real.ptr()));
  if (!whole) throw py::error_already_set();
  return whole;
}

/// The real part of a complex; clbuf.Error when its imaginary part is not 0.
py::object real_part(const char* operation, const py::handle& value, const py::handle& number,
                     const py::dtype& dtype) {
  if (!equal(number.attr("imag"), py::int_(0))) {
    refuse(operation, value,
           "has an imaginary part; " + describe_dtype(dtype) + " holds real numbers only");
  }
  return number.attr("real");
}

/// The whole number of a bool, an int, or a float or complex that holds one.
py::object integer_of(const char* operation, const py::handle& value, const py::handle& number,
                      Kind kind, const py::dtype& dtype) {
  switch (kind) {
    case Kind::boolean:
      return py::int_(PyObject_IsTrue(number.ptr()) == 1 ? 1 : 0);
    case Kind::integer: {
      auto index = py::reinterpret_steal<py::object>(PyNumber_Index(number.ptr()));
      if (!index) throw py::error_already_set();  // the object's own __index__ failed
      return index;
    }
    case Kind::real:
      return whole_number(operation, value, number, dtype);
    case Kind::complex:
      return whole_number(operation, value, real_part(operation, value, number, dtype), dtype);
  }
  return py::none();
}

/// An int (`whole`) an integer dtype holds; clbuf.Error when it is out of the dtype's range.
void check_integer_range(const char* operation, const py::handle& value, const py::handle& whole,
                         const py::dtype& dtype) {
  const char kind = dtype.kind();
  const std::size_t bits = 8 * static_cast<std::size_t>(dtype.itemsize());
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(whole.ptr(), &overflow);
  if (v == -1 && PyErr_Occurred() != nullptr) throw py::error_already_set();
  bool fits = false;
  std::string range;
  if (kind == 'i') {
    const long long high = bits >= 64 ? LLONG_MAX : (1LL << (bits - 1)) - 1;
    fits = overflow == 0 && v >= -high - 1 && v <= high;
    range = "[" + std::to_string(-high - 1) + ", " + std::to_string(high) + "]";
  } else {
    const unsigned long long high = bits >= 64 ? ULLONG_MAX : (1ULL << bits) - 1;
    if (overflow > 0) {  // above LLONG_MAX: only a 64-bit unsigned may hold it
      const unsigned long long u = PyLong_AsUnsignedLongLong(whole.ptr());
      fits = PyErr_Occurred() == nullptr && u <= high;
      PyErr_Clear();
    } else {
      fits = overflow == 0 && v >= 0 && static_cast<unsigned long long>(v) <= high;
    }
    range = "[0, " + std::to_string(high) + "]";
  }
  if (!fits) {
    refuse(operation, value, "is out of the range of " + describe_dtype(dtype) + " " + range);
  }
}

/// The significant bits of a float of `part` bytes (2: float16, 4: float32, 8: float64).
int significand_bits(std::size_t part) { return part == 2 ? 11 : part == 4 ? 24 : 53; }

/// The largest finite float of `part` bytes, as numpy prints it.
const char* largest(std::size_t part) {
  return part == 2 ? "65504.0" : part == 4 ? "3.4028235e+38" : "1.7976931348623157e+308";
}

/// Whether a finite double rounds to a finite float of `part` bytes (2, 4 or 8): below the
/// halfway point between the largest finite one and the next power of two, where rounding to
/// nearest-even gives inf.
bool rounds_to_finite(double d, std::size_t part) {
  if (part == 2) return std::fabs(d) < 65520.0;
  if (part == 4) return std::fabs(d) < std::ldexp(2.0 - std::ldexp(1.0, -24), 127);
  return std::isfinite(d);
}

/// numpy's element of `dtype` for `number`, a 0-d array; clbuf.Error when numpy cannot make it.
py::array cast(const char* operation, const py::handle& value, const py::handle& number,
               const py::dtype& dtype) {
  // numpy.array(number, dtype) through numpy's C API (the same conversion, no Python call).
  const auto& api = py::detail::npy_api::get();
  auto array = py::reinterpret_steal<py::array>(api.PyArray_FromAny_(
      number.ptr(), dtype.inc_ref().ptr(), 0, 0,
      npy_forcecast | npy_ensure_array | npy_c_contiguous | npy_aligned, nullptr));
  if (!array) {
    const std::string why = take_python_error();
    refuse(operation, value, "cannot be cast to " + describe_dtype(dtype) + ": " + why);
  }
  return array;
}

/// An int (`whole`) that a float of `dtype` (or the parts of a complex one, `part` bytes each)
/// holds exactly; clbuf.Error when it would be rounded or out of range.
void check_exact_in_float(const char* operation, const py::handle& value, const py::handle& whole,
                          const py::dtype& dtype, std::size_t part) {
  const auto inexact = [&] {
    py::object element = element_of(cast(operation, value, whole, dtype));
    if (dtype.kind() == 'c') element = element.attr("real");
    refuse(operation, value,
           "is not exactly representable in " + describe_dtype(dtype) + " (it would be " +
               short_repr(element) + "); pass a float to have it rounded");
  };
  const auto out_of_range = [&] {
    refuse(operation, value, "is out of the range of " + describe_dtype(dtype));
  };
  if (part > 8) {  // a long double: numpy's own round trip, exact in Python ints
    py::object element = element_of(cast(operation, value, whole, dtype));
    if (dtype.kind() == 'c') element = element.attr("real");
    const auto back = py::reinterpret_steal<py::object>(PyNumber_Long(element.ptr()));
    if (!back) {  // inf
      PyErr_Clear();
      out_of_range();
    }
    if (!equal(back, whole)) inexact();
    return;
  }
  const double d = PyLong_AsDouble(whole.ptr());
  if (d == -1.0 && PyErr_Occurred() != nullptr) {  // beyond any double
    PyErr_Clear();
    out_of_range();
  }
  if (!rounds_to_finite(d, part)) out_of_range();
  const auto as_int = py::reinterpret_steal<py::object>(PyLong_FromDouble(d));
  if (!equal(as_int, whole)) inexact();  // more digits than a double's
  int exponent = 0;
  const double scaled = std::ldexp(std::frexp(std::fabs(d), &exponent), significand_bits(part));
  if (scaled != std::trunc(scaled)) inexact();  // more digits than the float's
}

/// A float (Python's or numpy's) that rounds to a finite float of `dtype` (`part` bytes, the
/// parts of a complex one); clbuf.Error when it would be inf. nan and inf are kept as they are.
void check_float_range(const char* operation, const py::handle& value, const py::handle& real,
                       const py::dtype& dtype, std::size_t part) {
  if (part > 8) return;  // a long double holds every float there is
  const double d = double_of(real);
  if (std::isnan(d)) return;
  const bool beyond = std::isinf(d) ? is_long_double(real) && !equal(real, py::float_(d))
                                    : !rounds_to_finite(d, part);
  if (beyond) {
    refuse(operation, value,
           "is out of the range of " + describe_dtype(dtype) + " (largest " + largest(part) +
               "; it would be inf)");
  }
}

}  // namespace

void init_values() {
  const py::module_ numpy = py::module_::import("numpy");
  // Held for the life of the process, as the module holds numpy.
  const auto type = [&](const char* name) {
    return reinterpret_cast<PyTypeObject*>(py::object(numpy.attr(name)).release().ptr());
  };
  numpy_bool = type("bool_");
  numpy_floating = type("floating");
  numpy_complexfloating = type("complexfloating");
  numpy_longdouble = type("longdouble");
}

std::string value_bytes(const char* operation, const py::handle& value, const py::dtype& dtype) {
  if (value.is_none()) fail(operation, CL_INVALID_VALUE, "value must be a number, not None");
  py::object number = py::reinterpret_borrow<py::object>(value);
  if (py::isinstance<py::array>(value)) {  // a 0-d array is its one element
    const auto array = py::reinterpret_borrow<py::array>(value);
    if (array.ndim() != 0) {
      refuse(operation, value,
             "must be a single value, not of shape " +
                 describe_shape(
                     std::vector<py::ssize_t>(array.shape(), array.shape() + array.ndim())));
    }
    number = element_of(value);
  }
  const Kind kind = kind_of(operation, number, dtype);
  const char target = dtype.kind();
  if (target == 'b' || target == 'i' || target == 'u') {
    const py::object whole = integer_of(operation, value, number, kind, dtype);
    if (target == 'b') {
      const bool one = equal(whole, py::int_(1));
      if (!one && !equal(whole, py::int_(0))) {
        refuse(operation, value, "is not 0 or 1; bool holds True (1) and False (0) only");
      }
      return bytes_of(cast(operation, value, py::bool_(one), dtype));
    }
    check_integer_range(operation, value, whole, dtype);
    return bytes_of(cast(operation, value, whole, dtype));
  }
  // A float or complex dtype; `part`: the bytes of the float, or of each part of the complex.
  const std::size_t part = static_cast<std::size_t>(dtype.itemsize()) /
                           (target == 'c' ? std::size_t{2} : std::size_t{1});
  switch (kind) {
    case Kind::boolean:
      return bytes_of(cast(operation, value, number, dtype));
    case Kind::integer: {
      const py::object whole = integer_of(operation, value, number, kind, dtype);
      check_exact_in_float(operation, value, whole, dtype, part);
      return bytes_of(cast(operation, value, whole, dtype));
    }
    case Kind::real:
      check_float_range(operation, value, number, dtype, part);
      return bytes_of(cast(operation, value, number, dtype));
    case Kind::complex:
      break;
  }
  if (target != 'c') {
    const py::object real = real_part(operation, value, number, dtype);
    check_float_range(operation, value, real, dtype, part);
    return bytes_of(cast(operation, value, real, dtype));
  }
  check_float_range(operation, value, number.attr("real"), dtype, part);
  check_float_range(operation, value, number.attr("imag"), dtype, part);
  return bytes_of(cast(operation, value, number, dtype));
}

}  // namespace clbuf_python
