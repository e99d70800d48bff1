// SPDX-License-Identifier: MIT
// clbuf.stream_tiles, clbuf.plan_tiles and clbuf.Tile over clbuf::stream_tiles and
// clbuf::plan_tiles (clbuf/tile_stream.hpp, clbuf/tile_plan.hpp): a numpy array of any size
// streamed through the device tile by tile, the application's kernels (pyopencl) run on each
// tile, with uploads, kernels and downloads overlapped. The plan, the slots, the queues, the
// order of the outputs and what a failure leaves written are the library's; this file hands it
// the arrays and calls the Python function. Over a clbuf.DeviceGroup the library deals the tiles
// to the group's devices (clbuf/group_tile_stream.hpp); each tile's buffers are then of its
// device's manager (Tile.device).
//
// Threads: the library calls the function on the calling thread, between its own enqueues. The
// GIL is released for the whole stream (NoGil) and taken back only to call the function
// (py::gil_scoped_acquire), so other Python threads run while the host waits for a slot. The
// function gets a clbuf.Tile whose input and output are DeviceBuffers over the same memory as
// the tile's C++ buffers (adopted, one Python object per slot, made with the GIL held), and
// returns a pyopencl.Event, a clbuf.Future or None. An exception it raises becomes the library's
// failure of that tile ("stream_tiles: tile k of n (elements a to b of c): the function threw:
// ValueError: ..."), raised as clbuf.Error with the function's exception as its __cause__.
#include "buffers.hpp"
#include "dtype_dispatch.hpp"
#include "futures.hpp"
#include "group.hpp"
#include "interop.hpp"
#include "manager.hpp"

#include <clbuf/group_tile_stream.hpp>
#include <clbuf/tile_stream.hpp>

#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace clbuf_python {

namespace names {
inline constexpr char tile_function[] =
    "Callable[[clbuf.Tile], Optional[Union[pyopencl.Event, clbuf.Future]]]";
inline constexpr char pyopencl_events[] = "List[pyopencl.Event]";
inline constexpr char pyopencl_command_queue[] = "pyopencl.CommandQueue";
inline constexpr char ndarray[] = "numpy.ndarray";
inline constexpr char flag[] = "bool";
inline constexpr char manager_or_group[] = "Union[clbuf.BufferManager, clbuf.DeviceGroup]";
inline constexpr char tile_weights[] = "Optional[Sequence[float]]";
}  // namespace names

using TileFunction = Typed<names::tile_function>;
using PyopenclEvents = Typed<names::pyopencl_events>;
using PyopenclCommandQueue = Typed<names::pyopencl_command_queue>;
using NdArray = Typed<names::ndarray>;
using Flag = Typed<names::flag>;
using ManagerOrGroup = Typed<names::manager_or_group>;
using TileWeights = Typed<names::tile_weights>;

/// clbuf.Tile: one tile as the function of clbuf.stream_tiles() gets it (clbuf::Tile).
struct TileView {
  std::size_t index = 0, tiles = 0, first = 0, count = 0, device = 0;
  py::object input, output;
  cl::CommandQueue queue;
  std::vector<cl::Event> after;
};

template <>
struct PythonName<TileView> {
  static constexpr const char* name = "Tile";
  static constexpr const char* scope = "Tile.";
  static constexpr const char* made_by = "Tiles are given to the function of clbuf.stream_tiles()";
};

namespace {

constexpr const char* stream_op = "stream_tiles";

/// The function's calls during one stream, and what it raised.
class Stream {
 public:
  Stream(std::vector<std::shared_ptr<clbuf::BufferManager>> managers, py::object fn, py::dtype in,
         py::dtype out)
      : managers_(std::move(managers)),
        fn_(std::move(fn)),
        in_dtype_(std::move(in)),
        out_dtype_(std::move(out)) {}

