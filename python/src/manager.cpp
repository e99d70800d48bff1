// SPDX-License-Identifier: MIT
// clbuf.BufferManager and clbuf.DeviceInfo (manager.hpp).
#include "manager.hpp"

#include "dtype_dispatch.hpp"
#include "interop.hpp"
#include "values.hpp"

#include <array>

namespace clbuf_python {
namespace {

/// BufferManager's `selector`: None or a str that UTF-8 can hold.
std::optional<std::string> as_selector(const py::handle& value, const char* op) {
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

namespace {

/// The dtype of `array` must be the buffer's.
void require_same_dtype(const char* operation, const Handle& handle, const py::array& array,
                        const char* what) {
  if (!array.dtype().equal(handle.dtype)) {
    fail(operation, CL_INVALID_VALUE,
         std::string(what) + " has dtype " + describe_dtype(array.dtype()) +
             " but the buffer holds " + describe_dtype(handle.dtype));
  }
}

/// An element offset of the buffer's dtype, in bytes.
std::size_t element_offset_bytes(const char* operation, const Handle& handle,
                                 const py::handle& offset) {
  return times(operation, as_size(operation, offset, "offset"), handle.itemsize(), "offset");
}

/// A tuple of three element counts (x = column, y = row, z = slice) of a clbuf.Region field.
std::array<std::size_t, 3> triple(const char* operation, const py::handle& region,
                                  const char* field) {
  py::object value;
  try {
    value = region.attr(field);
  } catch (py::error_already_set& error) {
    error.restore();
    const std::string why = take_python_error();
    fail(operation, CL_INVALID_VALUE,
         "region must be a clbuf.Region, not " + type_name(region) + " (" + why + ")");
  }
  return counts3(operation, value, std::string("region.") + field);
}

/// A clbuf.Region in elements as the clbuf::Region of the same box in bytes (x scaled by the
/// itemsize; pitches follow from the extents, so the box is the same).
clbuf::Region as_region(const char* operation, const py::handle& region, std::size_t itemsize) {
  const auto size = triple(operation, region, "size");
  const auto src_origin = triple(operation, region, "src_origin");
  const auto src_extents = triple(operation, region, "src_extents");
  const auto dst_origin = triple(operation, region, "dst_origin");
  const auto dst_extents = triple(operation, region, "dst_extents");
  const auto x = [&](std::size_t value, const char* what) {
    return times(operation, value, itemsize, what);
  };
  clbuf::Region out;
  out.size = {x(size[0], "region.size x"), size[1], size[2]};
  out.src_origin = {x(src_origin[0], "region.src_origin x"), src_origin[1], src_origin[2]};
  out.src_extents = {x(src_extents[0], "region.src_extents x"), src_extents[1], src_extents[2]};
  out.dst_origin = {x(dst_origin[0], "region.dst_origin x"), dst_origin[1], dst_origin[2]};
  out.dst_extents = {x(dst_extents[0], "region.dst_extents x"), dst_extents[1], dst_extents[2]};
  return out;
}

/// The largest block of the pattern fill_on_host() writes at a time.
constexpr std::size_t fill_block_bytes = std::size_t{64} << 10;

/// fill() of clbuf's own memory on a CPU device (its host block), as the library fills it there:
/// uploads of the pattern repeated (memcpy after the queue's work, in the library's order).
void fill_on_host(clbuf::BufferManager& manager, clbuf::DeviceBuffer<std::uint8_t>& bytes,
                  const std::string& pattern) {
  const std::size_t total = bytes.size_bytes();
  const std::size_t item = pattern.size();
  std::vector<char> block(std::min(total, fill_block_bytes / item * item));
  if (block.empty()) return;
  std::memcpy(block.data(), pattern.data(), item);
  for (std::size_t done = item; done < block.size(); done += std::min(done, block.size() - done)) {
    std::memcpy(block.data() + done, block.data(), std::min(done, block.size() - done));
  }
  const auto* data = reinterpret_cast<const std::uint8_t*>(block.data());
  for (std::size_t at = 0; at < total; at += block.size()) {
    manager.upload(bytes, data, std::min(block.size(), total - at), at);
  }
}

/// Fills with the itemsize-byte `pattern`: a uint8 buffer directly, wider dtypes through the
/// Handle's alias of the same memory as C++ elements of that size (the library's fill takes T).
template <class W>
clbuf::Future<void> fill_handle_as(clbuf::BufferManager& manager,
                                   clbuf::DeviceBuffer<std::uint8_t>& bytes,
                                   clbuf::DeviceBuffer<W>* alias, const std::string& pattern,
                                   bool async, const std::vector<cl::Event>& after) {
  if constexpr (std::is_same_v<W, std::uint8_t>) {
    return fill_as<std::uint8_t>(manager, bytes, pattern, bytes.size(), 0, async, after);
  } else {
    if (alias == nullptr || !alias->valid()) {  // empty: no fill, but checked as any call
      return fill_as<std::uint8_t>(manager, bytes, std::string(1, '\0'), bytes.size(), 0, async,
                                   after);
    }
    return fill_as<W>(manager, *alias, pattern, alias->size(), 0, async, after);
  }
}

/// A fill of `handle` in the works: what fill_pattern() needs of the Handle, taken with the GIL
/// held (the typed alias), so that fill_pattern() runs without it.
struct FillPlan {
  std::string pattern;
  bool on_host = false;  // clbuf's own memory on a CPU device, filled by fill_on_host()
  std::shared_ptr<void> alias;
};

FillPlan plan_fill(const char* operation, clbuf::BufferManager& manager, Handle& handle,
                   const std::string& pattern, bool async) {
  check_element_size(operation, pattern.size(), "fill");
  FillPlan plan;
  plan.pattern = pattern;
  // The library fills its own memory on a CPU device by the host (fill(), not fill_async()); a
  // wider dtype's alias is adopted memory, which it fills with clEnqueueFillBuffer instead.
  plan.on_host = !async && pattern.size() > 1 && handle.nbytes() != 0 &&
                 clbuf::detail::BufferAccess::memory(handle.memory).host != nullptr;
  if (plan.on_host || handle.nbytes() == 0) return plan;
  with_element_type(operation, pattern.size(), "fill", [&](auto tag) {
    using W = decltype(tag);
    if constexpr (!std::is_same_v<W, std::uint8_t>)
      plan.alias = alias_of<W>(operation, handle, manager);
  });
  return plan;
}

clbuf::Future<void> fill_pattern(const char* operation, clbuf::BufferManager& manager,
                                 Handle& handle, const FillPlan& plan, bool async,
                                 const std::vector<cl::Event>& after) {
  if (plan.on_host) {
    fill_on_host(manager, handle.memory, plan.pattern);
    return clbuf::Future<void>();
  }
  return with_element_type(operation, plan.pattern.size(), "fill", [&](auto tag) {
    using W = decltype(tag);
    return fill_handle_as<W>(manager, handle.memory,
                             static_cast<clbuf::DeviceBuffer<W>*>(plan.alias.get()), plan.pattern,
                             async, after);
  });
}

}  // namespace

Manager::Manager(const std::optional<std::string>& selector) : selector_(selector.value_or("")) {
  NoGil release;
  manager_ = selector ? std::make_shared<clbuf::BufferManager>(*selector)
                      : std::make_shared<clbuf::BufferManager>();
}

Manager::Manager(cl::Context context, cl::CommandQueue queue) {
  NoGil release;
  manager_ = std::make_shared<clbuf::BufferManager>(std::move(context), std::move(queue));
}

std::string Manager::explain_selection() const {
  if (manager_->selection_reason().find("adopted") != std::string::npos) {
    return manager_->selection_reason();
  }
  NoGil release;
  return clbuf::explain_selection(selector_).to_string();
}

std::uintptr_t Manager::context_int_ptr() const { return int_ptr(manager_->context()()); }
std::uintptr_t Manager::queue_int_ptr() const { return int_ptr(manager_->queue()()); }

std::shared_ptr<Handle> Manager::handle_for(const py::array& array) const {
  return new_handle(manager_, array.dtype(),
                    std::vector<py::ssize_t>(array.shape(), array.shape() + array.ndim()));
}

AnyBuffer Manager::upload_to_device(const HostData& data) {
  const py::array array = as_contiguous_host_array("upload_to_device", data, "data");
  auto handle = handle_for(array);
  const auto* bytes = static_cast<const std::uint8_t*>(array.data());
  const auto count = static_cast<std::size_t>(array.nbytes());
  const clbuf::PinnedBuffer<std::uint8_t>* pinned = pinned_block_of(array);
  {
    NoGil release;
    handle->own(pinned != nullptr ? manager_->upload(*pinned) : manager_->upload(bytes, count));
  }
  return to_python(handle);
}

namespace {

/// An uninitialised C-contiguous ndarray of `dtype` and `shape`, straight from numpy's C API
/// (numpy works out the strides).
py::array new_c_array(const char* operation, const py::dtype& dtype,
                      const std::vector<py::ssize_t>& shape, std::size_t bytes) {
  const auto& api = py::detail::npy_api::get();
  auto array = py::reinterpret_steal<py::array>(api.PyArray_NewFromDescr_(
      api.PyArray_Type_, dtype.inc_ref().ptr(),  // the descriptor reference is stolen
      static_cast<int>(shape.size()), shape.data(), nullptr, nullptr, 0, nullptr));
  if (!array) fail_host_allocation(operation, "the array to download into", bytes);
  return array;
}

/// True when `shape` is a tuple of ints equal to `extents` (what the seed passes: data.shape).
bool is_same_shape(const py::handle& shape, const std::vector<py::ssize_t>& extents) {
  if (!PyTuple_CheckExact(shape.ptr())) return false;
  const Py_ssize_t count = PyTuple_GET_SIZE(shape.ptr());
  if (static_cast<std::size_t>(count) != extents.size()) return false;
  for (Py_ssize_t i = 0; i < count; ++i) {
    PyObject* item = PyTuple_GET_ITEM(shape.ptr(), i);
    if (!PyLong_CheckExact(item)) return false;
    int overflow = 0;
    const long value = PyLong_AsLongAndOverflow(item, &overflow);
    if (overflow != 0 || value != extents[static_cast<std::size_t>(i)]) return false;
  }
  return true;
}

}  // namespace

py::array Manager::new_array(const char* operation, const Handle& handle, const py::handle& shape,
                             const py::handle& dtype) {
  // The buffer's own shape and dtype object (the seed's download): nothing to convert or check.
  if ((dtype.is_none() || dtype.ptr() == handle.dtype.ptr()) &&
      (shape.is_none() || is_same_shape(shape, handle.shape))) {
    return new_c_array(operation, handle.dtype, handle.shape, handle.nbytes());
  }
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
  return new_c_array(operation, type, extents, bytes);
}

py::array Manager::out_array(const char* operation, const Handle& handle, const py::handle& out,
                             const py::handle& shape, const py::handle& dtype) {
  py::array array = as_writable_host_array(operation, out, "out");
  const py::dtype type = dtype.is_none() ? handle.dtype : as_dtype(operation, dtype);
  if (!array.dtype().equal(type)) {
    fail(operation, CL_INVALID_VALUE,
         "out has dtype " + describe_dtype(array.dtype()) + ", not " + describe_dtype(type) +
             (dtype.is_none() ? " (the buffer's)" : ""));
  }
  const std::vector<py::ssize_t> actual(array.shape(), array.shape() + array.ndim());
  if (!shape.is_none() && as_shape(operation, shape) != actual) {
    fail(operation, CL_INVALID_VALUE,
         "out has shape " + describe_shape(actual) + ", not " +
             describe_shape(as_shape(operation, shape)));
  }
  if (static_cast<std::size_t>(array.nbytes()) != handle.nbytes()) {
    fail(operation, CL_INVALID_VALUE,
         "out holds " + std::to_string(array.nbytes()) + " bytes (shape " + describe_shape(actual) +
             " of " + describe_dtype(array.dtype()) + ") but the buffer holds " +
             std::to_string(handle.nbytes()) + " bytes");
  }
  return array;
}

WritableData Manager::download_from_device(const AnyBuffer& device_buffer,
                                           const OptionalShape& shape, const OptionalDType& dtype,
                                           const OptionalWritableData& out) {
  const char* op = "download_from_device";
  const std::shared_ptr<Handle> handle = as_handle(op, device_buffer, "device_buffer");
  if (!out.is_none()) {
    py::array array = out_array(op, *handle, out, shape, dtype);
    clbuf::PinnedBuffer<std::uint8_t>* pinned = pinned_block_of(array);
    auto* bytes = static_cast<std::uint8_t*>(array.mutable_data());
    {
      NoGil release;
      if (pinned != nullptr) {
        manager_->download(handle->memory, *pinned, 0);
      } else {
        manager_->download(handle->memory, bytes, handle->nbytes(), 0);
      }
    }
    return py::reinterpret_borrow<py::object>(out);
  }
  py::array result = new_array(op, *handle, shape, dtype);
  auto* bytes = static_cast<std::uint8_t*>(result.mutable_data());
  const std::size_t count = handle->nbytes();
  {
    NoGil release;
    manager_->download(handle->memory, bytes, count, 0);
  }
  return WritableData(std::move(result));
}

void Manager::copy_device_buffer(const AnyBuffer& source_buffer, const AnyBuffer& dest_buffer,
                                 const Int& size_bytes, const Int& src_offset,
                                 const Int& dst_offset) {
  const char* op = "copy_device_buffer";
  const std::shared_ptr<Handle> source = as_handle(op, source_buffer, "source_buffer");
  const std::shared_ptr<Handle> dest = as_handle(op, dest_buffer, "dest_buffer");
  const std::size_t bytes = as_size(op, size_bytes, "size_bytes");
  const std::size_t src_at = as_size(op, src_offset, "src_offset");
  const std::size_t dst_at = as_size(op, dst_offset, "dst_offset");
  // Blocking: measured faster than copy_bytes_async on small copies (one queue command less on
  // a CPU device), and no slower on large ones once the next read waits for the copy.
  NoGil release;
  manager_->copy_bytes(source->memory, dest->memory, bytes, src_at, dst_at);
}

AnyBuffer Manager::empty(const Shape& shape, const DType& dtype) {
  const char* op = "empty";
  const py::dtype type = as_dtype(op, dtype);
  std::vector<py::ssize_t> extents = as_shape(op, shape);
  const std::size_t bytes = shape_bytes(op, extents, type);
  auto handle = new_handle(manager_, type, std::move(extents));
  {
    NoGil release;
    handle->own(manager_->allocate<std::uint8_t>(bytes));
  }
  return to_python(handle);
}

void Manager::fill(const AnyBuffer& buffer, const Number& value) {
  const char* op = "fill";
  const std::shared_ptr<Handle> handle = as_handle(op, buffer, "buffer");
  const FillPlan plan =
      plan_fill(op, *manager_, *handle, value_bytes(op, value, handle->dtype), false);
  NoGil release;
  (void)fill_pattern(op, *manager_, *handle, plan, false, {});
}

void Manager::upload_into(const AnyBuffer& buffer, const HostData& data, const Int& offset) {
  const char* op = "upload_into";
  const std::shared_ptr<Handle> handle = as_handle(op, buffer, "buffer");
  const py::array array = as_contiguous_host_array(op, data, "data");
  require_same_dtype(op, *handle, array, "data");
  const std::size_t at = element_offset_bytes(op, *handle, offset);
  const clbuf::PinnedBuffer<std::uint8_t>* pinned = pinned_block_of(array);
  const auto* bytes = static_cast<const std::uint8_t*>(array.data());
  NoGil release;
  if (pinned != nullptr) {
    manager_->upload(handle->memory, *pinned, at);
  } else {
    manager_->upload(handle->memory, bytes, static_cast<std::size_t>(array.nbytes()), at);
  }
}

void Manager::upload_rect(const AnyBuffer& buffer, const HostData& array, const RegionArg& region) {
  const char* op = "upload_rect";
  const std::shared_ptr<Handle> handle = as_handle(op, buffer, "buffer");
  const py::array host = as_contiguous_host_array(op, array, "array");
  require_same_dtype(op, *handle, host, "array");
  const clbuf::Region box = as_region(op, region, handle->itemsize());
  const auto* bytes = static_cast<const std::uint8_t*>(host.data());
  NoGil release;
  manager_->upload_rect(handle->memory, bytes, static_cast<std::size_t>(host.nbytes()), box);
}

void Manager::download_rect(const AnyBuffer& buffer, const WritableData& array,
                            const RegionArg& region) {
  const char* op = "download_rect";
  const std::shared_ptr<Handle> handle = as_handle(op, buffer, "buffer");
  py::array host = as_writable_host_array(op, array, "array");
  require_same_dtype(op, *handle, host, "array");
  const clbuf::Region box = as_region(op, region, handle->itemsize());
  auto* bytes = static_cast<std::uint8_t*>(host.mutable_data());
  NoGil release;
  manager_->download_rect(handle->memory, bytes, static_cast<std::size_t>(host.nbytes()), box);
}

void Manager::copy_rect(const AnyBuffer& source, const AnyBuffer& dest, const RegionArg& region) {
  const char* op = "copy_rect";
  const std::shared_ptr<Handle> src = as_handle(op, source, "source");
  const std::shared_ptr<Handle> dst = as_handle(op, dest, "dest");
  if (!src->dtype.equal(dst->dtype)) {
    fail(op, CL_INVALID_VALUE,
         "source holds " + describe_dtype(src->dtype) + " but dest holds " +
             describe_dtype(dst->dtype));
  }
  const clbuf::Region box = as_region(op, region, src->itemsize());
  NoGil release;
  manager_->copy_rect(src->memory, dst->memory, box);
}

std::shared_ptr<Pending> Manager::upload_async(const HostData& data, const WaitFor& wait_for) {
  const char* op = "upload_async";
  const py::array array = as_contiguous_host_array(op, data, "data");
  const std::vector<cl::Event> after = as_events(op, wait_for);
  auto handle = handle_for(array);
  const auto* bytes = static_cast<const std::uint8_t*>(array.data());
  const auto count = static_cast<std::size_t>(array.nbytes());
  Pending::Upload future;
  {
    NoGil release;
    future = manager_->upload_async(bytes, count, after);
  }
  // The device reads the array in place: the Pending keeps it alive until the upload is done.
  return std::make_shared<Pending>(std::move(future), std::move(handle), array);
}

std::shared_ptr<Pending> Manager::download_async(const AnyBuffer& device_buffer,
                                                 const OptionalShape& shape,
                                                 const OptionalDType& dtype,
                                                 const OptionalWritableData& out,
                                                 const WaitFor& wait_for) {
  const char* op = "download_async";
  const std::shared_ptr<Handle> handle = as_handle(op, device_buffer, "device_buffer");
  py::array array = out.is_none() ? new_array(op, *handle, shape, dtype)
                                  : out_array(op, *handle, out, shape, dtype);
  const std::vector<cl::Event> after = as_events(op, wait_for);
  auto* bytes = static_cast<std::uint8_t*>(array.mutable_data());
  const std::size_t count = handle->nbytes();
  Pending::Done future;
  {
    NoGil release;
    future = manager_->download_async(handle->memory, bytes, count, 0, after);
  }
  py::object result = out.is_none() ? py::object(array) : py::reinterpret_borrow<py::object>(out);
  // The array over `out` holds its buffer export: a bytearray or array.array cannot be resized
  // (its memory moved) while the device writes into it.
  return std::make_shared<Pending>(std::move(future), result,
                                   py::make_tuple(result, array, py::cast(handle)));
}

std::shared_ptr<Pending> Manager::fill_async(const AnyBuffer& buffer, const Number& value,
                                             const WaitFor& wait_for) {
  const char* op = "fill_async";
  const std::shared_ptr<Handle> handle = as_handle(op, buffer, "buffer");
  const FillPlan plan =
      plan_fill(op, *manager_, *handle, value_bytes(op, value, handle->dtype), true);
  const std::vector<cl::Event> after = as_events(op, wait_for);
  Pending::Done future;
  {
    NoGil release;
    future = fill_pattern(op, *manager_, *handle, plan, true, after);
  }
  return std::make_shared<Pending>(std::move(future), py::none(), py::cast(handle));
}

std::shared_ptr<Pending> Manager::upload_into_async(const AnyBuffer& buffer, const HostData& data,
                                                    const Int& offset, const WaitFor& wait_for) {
  const char* op = "upload_into_async";
  const std::shared_ptr<Handle> handle = as_handle(op, buffer, "buffer");
  const py::array array = as_contiguous_host_array(op, data, "data");
  require_same_dtype(op, *handle, array, "data");
  const std::size_t at = element_offset_bytes(op, *handle, offset);
  const std::vector<cl::Event> after = as_events(op, wait_for);
  const auto* bytes = static_cast<const std::uint8_t*>(array.data());
  Pending::Done future;
  {
    NoGil release;
    future = manager_->upload_async(handle->memory, bytes, static_cast<std::size_t>(array.nbytes()),
                                    at, after);
  }
  return std::make_shared<Pending>(std::move(future), py::none(),
                                   py::make_tuple(array, py::cast(handle)));
}

std::shared_ptr<Pending> Manager::copy_async(const AnyBuffer& source_buffer,
                                             const AnyBuffer& dest_buffer, const Int& size_bytes,
                                             const Int& src_offset, const Int& dst_offset,
                                             const WaitFor& wait_for) {
  const char* op = "copy_async";
  const std::shared_ptr<Handle> source = as_handle(op, source_buffer, "source_buffer");
  const std::shared_ptr<Handle> dest = as_handle(op, dest_buffer, "dest_buffer");
  const std::size_t bytes = as_size(op, size_bytes, "size_bytes");
  const std::size_t src_at = as_size(op, src_offset, "src_offset");
  const std::size_t dst_at = as_size(op, dst_offset, "dst_offset");
  const std::vector<cl::Event> after = as_events(op, wait_for);
  Pending::Done future;
  {
    NoGil release;
    future = manager_->copy_bytes_async(source->memory, dest->memory, bytes, src_at, dst_at, after);
  }
  return std::make_shared<Pending>(std::move(future), py::none(),
                                   py::make_tuple(py::cast(source), py::cast(dest)));
}

std::shared_ptr<Mapping> Manager::map(const AnyBuffer& buffer, const Str& mode) {
  const char* op = "map";
  std::shared_ptr<Handle> handle = as_handle(op, buffer, "buffer");
  return std::make_shared<Mapping>(std::move(handle), manager_, as_map_mode(op, mode));
}

py::array Manager::pinned_empty(const Shape& shape, const DType& dtype) {
  return clbuf_python::pinned_empty(*manager_, shape, dtype);
}

std::shared_ptr<Handle> Manager::adopt(const PyopenclMemory& object) {
  const char* op = "adopt";
  const py::module_ cl = import_pyopencl(op);
  const py::module_ arrays = import_pyopencl(op, "pyopencl.array");
  if (py::isinstance(object, arrays.attr("Array"))) {
    if (!object.attr("flags").attr("c_contiguous").cast<bool>()) {
      fail(op, CL_INVALID_VALUE, "the pyopencl.array.Array is not C-contiguous");
    }
    const py::dtype dtype = as_dtype(op, object.attr("dtype"));
    std::vector<py::ssize_t> shape = as_shape(op, object.attr("shape"));
    const std::size_t nbytes = object.attr("nbytes").cast<std::size_t>();
    const std::size_t offset = object.attr("offset").cast<std::size_t>();
    const py::object base = object.attr("base_data");
    auto handle = new_handle(manager_, dtype, std::move(shape));
    if (base.is_none() || nbytes == 0) {
      NoGil release;
      handle->own(manager_->allocate<std::uint8_t>(0));
      return handle;
    }
    const auto mem = reinterpret_cast<cl_mem>(base.attr("int_ptr").cast<std::uintptr_t>());
    const std::size_t capacity = base.attr("size").cast<std::size_t>();
    NoGil release;
    clbuf::DeviceBuffer<std::uint8_t> whole =
        manager_->adopt<std::uint8_t>(cl::Buffer(mem, true), capacity);
    handle->own(offset == 0 && nbytes == capacity ? std::move(whole)
                                                  : manager_->view(whole, offset, nbytes));
    return handle;
  }
  if (py::isinstance(object, cl.attr("Buffer"))) {
    const auto mem = reinterpret_cast<cl_mem>(object.attr("int_ptr").cast<std::uintptr_t>());
    const std::size_t size = object.attr("size").cast<std::size_t>();
    auto handle = new_handle(manager_, py::dtype("uint8"), {static_cast<py::ssize_t>(size)});
    NoGil release;
    handle->own(manager_->adopt<std::uint8_t>(cl::Buffer(mem, true), size));
    return handle;
  }
  fail(op, CL_INVALID_MEM_OBJECT,
       "adopt takes a pyopencl.Buffer or a pyopencl.array.Array, not " + type_name(object));
}

void bind_manager(py::module_& m) {
  // Objects made by __new__ alone hold no C++ object: every method and property below takes
  // `self` as a Self<T> and gets the object through initialised() or checked(); repr() answers
  // all the same. Every class is held by a std::shared_ptr for that (see held_object()).
  using Info = clbuf::DeviceInfo;
  python_class<Info>(
      m, "DeviceInfo",
      "What clbuf knows of one OpenCL device: bm.device, and each item of list_devices(). Its "
      "fields are attributes, and items too (info[\"name\"]).")
      .def_property_readonly(
          "name", [](Self<Info> self) { return initialised(self, "name")->name; },
          "The device's name (CL_DEVICE_NAME).")
      .def_property_readonly(
          "platform", [](Self<Info> self) { return initialised(self, "platform")->platform; },
          "The name of the device's OpenCL platform (CL_PLATFORM_NAME).")
      .def_property_readonly(
          "type", [](Self<Info> self) { return clbuf::to_string(initialised(self, "type")->type); },
          "'gpu', 'cpu', 'accelerator' or 'other'.")
      .def_property_readonly(
          "global_mem_bytes",
          [](Self<Info> self) { return initialised(self, "global_mem_bytes")->global_mem_bytes; },
          "The device's memory in bytes (CL_DEVICE_GLOBAL_MEM_SIZE).")
      .def_property_readonly(
          "max_alloc_bytes",
          [](Self<Info> self) { return initialised(self, "max_alloc_bytes")->max_alloc_bytes; },
          "The largest buffer the device allocates, in bytes (CL_DEVICE_MAX_MEM_ALLOC_SIZE).")
      .def_property_readonly(
          "platform_index",
          [](Self<Info> self) { return initialised(self, "platform_index")->platform_index; },
          "P of the 'P:D' selector: the platform's place among the OpenCL platforms.")
      .def_property_readonly(
          "device_index",
          [](Self<Info> self) { return initialised(self, "device_index")->device_index; },
          "D of the 'P:D' selector: the device's place among its platform's devices.")
      .def(
          "__getitem__",
          [](Self<Info> self, const Str& key) -> StrOrInt {
            initialised(self, "__getitem__");
            // The fields only: any other key (an attribute such as "__class__" included) is a
            // KeyError, as in a dict.
            static const char* const fields[] = {
                "name",           "platform",    "type", "global_mem_bytes", "max_alloc_bytes",
                "platform_index", "device_index"};
            if (py::isinstance<py::str>(key)) {
              for (const char* field : fields) {
                if (py::str(field).equal(key)) return py::object(self.object.attr(field));
              }
            }
            PyErr_SetObject(PyExc_KeyError, key.ptr());
            throw py::error_already_set();
          },
          py::arg("key"), "The field `key` (info[\"name\"] is info.name); KeyError for any other.")
      .def("__repr__", [](Self<Info> self) -> std::string {
        const std::shared_ptr<Info>& held = self.held;
        if (!held) return "<clbuf.DeviceInfo (never initialised)>";
        return "<clbuf.DeviceInfo [" + std::to_string(held->platform_index) + ":" +
               std::to_string(held->device_index) + "] " + held->name + " (" +
               clbuf::to_string(held->type) + ", " + held->platform + ")>";
      });

  m.def("list_devices", &clbuf::list_devices,
        "Every device of every OpenCL platform, numbered as the 'P:D' selector counts them.");

  m.def(
      "explain_selection",
      [](Selector selector) {
        const std::optional<std::string> text = as_selector(selector.object, "explain_selection");
        NoGil release;
        return clbuf::explain_selection(text.value_or("")).to_string();
      },
      py::arg("selector") = py::none(),
      "Why each device would or would not be picked for `selector` (None: CLBUF_DEVICE, else "
      "the default rule), one line for the selector and one per device.");

  const auto none = py::none();
  python_class<Manager>(
      m, "BufferManager",
      "Moves numpy arrays (and any object with the buffer protocol) to and from one OpenCL "
      "device: uploads, downloads, copies, fills, rectangles, maps, pinned arrays, their async "
      "forms, and pyopencl interop. A context manager: leaving `with` calls cleanup().")
      .def(py::init([](Selector selector) {
             return std::make_shared<Manager>(as_selector(selector.object, "BufferManager"));
           }),
           py::arg("selector") = none,
           "Picks a device: `selector` ('gpu', 'cpu', 'accelerator', 'P:D' or part of a device "
           "name), else CLBUF_DEVICE, else the first GPU, else the first CPU device.")
      .def_static(
          "from_pyopencl",
          [](const PyopenclQueue& queue) {
            const char* op = "from_pyopencl";
            const py::module_ cl = import_pyopencl(op);
            if (!py::isinstance(queue, cl.attr("CommandQueue"))) {
              fail(op, CL_INVALID_COMMAND_QUEUE,
                   "queue must be a pyopencl.CommandQueue, not " + type_name(queue));
            }
            const auto q = queue.attr("int_ptr").cast<std::uintptr_t>();
            const auto c = queue.attr("context").attr("int_ptr").cast<std::uintptr_t>();
            return reported<Manager>(op, [&] {
              return std::make_shared<Manager>(
                  cl::Context(reinterpret_cast<cl_context>(c), true),
                  cl::CommandQueue(reinterpret_cast<cl_command_queue>(q), true));
            });
          },
          py::arg("queue"),
          "A BufferManager on a pyopencl.CommandQueue's context and queue (shared, not "
          "copied): clbuf's transfers and pyopencl's kernels are ordered on that one queue.")
      .def("upload_to_device", checked("upload_to_device", &Manager::upload_to_device),
           py::arg("data"),
           "Copies host data (a numpy array or any object with the buffer protocol) into new "
           "device memory; returns a DeviceBuffer.")
      .def("download_from_device", checked("download_from_device", &Manager::download_from_device),
           py::arg("device_buffer"), py::arg("shape") = none, py::arg("dtype") = none,
           py::kw_only(), py::arg("out") = none,
           "Reads a whole DeviceBuffer into a new array of `shape` and `dtype` (None: as "
           "uploaded), whose byte count must equal the buffer's; with `out`, into that writable "
           "C-contiguous array of the buffer's dtype and byte count, which is returned.")
      .def("copy_device_buffer", checked("copy_device_buffer", &Manager::copy_device_buffer),
           py::arg("source_buffer"), py::arg("dest_buffer"), py::arg("size_bytes"),
           py::arg("src_offset") = 0, py::arg("dst_offset") = 0,
           "Copies `size_bytes` bytes from source_buffer at byte `src_offset` to dest_buffer at "
           "byte `dst_offset`, on the device.")
      .def("empty", checked("empty", &Manager::empty), py::arg("shape"),
           py::arg("dtype") = py::dtype("float64"),
           "New device memory for an array of `shape` and `dtype`, contents unspecified.")
      .def("fill", checked("fill", &Manager::fill), py::arg("buffer"), py::arg("value"),
           "Sets every element to `value` (a bool, int, float or complex), stored exactly: "
           "clbuf.Error where the buffer's dtype cannot hold it (1.7 or 300 for int8, 1e39 for "
           "float32, 2**53 + 1 for float64).")
      .def("upload_into", checked("upload_into", &Manager::upload_into), py::arg("buffer"),
           py::arg("data"), py::arg("offset") = 0,
           "Copies host data of the buffer's dtype into `buffer` from element `offset`.")
      .def("upload_rect", checked("upload_rect", &Manager::upload_rect), py::arg("buffer"),
           py::arg("array"), py::arg("region"),
           "Copies the box `region` (a clbuf.Region) of the host `array` into `buffer`.")
      .def("download_rect", checked("download_rect", &Manager::download_rect), py::arg("buffer"),
           py::arg("array"), py::arg("region"),
           "Copies the box `region` of `buffer` into the writable host `array`.")
      .def("copy_rect", checked("copy_rect", &Manager::copy_rect), py::arg("source"),
           py::arg("dest"), py::arg("region"),
           "Copies the box `region` from `source` to `dest` on the device.")
      .def("upload_async", checked("upload_async", &Manager::upload_async), py::arg("data"),
           py::kw_only(), py::arg("wait_for") = none,
           "Starts an upload; Future.get() returns the DeviceBuffer. Do not modify `data` until "
           "the Future is done.")
      .def("download_async", checked("download_async", &Manager::download_async),
           py::arg("device_buffer"), py::arg("shape") = none, py::arg("dtype") = none,
           py::kw_only(), py::arg("out") = none, py::arg("wait_for") = none,
           "Starts a download; Future.get() returns the array (`out` when given).")
      .def("fill_async", checked("fill_async", &Manager::fill_async), py::arg("buffer"),
           py::arg("value"), py::kw_only(), py::arg("wait_for") = none,
           "Starts fill(); Future.get() returns None.")
      .def("upload_into_async", checked("upload_into_async", &Manager::upload_into_async),
           py::arg("buffer"), py::arg("data"), py::arg("offset") = 0, py::kw_only(),
           py::arg("wait_for") = none,
           "Starts upload_into(); do not modify `data` until the Future is done.")
      .def("copy_async", checked("copy_async", &Manager::copy_async), py::arg("source_buffer"),
           py::arg("dest_buffer"), py::arg("size_bytes"), py::arg("src_offset") = 0,
           py::arg("dst_offset") = 0, py::kw_only(), py::arg("wait_for") = none,
           "Starts copy_device_buffer(); Future.get() returns None.")
      .def("map", checked("map", &Manager::map), py::arg("buffer"), py::arg("mode") = "rw",
           "`with bm.map(buf, mode) as a:` a numpy array of the buffer's shape and dtype over "
           "its bytes, mode 'r', 'w' or 'rw'; unmapped (written back) at exit; using `a` after "
           "the block raises clbuf.Error.")
      .def("pinned_empty", checked("pinned_empty", &Manager::pinned_empty), py::arg("shape"),
           py::arg("dtype") = py::dtype("float64"),
           "A numpy array over pinned host memory, alive as long as the array; transfers from "
           "and into the whole array take the pinned path.")
      .def("adopt", checked("adopt", &Manager::adopt), py::arg("obj"),
           "A DeviceBuffer on the memory of a pyopencl.Buffer (uint8) or pyopencl.array.Array "
           "(its dtype, shape and offset) of this manager's context: shared, not copied.")
      .def("explain_selection", checked("explain_selection", &Manager::explain_selection),
           "Why this manager's device was picked: one line for the selector, one per device.")
      .def_property_readonly("context_int_ptr",
                             checked("context_int_ptr", &Manager::context_int_ptr),
                             "The cl_context, as pyopencl.Context.from_int_ptr() takes it.")
      .def_property_readonly("queue_int_ptr", checked("queue_int_ptr", &Manager::queue_int_ptr),
                             "The cl_command_queue, as pyopencl.CommandQueue.from_int_ptr() "
                             "takes it.")
      .def("finish", checked("finish", &Manager::finish),
           "Waits until the device has done everything queued on this manager's queue "
           "(clFinish), and raises a small upload's failure not reported yet. A queue of your own "
           "on this context must wait for it before it reads what clbuf uploaded.")
      .def("cleanup", checked("cleanup", &Manager::cleanup),
           "Waits for queued work, then releases the queue and context. Idempotent; every later "
           "transfer raises clbuf.Error (code 0).")
      .def_property_readonly("device", checked("device", &Manager::device),
                             py::return_value_policy::copy,
                             "The device this manager transfers to and from, a DeviceInfo.")
      .def_property_readonly("selection_reason",
                             checked("selection_reason", &Manager::selection_reason),
                             "Why this device was picked, one line (explain_selection() has "
                             "every device's).")
      .def_property_readonly("memory_model", checked("memory_model", &Manager::memory_model),
                             "The transfer paths in use: 'host' (a CPU device; bytes move by "
                             "memcpy), 'unified' (shares host memory) or 'discrete' (own memory; "
                             "large transfers are staged through pinned memory).")
      .def("stats", checked("stats", &Manager::stats),
           "The transfers so far: a dict with 'summary' (one line of text), 'upload', "
           "'download' and 'copy' (each a dict of operations, bytes, nanoseconds, "
           "gigabytes_per_second and paths: the operations by the path they took, host_copy, "
           "staged, buffered, bounced, relayed, direct) and 'pool' (hits, misses, released, "
           "trims, retries, "
           "cached_buffers, cached_bytes, limit_bytes) and 'pinned' (clbuf's own pinned memory: "
           "budget_bytes, allocated_bytes, in_use_bytes, cached_bytes, peak_bytes, leases, "
           "reuses, allocations, refusals, trims, leaked). Still answers after cleanup().")
      .def("reset_stats", checked("reset_stats", &Manager::reset_stats),
           "Sets the transfer counters of stats() to 0.")
      .def("memory_report", checked("memory_report", &Manager::memory_report),
           py::arg("element_bytes") = 4,
           "How much fits: a dict of device_memory_bytes, max_alloc_bytes (one buffer's most), "
           "what this manager holds now (buffers and buffers_bytes in use, pool_cached_bytes, "
           "pinned_bytes of pinned_budget_bytes) and 'stream': the tiles a stream of elements of "
           "element_bytes in and out would choose (tile_elements, in_flight, device_bytes, "
           "budget_bytes). Still answers after cleanup().")
      .def(
          "__enter__",
          [](Self<Manager> self) -> AnyManager {
            initialised(self, "__enter__");
            return py::reinterpret_borrow<py::object>(self.object);
          },
          "The manager itself, for `with clbuf.BufferManager() as bm:`.")
      .def(
          "__exit__",
          [](Self<Manager> self, const py::args&) {
            initialised(self, "__exit__")->cleanup();
            return false;
          },
          "Calls cleanup(); an exception raised in the block propagates.");
}

}  // namespace clbuf_python
