// SPDX-License-Identifier: MIT
// One Python number as one element of a numpy dtype (the value of fill and fill_async): the
// element holds the value, or the call is a clbuf.Error. Never truncated, wrapped or made inf.
#ifndef CLBUF_PYTHON_VALUES_HPP
#define CLBUF_PYTHON_VALUES_HPP

#include "common.hpp"

namespace clbuf_python {

/// Looks up the numpy scalar types value_bytes() tells apart; called when the module is imported.
void init_values();

/// The itemsize bytes of `value` as one element of `dtype`, or clbuf.Error (CL_INVALID_VALUE)
/// naming `operation` where that element would not be the value:
/// - bool, integer dtypes: a whole number in range only: a bool, an int (or an object with
///   __index__), or a float or complex whose value is one (2.0, -0.0, 3+0j); 1.7, nan, inf,
///   300 for int8, -1.0 for uint8 and 2 for bool are refused, never truncated or wrapped;
/// - float and complex dtypes: a float is rounded to the nearest element, as numpy rounds it,
///   unless it is beyond the dtype's largest finite element (it would become inf; nan and inf
///   themselves are kept); an int only where the dtype holds it exactly (2**53 + 1 is no
///   float64, 2**24 + 1 no float32);
/// - a complex with an imaginary part other than 0: complex dtypes only.
/// The value is a bool, int, float or complex, Python's or numpy's, or a 0-d numpy array of
/// one; anything else (None, a str, a sequence, a Fraction) is refused.
std::string value_bytes(const char* operation, const py::handle& value, const py::dtype& dtype);

}  // namespace clbuf_python

#endif  // CLBUF_PYTHON_VALUES_HPP