  /// The function on tile k, with the GIL; its event (null: None returned).
  template <class T, class U>
  cl::Event call(const clbuf::Tile<T, U>& tile) {
    py::gil_scoped_acquire gil;
    try {
      auto view = std::make_shared<TileView>();
      view->index = tile.index;
      view->tiles = tile.tiles;
      view->first = tile.first;
      view->count = tile.count;
      view->device = tile.device;
      view->input = buffer_of(tile.in, in_dtype_, tile.device);
      const bool in_place = static_cast<const void*>(&tile.in) == static_cast<void*>(&tile.out);
      view->output = in_place ? view->input : buffer_of(tile.out, out_dtype_, tile.device);
      view->queue = tile.queue;
      view->after = tile.after;
      const py::object result = fn_(to_python(view));
      return event_of(result);
    } catch (py::error_already_set& error) {
      // The Python exception stays here (raised later as the __cause__); the library gets a C++
      // exception without Python objects, which it names as tile k's failure.
      cause_ = error.value();
      cause_tile_ = tile.index;
      std::string what = type_name(cause_);
      try {
        const std::string text = text_of(cause_);
        if (!text.empty()) what += ": " + text;
      } catch (py::error_already_set&) {  // NOLINT(bugprone-empty-catch): its type says enough
      }
      throw std::runtime_error(what);
    }
  }

  /// Raises the stream's failure `error` (called in its catch block, with the GIL): as it is, or
  /// with the function's exception as __cause__ when that is what stopped the stream.
  [[noreturn]] void raise(const clbuf::Error& error) {
    const std::string what = error.what();
    const std::string tile = "tile " + std::to_string(cause_tile_) + " of ";
    if (!cause_ || what.find(tile) == std::string::npos) throw;  // NOLINT: rethrows the caught
    const py::object instance = py::reinterpret_borrow<py::object>(error_type)(what, error.code());
    PyException_SetCause(instance.ptr(), cause_.release().ptr());  // steals the reference
    PyErr_SetObject(error_type, instance.ptr());
    throw py::error_already_set();
  }

 private:
  /// The tile's buffer as a DeviceBuffer of `dtype` on the same memory, one per slot buffer,
  /// of the manager of the tile's device.
  template <class X>
  py::object buffer_of(const clbuf::DeviceBuffer<X>& buffer, const py::dtype& dtype,
                       std::size_t device) {
    const std::shared_ptr<clbuf::BufferManager>& manager = managers_.at(device);
    const cl_mem root = buffer.native_root()();
    const std::size_t offset = buffer.native_offset_bytes();
    for (const auto& [mem, at, object] : buffers_) {
      if (mem == root && at == offset) return object;  // in place: input and output are one
    }
    auto handle = new_handle(manager, dtype, {static_cast<py::ssize_t>(buffer.size())});
    clbuf::DeviceBuffer<std::uint8_t> whole =
        manager->adopt<std::uint8_t>(cl::Buffer(root, true), offset + buffer.size_bytes());
    handle->own(offset == 0 ? std::move(whole) : manager->view(whole, offset, buffer.size_bytes()));
    py::object object = to_python(handle);
    buffers_.emplace_back(root, offset, object);
    return object;
  }

  /// The function's result as the event the library waits for.
  static cl::Event event_of(const py::object& result) {
    if (result.is_none()) return cl::Event();
    const bool event_like = py::isinstance<Pending>(result) ||
                            std::strstr(Py_TYPE(result.ptr())->tp_name, "Event") != nullptr;
    if (!event_like) {
      fail(stream_op, CL_INVALID_EVENT,
           "the function returned " + short_repr(result) + " (" + type_name(result) +
               "); it returns the pyopencl.Event of its last kernel, a clbuf.Future or None");
    }
    std::vector<cl::Event> events = as_events(stream_op, py::make_tuple(result));
    return events.empty() ? cl::Event() : events.front();
  }

  std::vector<std::shared_ptr<clbuf::BufferManager>> managers_;  // by device
  py::object fn_;
  py::dtype in_dtype_, out_dtype_;
  std::vector<std::tuple<cl_mem, std::size_t, py::object>> buffers_;
  py::object cause_;
  std::size_t cause_tile_ = 0;
};

/// Where a stream runs: one manager (`manager` set), or a DeviceGroup's devices; `parts.managers`
/// holds the manager of each device (one for a manager).
struct Target {
  std::shared_ptr<Manager> manager;
  GroupParts parts;
};

Target target_of(const char* op, const py::handle& value) {
  Target target;
  if (py::isinstance<Manager>(value)) {
    target.manager = held_object<Manager>(value);
    if (!target.manager) fail_uninitialised<Manager>(op);
    target.parts.managers.push_back(target.manager->shared());
  } else if (is_group(value)) {
    target.parts = group_parts(op, value);
  } else {
    fail(op, CL_INVALID_VALUE,
         "manager must be a clbuf.BufferManager or a clbuf.DeviceGroup, not " + type_name(value));
  }
  return target;
}

/// TileOptions from the keyword arguments.
clbuf::TileStreamOptions tile_options(const char* op, const py::handle& tile_elements,
                                      const py::handle& in_flight,
                                      const py::handle& memory_budget_bytes) {
  clbuf::TileStreamOptions options;
  options.tile_elements = as_size(op, tile_elements, "tile_elements");
  options.in_flight = as_size(op, in_flight, "in_flight");
  options.memory_budget_bytes = as_size(op, memory_budget_bytes, "memory_budget_bytes");
  return options;
}

/// The options of a stream or plan on `target`, weights (a group's only) included.
clbuf::GroupTileOptions group_options(const char* op, const Target& target,
                                      const py::handle& weights, const py::handle& tile_elements,
                                      const py::handle& in_flight,
                                      const py::handle& memory_budget_bytes) {
  clbuf::GroupTileOptions options(tile_options(op, tile_elements, in_flight, memory_budget_bytes));
  if (!weights.is_none()) {
    if (target.manager) {
      fail(op, CL_INVALID_VALUE,
           "weights deal the tiles to a DeviceGroup's devices; a BufferManager has one device");
    }
    options.weights = group_weights(op, weights);
  }
  return options;
}

Dict plan_dict(const clbuf::TilePlan& plan) {
  py::dict out;
  out["tile_elements"] = plan.tile_elements;
  out["in_flight"] = plan.in_flight;
  out["tiles"] = plan.tiles;
  out["device_bytes"] = plan.device_bytes;
  out["budget_bytes"] = plan.budget_bytes;
  return Dict(std::move(out));
}

/// The arrays of a stream: `in` and `out` (one array in place), checked.
std::pair<py::array, py::array> stream_arrays(const py::handle& data, const py::handle& out,
                                              const py::handle& dtype) {
  const char* op = stream_op;
  if (!out.is_none() && !dtype.is_none()) {
    fail(op, CL_INVALID_VALUE, "dtype is for a new output array; out= has its own");
  }
  if (out.is(data)) {
    py::array both = as_writable_host_array(op, data, "data");
    return {both, both};
  }
  py::array in = as_contiguous_host_array(op, data, "data");
  require_numeric(op, in.dtype());
  py::array result;
  if (out.is_none()) {
    const py::dtype type = dtype.is_none() ? in.dtype() : as_dtype(op, dtype);
    require_numeric(op, type);
    std::vector<py::ssize_t> shape(in.shape(), in.shape() + in.ndim());
    result = py::array(type, shape);
  } else {
    result = as_writable_host_array(op, out, "out");
  }
  if (result.size() != in.size()) {
    fail(op, CL_INVALID_VALUE,
         "out holds " + std::to_string(result.size()) + " elements, data " +
             std::to_string(in.size()) + "; a stream writes one output element per input element");
  }
  return {in, result};
}

NdArray stream_tiles(const ManagerOrGroup& manager, const HostData& data, const TileFunction& fn,
                     const OptionalWritableData& out, const OptionalDType& dtype,
                     const TileWeights& weights, const Int& tile_elements, const Int& in_flight,
                     const Int& memory_budget_bytes) {
  const char* op = stream_op;
  const Target target = target_of(op, manager);
  if (PyCallable_Check(fn.ptr()) == 0) {
    fail(op, CL_INVALID_VALUE,
         "fn must be callable (fn(tile) -> pyopencl.Event or None), not " + type_name(fn));
  }
  const clbuf::GroupTileOptions options =
      group_options(op, target, weights, tile_elements, in_flight, memory_budget_bytes);
  const std::pair<py::array, py::array> arrays = stream_arrays(data, out, dtype);
  const py::array in = arrays.first;
  py::array result = arrays.second;
  const auto count = static_cast<std::size_t>(in.size());
  const void* in_data = in.data();
  void* out_data = result.mutable_data();
  Stream stream(target.parts.managers, fn, in.dtype(), result.dtype());
  with_element_type(op, static_cast<std::size_t>(in.itemsize()), "stream", [&](auto t) {
    using T = decltype(t);
    with_element_type(op, static_cast<std::size_t>(result.itemsize()), "stream", [&](auto u) {
      using U = decltype(u);
      const auto call = [&stream](const clbuf::Tile<T, U>& tile) { return stream.call(tile); };
      const auto* from = static_cast<const T*>(in_data);
      auto* into = static_cast<U*>(out_data);
      try {
        NoGil release;
        if (target.manager) {
          clbuf::stream_tiles(target.manager->cpp(), from, into, count, call, options);
        } else {
          clbuf::stream_tiles(*target.parts.group, from, into, count, call, options);
        }
      } catch (const clbuf::Error& error) {
        stream.raise(error);
      }
    });
  });
  return NdArray(result);
}

Dict plan_tiles(const ManagerOrGroup& manager, const Int& count, const DType& dtype,
                const OptionalDType& out_dtype, const Flag& in_place, const TileWeights& weights,
                const Int& tile_elements, const Int& in_flight, const Int& memory_budget_bytes) {
  const char* op = "plan_tiles";
  const Target target = target_of(op, manager);
  if (!PyBool_Check(in_place.ptr())) {
    fail(op, CL_INVALID_VALUE, "in_place must be True or False, not " + short_repr(in_place));
  }
  const bool one_array = in_place.ptr() == Py_True;
  if (one_array && !out_dtype.is_none()) {
    fail(op, CL_INVALID_VALUE, "in_place=True streams one array: it takes no out_dtype");
  }
  const std::size_t elements = as_size(op, count, "count");
  const py::dtype in_type = as_dtype(op, dtype);
  const py::dtype out_type = out_dtype.is_none() ? in_type : as_dtype(op, out_dtype);
  const clbuf::GroupTileOptions options =
      group_options(op, target, weights, tile_elements, in_flight, memory_budget_bytes);
  const auto in_size = static_cast<std::size_t>(in_type.itemsize());
  const auto out_size = static_cast<std::size_t>(out_type.itemsize());
  return with_element_type(op, in_size, "stream", [&](auto t) {
    return with_element_type(op, out_size, "stream", [&](auto u) {
      using T = decltype(t);
      using U = decltype(u);
      if (target.manager) {
        return plan_dict(
            clbuf::plan_tiles<T, U>(target.manager->cpp(), elements, options, one_array));
      }
      return plan_dict(clbuf::plan_tiles<T, U>(*target.parts.group, elements, options, one_array));
    });
  });
}

std::shared_ptr<TileView> tile_of(const Self<TileView>& self, const char* member) {
  return initialised(self, member);
}

}  // namespace

void bind_tiles(py::module_& m) {
  const auto none = py::none();
  python_class<TileView>(
      m, "Tile",
      "One tile of clbuf.stream_tiles(), as its function gets it: elements first to first + "
      "count of the array (index of tiles), in the first `count` elements of `input`, written "
      "to the first `count` of `output` (the same buffer in place). Enqueue the kernels on "
      "`queue` after the events of `wait_for` and return the last one's pyopencl.Event; do not "
      "wait for the device and do not keep the buffers: the next tiles reuse them.")
      .def_property_readonly(
          "index", [](Self<TileView> self) { return tile_of(self, "index")->index; },
          "k: the tile's number, from 0.")
      .def_property_readonly(
          "tiles", [](Self<TileView> self) { return tile_of(self, "tiles")->tiles; },
          "How many tiles the stream has.")
      .def_property_readonly(
          "first", [](Self<TileView> self) { return tile_of(self, "first")->first; },
          "The array's (flattened) element the tile begins at.")
      .def_property_readonly(
          "count", [](Self<TileView> self) { return tile_of(self, "count")->count; },
          "The tile's elements (the last tile may hold fewer than the others).")
      .def_property_readonly(
          "device", [](Self<TileView> self) { return tile_of(self, "device")->device; },
          "The device the tile runs on: 0, or its index in the DeviceGroup streamed over (its "
          "buffers and queue are of that device's manager, group.manager(device)).")
      .def_property_readonly(
          "input", [](Self<TileView> self) -> AnyBuffer { return tile_of(self, "input")->input; },
          "The tile's input: a 1-D DeviceBuffer of the array's dtype and the plan's "
          "tile_elements, its first `count` elements uploaded (to_pyopencl().data or int_ptr "
          "for a kernel argument).")
      .def_property_readonly(
          "output",
          [](Self<TileView> self) -> AnyBuffer { return tile_of(self, "output")->output; },
          "The tile's output: a 1-D DeviceBuffer of the output's dtype; its first `count` "
          "elements are downloaded into the output array. `input` itself in place.")
      .def_property_readonly(
          "queue",
          [](Self<TileView> self) -> PyopenclCommandQueue {
            const std::shared_ptr<TileView> tile = tile_of(self, "queue");
            const py::module_ cl = import_pyopencl("Tile.queue");
            return cl.attr("CommandQueue").attr("from_int_ptr")(int_ptr(tile->queue()), true);
          },
          "The stream's in-order queue for kernels, as a pyopencl.CommandQueue (pyopencl "
          "imported on first use).")
      .def_property_readonly(
          "queue_int_ptr",
          [](Self<TileView> self) { return int_ptr(tile_of(self, "queue_int_ptr")->queue()); },
          "The queue's cl_command_queue, as pyopencl's from_int_ptr() takes it.")
      .def_property_readonly(
          "wait_for",
          [](Self<TileView> self) -> PyopenclEvents {
            const std::shared_ptr<TileView> tile = tile_of(self, "wait_for");
            py::list events;
            for (const cl::Event& event : tile->after) {
              events.append(to_pyopencl_event("Tile.wait_for", event()));
            }
            return PyopenclEvents(std::move(events));
          },
          "The events the tile's first kernel waits for (the upload), as pyopencl.Event: "
          "pass as wait_for=.");

  m.def("stream_tiles", &stream_tiles, py::arg("manager"), py::arg("data"), py::arg("fn"),
        py::arg("out") = none, py::kw_only(), py::arg("dtype") = none, py::arg("weights") = none,
        py::arg("tile_elements") = 0, py::arg("in_flight") = 0, py::arg("memory_budget_bytes") = 0,
        "Runs fn(tile) over the elements of `data` (flattened, C order), tile by tile, and "
        "returns the output: `out` (a writable C-contiguous array of as many elements; out=data "
        "streams in place) or a new array of data's shape and `dtype` (None: data's). Per tile "
        "(a clbuf.Tile): its input uploaded from a pinned chunk, fn enqueues its kernels and "
        "returns the last one's pyopencl.Event (a clbuf.Future, or None: everything it "
        "enqueued on tile.queue), the output downloaded and written in tile order; up to "
        "`in_flight` tiles are in flight (0: 3, or fewer on a small budget), each of "
        "`tile_elements` (0: chosen from the budget), within `memory_budget_bytes` of device "
        "memory (0: a quarter of the device's). `manager` may be a DeviceGroup: the tiles are "
        "dealt to its devices (evenly, or in proportion to `weights`, one per device), each "
        "streaming through its own manager (tile.device says which; in_flight and the budget "
        "hold per device). The GIL is released while the stream waits and "
        "taken to call fn, on the calling thread. clbuf.Error for options out of range; a "
        "failure at tile k (fn raised, its event failed, a transfer failed) is a clbuf.Error "
        "naming 'tile k of n' and its elements (fn's exception as __cause__): tiles 0 to k-1 "
        "are written then, nothing of a later tile is.");
  m.def("plan_tiles", &plan_tiles, py::arg("manager"), py::arg("count"), py::arg("dtype"),
        py::arg("out_dtype") = none, py::kw_only(), py::arg("in_place") = false,
        py::arg("weights") = none, py::arg("tile_elements") = 0, py::arg("in_flight") = 0,
        py::arg("memory_budget_bytes") = 0,
        "The plan stream_tiles() would follow for `count` elements of `dtype` in and "
        "`out_dtype` (None: dtype) out, or one array in place, on `manager`'s device (a "
        "DeviceGroup: in_flight, device_bytes and budget_bytes per device), with the same "
        "options: a dict of tile_elements, in_flight, tiles, device_bytes and "
        "budget_bytes. No OpenCL call. clbuf.Error as stream_tiles() for options out of range.");
}

}  // namespace clbuf_python
