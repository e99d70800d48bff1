// SPDX-License-Identifier: MIT
// clbuf.DeviceGroup, clbuf.ShardedBuffer and clbuf.ShardedHalo (group.hpp).
//
// Lifetimes: the C++ DeviceGroup is held by a shared_ptr; each manager(i) handed to Python is a
// clbuf.BufferManager over an aliasing shared_ptr to the group's manager i, so that it (and every
// DeviceBuffer it makes) keeps the C++ group alive. A ShardedBuffer keeps its DeviceGroup alive;
// shard(i) is a clbuf.DeviceBuffer over a view of the whole C++ shard (BufferManager::view), so
// that it shares the shard's memory: the memory goes back to the pool only when the ShardedBuffer
// and every such DeviceBuffer are gone, and to_pyopencl() keeps it out of the pool for good.
#include "group.hpp"

#include "dtype_dispatch.hpp"
#include "futures.hpp"
#include "manager.hpp"
#include "values.hpp"

#include <clbuf/device_group.hpp>
#include <clbuf/sharded_halo.hpp>

namespace clbuf_python {

namespace names {
inline constexpr char group_selector[] =
    "Union[str, Sequence[clbuf.DeviceInfo], Sequence[clbuf.BufferManager]]";
inline constexpr char sharded_buffer[] = "clbuf.ShardedBuffer";
inline constexpr char device_group[] = "clbuf.DeviceGroup";
inline constexpr char optional_weights[] = "Optional[Sequence[float]]";
inline constexpr char halo_copies[] = "List[Dict[str, int]]";
inline constexpr char boolean[] = "bool";
}  // namespace names

using GroupSelector = Typed<names::group_selector>;
using AnySharded = Typed<names::sharded_buffer>;
using AnyGroup = Typed<names::device_group>;
using OptionalWeights = Typed<names::optional_weights>;
using HaloCopies = Typed<names::halo_copies>;
using Bool = Typed<names::boolean>;

class Group;

/// clbuf.ShardedBuffer: the C++ ShardedBuffer of the array's bytes, with its dtype and shape.
struct Sharded {
  std::shared_ptr<Group> group;
  clbuf::ShardedBuffer<std::uint8_t> bytes;
  py::dtype dtype;
  std::vector<py::ssize_t> shape;
  /// Elements per unit of the partition.
  std::size_t unit = 1;
  /// shard(i) for Python: a DeviceBuffer over a view of shard i (made with the buffer, before
  /// Python can hand it to another thread: a view changes its parent's members).
  std::vector<std::shared_ptr<Handle>> shards;

  std::size_t itemsize() const noexcept { return static_cast<std::size_t>(dtype.itemsize()); }
  std::size_t size() const noexcept { return bytes.size() / itemsize(); }
  std::size_t ghost() const noexcept { return bytes.ghost() / itemsize(); }
  std::size_t count(std::size_t i) const { return bytes.count(i) / itemsize(); }
  std::size_t offset(std::size_t i) const { return bytes.offset(i) / itemsize(); }
};

/// clbuf.DeviceGroup over one clbuf::DeviceGroup.
class Group : public std::enable_shared_from_this<Group> {
 public:
  explicit Group(std::shared_ptr<clbuf::DeviceGroup> group) : cpp_(std::move(group)) {
    for (std::size_t i = 0; i < cpp_->size(); ++i) {
      managers_.emplace_back(cpp_, &cpp_->manager(i));  // aliasing: keeps the group alive
    }
  }

  clbuf::DeviceGroup& cpp() const noexcept { return *cpp_; }
  std::size_t size() const noexcept { return cpp_->size(); }
  const std::shared_ptr<clbuf::BufferManager>& manager_of(std::size_t i) const {
    return managers_[i];
  }

  std::shared_ptr<Manager> manager(const Int& index) const {
    const std::size_t i = as_size("DeviceGroup.manager", index, "i");
    (void)cpp_->manager(i);  // the library's range check
    return std::make_shared<Manager>(managers_[i]);
  }
  std::string explain_selection() const { return cpp_->explain_selection().to_string(); }
  bool shares_context(const Int& i, const Int& j) const {
    const char* op = "DeviceGroup.shares_context";
    return cpp_->shares_context(as_size(op, i, "i"), as_size(op, j, "j"));
  }
  std::string sharing() const {
    return cpp_->sharing() == clbuf::ContextSharing::per_platform ? "per_platform" : "per_device";
  }
  void finish() {
    NoGil release;
    cpp_->finish();
  }

  std::shared_ptr<Sharded> scatter(const HostData& data, const OptionalWeights& weights,
                                   const Int& unit, const Int& halo, const Int& max_shard_bytes);
  std::shared_ptr<Pending> scatter_async(const HostData& data, const OptionalWeights& weights,
                                         const Int& unit, const Int& halo,
                                         const Int& max_shard_bytes);
  std::shared_ptr<Sharded> empty(const Shape& shape, const DType& dtype,
                                 const OptionalWeights& weights, const Int& unit, const Int& halo,
                                 const Int& max_shard_bytes);
  py::array gather(const AnySharded& sharded);
  std::shared_ptr<Pending> gather_async(const AnySharded& sharded);
  void upload(const AnySharded& sharded, const HostData& data);
  std::shared_ptr<Pending> upload_async(const AnySharded& sharded, const HostData& data);
  WritableData download(const AnySharded& sharded, const OptionalWritableData& out);
  std::shared_ptr<Pending> download_async(const AnySharded& sharded,
                                          const OptionalWritableData& out);
  void copy(const AnySharded& source, const AnySharded& dest);
  std::shared_ptr<Pending> copy_async(const AnySharded& source, const AnySharded& dest);
  void fill(const AnySharded& sharded, const Number& value);
  std::shared_ptr<Pending> fill_async(const AnySharded& sharded, const Number& value);

  /// `value` as a ShardedBuffer of this group; clbuf.Error naming `operation` otherwise.
  std::shared_ptr<Sharded> member(const char* operation, const py::handle& value,
                                  const char* what) const;

 private:
  /// A ShardedBuffer of `dtype` and `shape` holding `bytes`, its shards' DeviceBuffers made.
  std::shared_ptr<Sharded> wrap(clbuf::ShardedBuffer<std::uint8_t> bytes, const py::dtype& dtype,
                                std::vector<py::ssize_t> shape, std::size_t unit);
  /// The array of `data` of the ShardedBuffer's dtype and element count.
  static py::array matching(const char* operation, const Sharded& sharded, const py::handle& data,
                            const char* what, bool writable);
  clbuf::Future<void> fill_shards(const char* operation, const Sharded& sharded,
                                  const std::string& pattern, bool async);

  std::shared_ptr<clbuf::DeviceGroup> cpp_;
  std::vector<std::shared_ptr<clbuf::BufferManager>> managers_;
};

/// clbuf.ShardedHalo over one clbuf::ShardedHalo of the bytes.
class Halo {
 public:
  Halo(std::shared_ptr<Group> group, const std::shared_ptr<Sharded>& layout)
      : group_(std::move(group)), dtype_(layout->dtype), itemsize_(layout->itemsize()) {
    NoGil release;
    plan_ = std::make_unique<clbuf::ShardedHalo<std::uint8_t>>(group_->cpp(), layout->bytes);
  }
  Halo(const Halo&) = delete;
  Halo& operator=(const Halo&) = delete;
  ~Halo() {
    // Destroying the plan waits for an exchange under way: without the GIL, before the field
    // it exchanges (field_, declared earlier) is released.
    if (Py_IsInitialized() != 0 && PyGILState_Check() != 0) {
      NoGil release;
      plan_.reset();
    } else {
      plan_.reset();
    }
  }

  void start(const AnySharded& field) {
    const char* op = "ShardedHalo.start";
    const std::shared_ptr<Sharded> sharded = group_->member(op, field, "field");
    if (!sharded->dtype.equal(dtype_)) {
      fail(op, CL_INVALID_VALUE,
           "field holds " + describe_dtype(sharded->dtype) + " but the plan was made for " +
               describe_dtype(dtype_));
    }
    {
      NoGil release;
      std::lock_guard<std::mutex> lock(mutex_);
      plan_->start(sharded->bytes);
    }
    field_ = py::reinterpret_borrow<py::object>(field);  // alive until finish()
  }

  void finish() {
    std::exception_ptr failure;
    {
      NoGil release;
      std::lock_guard<std::mutex> lock(mutex_);
      try {
        plan_->finish();
      } catch (...) {
        failure = std::current_exception();
      }
    }
    field_ = py::none();  // the exchange has ended either way
    if (failure) std::rethrow_exception(failure);
  }

  void exchange(const AnySharded& field) {
    start(field);
    finish();
  }

  HaloCopies copies() const {
    py::list out;
    for (const clbuf::ShardCopy& copy : plan_->copies()) {
      py::dict item;
      item["from"] = copy.from;
      item["from_offset"] = copy.from_offset / itemsize_;
      item["to"] = copy.to;
      item["to_offset"] = copy.to_offset / itemsize_;
      item["count"] = copy.count / itemsize_;
      out.append(item);
    }
    return HaloCopies(std::move(out));
  }

 private:
  std::shared_ptr<Group> group_;
  py::dtype dtype_;
  std::size_t itemsize_;
  py::object field_ = py::none();  // the field of the exchange under way
  std::mutex mutex_;               // the C++ plan is not for several threads at once
  std::unique_ptr<clbuf::ShardedHalo<std::uint8_t>> plan_;
};

template <>
struct PythonName<Group> {
  static constexpr const char* name = "DeviceGroup";
  static constexpr const char* scope = "DeviceGroup.";
  static constexpr const char* made_by = "create one with clbuf.DeviceGroup(selector)";
};

template <>
struct PythonName<Sharded> {
  static constexpr const char* name = "ShardedBuffer";
  static constexpr const char* scope = "ShardedBuffer.";
  static constexpr const char* made_by =
      "ShardedBuffers come from DeviceGroup.scatter(), scatter_async() and empty()";
};

template <>
struct PythonName<Halo> {
  static constexpr const char* name = "ShardedHalo";
  static constexpr const char* scope = "ShardedHalo.";
  static constexpr const char* made_by = "create one with clbuf.ShardedHalo(group, sharded)";
};

namespace {

/// The Partition of a split in whole `unit`s of elements, as the C++ partition of the bytes (in
/// units of unit * itemsize bytes); split_of() has the library check it in elements.
struct Split {
  clbuf::Partition partition;
  std::size_t unit = 1;
  std::size_t halo = 0;
};

/// The items of a sequence in a new list (PySequence_List), which holds a reference to each.
py::list items_of(const py::handle& sequence) {
  auto list = py::reinterpret_steal<py::list>(PySequence_List(sequence.ptr()));
  if (!list) throw py::error_already_set();
  return list;
}

std::vector<double> as_weights(const char* operation, const py::handle& weights) {
  if (PySequence_Check(weights.ptr()) == 0 || PyUnicode_Check(weights.ptr()) != 0 ||
      PyBytes_Check(weights.ptr()) != 0) {
    fail(operation, CL_INVALID_VALUE,
         "weights must be a sequence of numbers (one per device) or None, not " +
             type_name(weights));
  }
  const py::module_ numpy = py::module_::import("numpy");
  std::vector<double> out;
  // A list of the items, which holds them: a numpy array's items are new objects, freed as
  // soon as a sequence iterator moves on.
  const py::list items = items_of(weights);
  for (const py::handle item : items) {
    const bool real = (PyLong_Check(item.ptr()) != 0 && PyBool_Check(item.ptr()) == 0) ||
                      PyFloat_Check(item.ptr()) != 0 ||
                      (py::isinstance(item, numpy.attr("integer")) ||
                       py::isinstance(item, numpy.attr("floating")));
    if (!real) {
      fail(operation, CL_INVALID_VALUE,
           "weight " + std::to_string(out.size()) + " is " + short_repr(item) + " (" +
               type_name(item) + "); weights are ints or floats");
    }
    const double value = PyFloat_AsDouble(item.ptr());
    if (value == -1.0 && PyErr_Occurred() != nullptr) {
      fail(operation, CL_INVALID_VALUE,
           "weight " + std::to_string(out.size()) + " is " + short_repr(item) + ": " +
               take_python_error());
    }
    out.push_back(value);
  }
  return out;
}

/// The split of `elements` elements of `itemsize` bytes over `devices` devices, checked by the
/// library in elements (Partition::split: its messages count elements), then as the partition
/// of the bytes (in units of unit * itemsize bytes) that the C++ ShardedBuffer is split by.
Split split_of(const char* operation, std::size_t itemsize, std::size_t elements,
               std::size_t devices, const py::handle& weights, const py::handle& unit,
               const py::handle& halo, const py::handle& max_shard_bytes) {
  Split split;
  split.unit = as_size(operation, unit, "unit");
  split.halo = as_size(operation, halo, "halo");
  std::vector<double> shares;
  if (!weights.is_none()) shares = as_weights(operation, weights);
  const clbuf::Partition in_elements = weights.is_none()
                                           ? clbuf::Partition::even(split.unit)
                                           : clbuf::Partition::weighted(shares, split.unit);
  (void)in_elements.split(operation, elements, devices);
  const std::size_t unit_bytes = times(operation, split.unit, itemsize, "unit");
  (void)times(operation, times(operation, split.halo, unit_bytes, "halo"), 2, "halo");
  split.partition = (weights.is_none() ? clbuf::Partition::even(unit_bytes)
                                       : clbuf::Partition::weighted(std::move(shares), unit_bytes))
                        .max_shard_bytes(as_size(operation, max_shard_bytes, "max_shard_bytes"));
  return split;
}

/// A new C-contiguous array of the ShardedBuffer's dtype and shape; clbuf.Error
/// (CL_OUT_OF_HOST_MEMORY) when numpy cannot allocate it.
py::array new_array(const char* operation, const Sharded& sharded) {
  try {
    return py::array(sharded.dtype, sharded.shape);
  } catch (py::error_already_set& error) {
    error.restore();
    fail_host_allocation(operation, "the array to gather into", sharded.bytes.size());
  }
}

}  // namespace

std::shared_ptr<Sharded> Group::member(const char* operation, const py::handle& value,
                                       const char* what) const {
  std::shared_ptr<Sharded> sharded;
  if (!exact_held(value, sharded)) {
    if (!py::isinstance<Sharded>(value)) {
      fail(operation, CL_INVALID_VALUE,
           std::string(what) + " must be a clbuf.ShardedBuffer, not " + type_name(value));
    }
    sharded = held_object<Sharded>(value);
  }
  if (!sharded) {
    fail(operation, CL_INVALID_VALUE,
         std::string(what) +
             " is an uninitialised clbuf.ShardedBuffer (made by "
             "clbuf.ShardedBuffer.__new__); " +
             PythonName<Sharded>::made_by);
  }
  if (sharded->group.get() != this) {
    fail(operation, CL_INVALID_VALUE,
         std::string(what) + " is a ShardedBuffer of another DeviceGroup");
  }
  return sharded;
}

std::shared_ptr<Sharded> Group::wrap(clbuf::ShardedBuffer<std::uint8_t> bytes,
                                     const py::dtype& dtype, std::vector<py::ssize_t> shape,
                                     std::size_t unit) {
  auto out = std::make_shared<Sharded>();
  out->group = shared_from_this();
  out->bytes = std::move(bytes);
  out->dtype = dtype;
  out->shape = std::move(shape);
  out->unit = unit;
  for (std::size_t i = 0; i < out->bytes.shards(); ++i) {
    clbuf::DeviceBuffer<std::uint8_t>& shard = out->bytes.shard(i);
    const std::size_t device = out->bytes.device(i);
    clbuf::BufferManager& manager = *managers_[device];
    auto handle = new_handle(managers_[device], dtype,
                             {static_cast<py::ssize_t>(shard.size() / out->itemsize())});
    handle->own(shard.size() == 0 ? manager.allocate<std::uint8_t>(0)
                                  : manager.view(shard, 0, shard.size()));
    out->shards.push_back(std::move(handle));
  }
  return out;
}

std::shared_ptr<Sharded> Group::scatter(const HostData& data, const OptionalWeights& weights,
                                        const Int& unit, const Int& halo,
                                        const Int& max_shard_bytes) {
  const char* op = "DeviceGroup.scatter";
  const py::array array = as_contiguous_host_array(op, data, "array");
  const auto itemsize = static_cast<std::size_t>(array.itemsize());
  const Split split = split_of(op, itemsize, static_cast<std::size_t>(array.size()), size(),
                               weights, unit, halo, max_shard_bytes);
  const auto* bytes = static_cast<const std::uint8_t*>(array.data());
  const auto count = static_cast<std::size_t>(array.nbytes());
  clbuf::ShardedBuffer<std::uint8_t> made;
  {
    NoGil release;
    made = cpp_->scatter(bytes, count, split.partition, split.halo);
  }
  return wrap(std::move(made), array.dtype(),
              std::vector<py::ssize_t>(array.shape(), array.shape() + array.ndim()), split.unit);
}

std::shared_ptr<Pending> Group::scatter_async(const HostData& data, const OptionalWeights& weights,
                                              const Int& unit, const Int& halo,
                                              const Int& max_shard_bytes) {
  const char* op = "DeviceGroup.scatter_async";
  const py::array array = as_contiguous_host_array(op, data, "array");
  const auto itemsize = static_cast<std::size_t>(array.itemsize());
  const Split split = split_of(op, itemsize, static_cast<std::size_t>(array.size()), size(),
                               weights, unit, halo, max_shard_bytes);
  const auto* data_bytes = static_cast<const std::uint8_t*>(array.data());
  const auto count = static_cast<std::size_t>(array.nbytes());
  clbuf::ShardedBuffer<std::uint8_t> made;
  {
    NoGil release;
    made = cpp_->allocate<std::uint8_t>(count, split.partition, split.halo);
  }
  std::shared_ptr<Sharded> out =
      wrap(std::move(made), array.dtype(),
           std::vector<py::ssize_t>(array.shape(), array.shape() + array.ndim()), split.unit);
  clbuf::Future<void> joined;
  {
    NoGil release;
    joined = cpp_->scatter_into_async(out->bytes, data_bytes, count);
  }
  // The devices read the array in place: the Future keeps it alive until they are done.
  const py::object result = py::cast(out);
  return std::make_shared<Pending>(std::move(joined), result, py::make_tuple(array, result));
}

std::shared_ptr<Sharded> Group::empty(const Shape& shape, const DType& dtype,
                                      const OptionalWeights& weights, const Int& unit,
                                      const Int& halo, const Int& max_shard_bytes) {
  const char* op = "DeviceGroup.empty";
  const py::dtype type = as_dtype(op, dtype);
  std::vector<py::ssize_t> extents = as_shape(op, shape);
  const std::size_t bytes = shape_bytes(op, extents, type);
  const auto itemsize = static_cast<std::size_t>(type.itemsize());
  const Split split =
      split_of(op, itemsize, bytes / itemsize, size(), weights, unit, halo, max_shard_bytes);
  clbuf::ShardedBuffer<std::uint8_t> made;
  {
    NoGil release;
    made = cpp_->allocate<std::uint8_t>(bytes, split.partition, split.halo);
  }
  return wrap(std::move(made), type, std::move(extents), split.unit);
}

py::array Group::matching(const char* operation, const Sharded& sharded, const py::handle& data,
                          const char* what, bool writable) {
  py::array array = writable ? as_writable_host_array(operation, data, what)
                             : as_contiguous_host_array(operation, data, what);
  if (!array.dtype().equal(sharded.dtype)) {
    fail(operation, CL_INVALID_VALUE,
         std::string(what) + " has dtype " + describe_dtype(array.dtype()) +
             " but the ShardedBuffer holds " + describe_dtype(sharded.dtype));
  }
  if (static_cast<std::size_t>(array.size()) != sharded.size()) {
    fail(operation, CL_INVALID_VALUE,
         std::string(what) + " holds " + std::to_string(array.size()) + " elements (shape " +
             describe_shape(std::vector<py::ssize_t>(array.shape(), array.shape() + array.ndim())) +
             ") but the ShardedBuffer holds " + std::to_string(sharded.size()) + " (shape " +
             describe_shape(sharded.shape) + ")");
  }
  return array;
}

py::array Group::gather(const AnySharded& value) {
  const char* op = "DeviceGroup.gather";
  const std::shared_ptr<Sharded> sharded = member(op, value, "sharded");
  py::array out = new_array(op, *sharded);
  auto* bytes = static_cast<std::uint8_t*>(out.mutable_data());
  const auto count = static_cast<std::size_t>(out.nbytes());
  NoGil release;
  cpp_->download(sharded->bytes, bytes, count);
  return out;
}

std::shared_ptr<Pending> Group::gather_async(const AnySharded& value) {
  const char* op = "DeviceGroup.gather_async";
  const std::shared_ptr<Sharded> sharded = member(op, value, "sharded");
  py::array out = new_array(op, *sharded);
  auto* bytes = static_cast<std::uint8_t*>(out.mutable_data());
  const auto count = static_cast<std::size_t>(out.nbytes());
  clbuf::Future<void> future;
  {
    NoGil release;
    future = cpp_->download_async(sharded->bytes, bytes, count);
  }
  return std::make_shared<Pending>(std::move(future), out,
                                   py::make_tuple(out, py::reinterpret_borrow<py::object>(value)));
}

void Group::upload(const AnySharded& value, const HostData& data) {
  const char* op = "DeviceGroup.upload";
  const std::shared_ptr<Sharded> sharded = member(op, value, "sharded");
  const py::array array = matching(op, *sharded, data, "array", false);
  const auto* bytes = static_cast<const std::uint8_t*>(array.data());
  const auto count = static_cast<std::size_t>(array.nbytes());
  NoGil release;
  cpp_->upload(sharded->bytes, bytes, count);
}

std::shared_ptr<Pending> Group::upload_async(const AnySharded& value, const HostData& data) {
  const char* op = "DeviceGroup.upload_async";
  const std::shared_ptr<Sharded> sharded = member(op, value, "sharded");
  const py::array array = matching(op, *sharded, data, "array", false);
  const auto* bytes = static_cast<const std::uint8_t*>(array.data());
  const auto count = static_cast<std::size_t>(array.nbytes());
  clbuf::Future<void> future;
  {
    NoGil release;
    future = cpp_->upload_async(sharded->bytes, bytes, count);
  }
  return std::make_shared<Pending>(
      std::move(future), py::none(),
      py::make_tuple(array, py::reinterpret_borrow<py::object>(value)));
}

WritableData Group::download(const AnySharded& value, const OptionalWritableData& out) {
  const char* op = "DeviceGroup.download";
  const std::shared_ptr<Sharded> sharded = member(op, value, "sharded");
  if (out.is_none()) return WritableData(gather(value));
  py::array array = matching(op, *sharded, out, "out", true);
  auto* bytes = static_cast<std::uint8_t*>(array.mutable_data());
  const auto count = static_cast<std::size_t>(array.nbytes());
  {
    NoGil release;
    cpp_->download(sharded->bytes, bytes, count);
  }
  return py::reinterpret_borrow<py::object>(out);
}

std::shared_ptr<Pending> Group::download_async(const AnySharded& value,
                                               const OptionalWritableData& out) {
  const char* op = "DeviceGroup.download_async";
  const std::shared_ptr<Sharded> sharded = member(op, value, "sharded");
  if (out.is_none()) return gather_async(value);
  py::array array = matching(op, *sharded, out, "out", true);
  auto* bytes = static_cast<std::uint8_t*>(array.mutable_data());
  const auto count = static_cast<std::size_t>(array.nbytes());
  clbuf::Future<void> future;
  {
    NoGil release;
    future = cpp_->download_async(sharded->bytes, bytes, count);
  }
  const auto result = py::reinterpret_borrow<py::object>(out);
  // The array over `out` holds its buffer export while the devices write into it.
  return std::make_shared<Pending>(
      std::move(future), result,
      py::make_tuple(result, array, py::reinterpret_borrow<py::object>(value)));
}

namespace {

/// source and dest of one dtype (the split: DeviceGroup::check_alike(), in elements).
void check_same_dtype(const char* operation, const Sharded& source, const Sharded& dest) {
  if (!source.dtype.equal(dest.dtype)) {
    fail(operation, CL_INVALID_VALUE,
         "source holds " + describe_dtype(source.dtype) + " but dest holds " +
             describe_dtype(dest.dtype));
  }
}

}  // namespace

void Group::copy(const AnySharded& source, const AnySharded& dest) {
  const char* op = "DeviceGroup.copy";
  const std::shared_ptr<Sharded> src = member(op, source, "source");
  const std::shared_ptr<Sharded> dst = member(op, dest, "dest");
  check_same_dtype(op, *src, *dst);
  cpp_->check_alike(op, src->bytes, dst->bytes, src->itemsize());
  NoGil release;
  cpp_->copy(src->bytes, dst->bytes);
}

std::shared_ptr<Pending> Group::copy_async(const AnySharded& source, const AnySharded& dest) {
  const char* op = "DeviceGroup.copy_async";
  const std::shared_ptr<Sharded> src = member(op, source, "source");
  const std::shared_ptr<Sharded> dst = member(op, dest, "dest");
  check_same_dtype(op, *src, *dst);
  cpp_->check_alike(op, src->bytes, dst->bytes, src->itemsize());
  clbuf::Future<void> future;
  {
    NoGil release;
    future = cpp_->copy_async(src->bytes, dst->bytes);
  }
  return std::make_shared<Pending>(std::move(future), py::none(),
                                   py::make_tuple(py::reinterpret_borrow<py::object>(source),
                                                  py::reinterpret_borrow<py::object>(dest)));
}

clbuf::Future<void> Group::fill_shards(const char* operation, const Sharded& sharded,
                                       const std::string& pattern, bool async) {
  check_element_size(operation, pattern.size(), "fill");
  return with_element_type(operation, pattern.size(), "fill", [&](auto tag) {
    using W = decltype(tag);
    // Each shard's typed alias, taken with the GIL held (alias_of() caches it on the shard's
    // DeviceBuffer; no other Python thread runs meanwhile); the fills run without it.
    std::vector<std::shared_ptr<clbuf::DeviceBuffer<W>>> aliases(sharded.bytes.shards());
    cpp_->each_shard(operation, sharded.bytes, [&](std::size_t i) {
      aliases[i] = alias_of<W>(operation, *sharded.shards[i], *managers_[sharded.bytes.device(i)]);
    });
    NoGil release;
    const auto fill_shard = [&](std::size_t i) {
      return fill_as<W>(*managers_[sharded.bytes.device(i)], *aliases[i], pattern, sharded.count(i),
                        sharded.ghost(), async);
    };
    if (async) return cpp_->each_shard_async(operation, sharded.bytes, fill_shard);
    cpp_->each_shard(operation, sharded.bytes, [&](std::size_t i) { (void)fill_shard(i); });
    return clbuf::Future<void>();
  });
}

void Group::fill(const AnySharded& value, const Number& number) {
  const char* op = "DeviceGroup.fill";
  const std::shared_ptr<Sharded> sharded = member(op, value, "sharded");
  (void)fill_shards(op, *sharded, value_bytes(op, number, sharded->dtype), false);
}

std::shared_ptr<Pending> Group::fill_async(const AnySharded& value, const Number& number) {
  const char* op = "DeviceGroup.fill_async";
  const std::shared_ptr<Sharded> sharded = member(op, value, "sharded");
  clbuf::Future<void> future =
      fill_shards(op, *sharded, value_bytes(op, number, sharded->dtype), true);
  return std::make_shared<Pending>(std::move(future), py::none(),
                                   py::reinterpret_borrow<py::object>(value));
}

namespace {

std::string text_selector(const char* operation, const py::handle& value) {
  Py_ssize_t size = 0;
  const char* text = PyUnicode_AsUTF8AndSize(value.ptr(), &size);
  if (text == nullptr) {
    fail(operation, CL_INVALID_VALUE,
         "selector is not valid UTF-8 text (" + take_python_error() + ")");
  }
  return std::string(text, static_cast<std::size_t>(size));
}

/// A bool (Python's or numpy's), never another object's truth value.
bool as_bool(const char* operation, const py::handle& value, const char* what) {
  if (PyBool_Check(value.ptr()) != 0) return value.ptr() == Py_True;
  if (py::isinstance(value, py::module_::import("numpy").attr("bool_"))) {
    return PyObject_IsTrue(value.ptr()) == 1;
  }
  fail(operation, CL_INVALID_VALUE, std::string(what) + " must be a bool, not " + type_name(value));
}

std::shared_ptr<Group> make_group(const py::handle& selector, bool separate_contexts) {
  const char* op = "DeviceGroup";
  const clbuf::ContextSharing sharing =
      separate_contexts ? clbuf::ContextSharing::per_device : clbuf::ContextSharing::per_platform;
  std::shared_ptr<clbuf::DeviceGroup> group;
  if (selector.is_none() || PyUnicode_Check(selector.ptr()) != 0) {
    const std::string text = selector.is_none() ? std::string() : text_selector(op, selector);
    NoGil release;
    group = std::make_shared<clbuf::DeviceGroup>(text, clbuf::Options(), sharing);
    return std::make_shared<Group>(std::move(group));
  }
  if (PySequence_Check(selector.ptr()) == 0 || PyBytes_Check(selector.ptr()) != 0) {
    fail(op, CL_INVALID_VALUE,
         "selector must be a str, a list of clbuf.DeviceInfo or a list of clbuf.BufferManager, "
         "not " +
             type_name(selector));
  }
  std::vector<clbuf::DeviceInfo> devices;
  std::vector<std::shared_ptr<clbuf::BufferManager>> managers;
  const py::list items = items_of(selector);
  for (const py::handle item : items) {
    if (py::isinstance<clbuf::DeviceInfo>(item) && managers.empty()) {
      const auto info = held_object<clbuf::DeviceInfo>(item);
      if (!info) fail(op, CL_INVALID_VALUE, "the list holds an uninitialised clbuf.DeviceInfo");
      devices.push_back(*info);
    } else if (py::isinstance<Manager>(item) && devices.empty()) {
      const auto manager = held_object<Manager>(item);
      if (!manager) fail(op, CL_INVALID_VALUE, "the list holds an uninitialised BufferManager");
      managers.push_back(manager->shared());
    } else {
      fail(op, CL_INVALID_VALUE,
           "selector as a list holds only clbuf.DeviceInfo or only clbuf.BufferManager, not " +
               type_name(item));
    }
  }
  if (!managers.empty() && separate_contexts) {
    fail(op, CL_INVALID_VALUE,
         "separate_contexts applies to devices the group opens, not to adopted managers");
  }
  NoGil release;
  group = managers.empty()
              ? std::make_shared<clbuf::DeviceGroup>(devices, clbuf::Options(), sharing)
              : std::make_shared<clbuf::DeviceGroup>(std::move(managers));
  return std::make_shared<Group>(std::move(group));
}

std::shared_ptr<Sharded> sharded_of(const Self<Sharded>& self, const char* member) {
  return initialised(self, member);
}

}  // namespace

bool is_group(const py::handle& value) { return py::isinstance<Group>(value); }

GroupParts group_parts(const char* operation, const py::handle& value) {
  const std::shared_ptr<Group> group = held_object<Group>(value);
  if (!group) {
    fail(operation, CL_INVALID_VALUE,
         "an uninitialised clbuf.DeviceGroup (made by clbuf.DeviceGroup.__new__); " +
             std::string(PythonName<Group>::made_by));
  }
  GroupParts parts;
  parts.group = &group->cpp();
  for (std::size_t i = 0; i < group->size(); ++i) parts.managers.push_back(group->manager_of(i));
  return parts;
}

std::vector<double> group_weights(const char* operation, const py::handle& weights) {
  return as_weights(operation, weights);
}

bool is_sharded(const py::handle& value) { return py::isinstance<Sharded>(value); }

ShardedParts sharded_parts(const char* operation, const py::handle& value) {
  const std::shared_ptr<Sharded> sharded = held_object<Sharded>(value);
  if (!sharded) {
    fail(operation, CL_INVALID_MEM_OBJECT,
         "an uninitialised clbuf.ShardedBuffer (made by clbuf.ShardedBuffer.__new__); " +
             std::string(PythonName<Sharded>::made_by));
  }
  return ShardedParts{&sharded->group->cpp(), &sharded->bytes};
}

void bind_group(py::module_& m) {
  const auto none = py::none();
  // Classes first: each is named before any signature names it.
  auto group_class = python_class<Group>(
      m, "DeviceGroup",
      "Several OpenCL devices in one process: one BufferManager per device (manager(i)), and "
      "ShardedBuffers, numpy arrays split over the devices, moved on all of them at once.");
  auto sharded_class = python_class<Sharded>(
      m, "ShardedBuffer",
      "A numpy array split over the devices of a DeviceGroup: shard(i) is device i's "
      "DeviceBuffer, holding the elements offset(i) to offset(i) + count(i) of the flattened "
      "(C order) array at element `ghost`, with `ghost` elements of ghost layer before and "
      "after. Made by DeviceGroup.scatter(), scatter_async() and empty(); moved by the group.");
  auto halo_class = python_class<Halo>(
      m, "ShardedHalo",
      "The halo exchange between the shards of ShardedBuffers made with a halo: after "
      "exchange() (or start() then finish()), each shard's ghost elements hold the array's "
      "elements next to its part.");

  group_class
      .def(py::init([](const GroupSelector& selector, const Bool& separate_contexts) {
             return make_group(selector,
                               as_bool("DeviceGroup", separate_contexts, "separate_contexts"));
           }),
           py::arg("selector") = "", py::kw_only(), py::arg("separate_contexts") = false,
           "Opens every device `selector` names, a str in the C++ DeviceGroup's selector grammar "
           "(docs/design.md, 'Which devices'; '' is every device of the type BufferManager() "
           "would pick); or a list of clbuf.DeviceInfo (those devices, in order); or a list of "
           "clbuf.BufferManager (adopted, shared with you). Devices of one platform share a "
           "context (copies between them are device copies) unless separate_contexts=True.")
      .def("__len__", checked("__len__", &Group::size), "The number of devices.")
      .def_property_readonly("size", checked("size", &Group::size), "The number of devices.")
      .def("manager", checked("manager", &Group::manager), py::arg("i"),
           "Device i's BufferManager, for kernels and transfers of your own on that device. It "
           "keeps the group's devices open while it lives; its cleanup() closes device i for the "
           "group too.")
      .def("explain_selection", checked("explain_selection", &Group::explain_selection),
           "Every device with its verdict (picked for the group, or why not), one line each.")
      .def("shares_context", checked("shares_context", &Group::shares_context), py::arg("i"),
           py::arg("j"),
           "True when devices i and j share one OpenCL context (copies between them are device "
           "copies).")
      .def_property_readonly("sharing", checked("sharing", &Group::sharing),
                             "How contexts were made: 'per_platform' or 'per_device' (also for "
                             "adopted managers).")
      .def("scatter", checked("scatter", &Group::scatter), py::arg("array"), py::kw_only(),
           py::arg("weights") = none, py::arg("unit") = 1, py::arg("halo") = 0,
           py::arg("max_shard_bytes") = 0,
           "Splits host data (flattened in C order; its shape kept) over the devices: evenly, "
           "or in proportion to `weights` (one per device), in whole `unit`s of elements (a row "
           "or a plane of a field), each shard with `halo` units of ghost elements before and "
           "after its part holding the neighbouring elements (0 beyond the array's ends); a "
           "shard holds at most `max_shard_bytes` bytes (0: the device's max allocation), so a "
           "device may hold its part as several shards (ShardedBuffer.device(i) says whose). "
           "Returns a ShardedBuffer; nothing is left when it fails.")
      .def("scatter_async", checked("scatter_async", &Group::scatter_async), py::arg("array"),
           py::kw_only(), py::arg("weights") = none, py::arg("unit") = 1, py::arg("halo") = 0,
           py::arg("max_shard_bytes") = 0,
           "Starts scatter(); Future.get() returns the ShardedBuffer. Do not modify `array` "
           "until the Future is done.")
      .def("empty", checked("empty", &Group::empty), py::arg("shape"),
           py::arg("dtype") = py::dtype("float64"), py::kw_only(), py::arg("weights") = none,
           py::arg("unit") = 1, py::arg("halo") = 0, py::arg("max_shard_bytes") = 0,
           "A ShardedBuffer of `shape` and `dtype` split as scatter() splits, contents "
           "unspecified.")
      .def("gather", checked("gather", &Group::gather), py::arg("sharded"),
           "The ShardedBuffer's array (ghost elements left out), a new numpy array of its dtype "
           "and shape.")
      .def("gather_async", checked("gather_async", &Group::gather_async), py::arg("sharded"),
           "Starts gather(); Future.get() returns the array.")
      .def("upload", checked("upload", &Group::upload), py::arg("sharded"), py::arg("array"),
           "Writes host data of the ShardedBuffer's dtype and element count into its shards "
           "(ghost elements left as they were).")
      .def("upload_async", checked("upload_async", &Group::upload_async), py::arg("sharded"),
           py::arg("array"), "Starts upload(); do not modify `array` until the Future is done.")
      .def("download", checked("download", &Group::download), py::arg("sharded"),
           py::arg("out") = none,
           "gather() into `out`, a writable C-contiguous array of the ShardedBuffer's dtype and "
           "element count, which is returned (None: a new array).")
      .def("download_async", checked("download_async", &Group::download_async), py::arg("sharded"),
           py::arg("out") = none, "Starts download(); Future.get() returns the array.")
      .def("copy", checked("copy", &Group::copy), py::arg("source"), py::arg("dest"),
           "Copies source's array into dest's, shard by shard on each device (both of this "
           "group, of one dtype, split alike; ghost elements are not copied).")
      .def("copy_async", checked("copy_async", &Group::copy_async), py::arg("source"),
           py::arg("dest"), "Starts copy(); Future.get() returns None.")
      .def("fill", checked("fill", &Group::fill), py::arg("sharded"), py::arg("value"),
           "Sets every element of the array to `value` (ghost elements left as they were), "
           "stored exactly as BufferManager.fill() stores it: clbuf.Error where the dtype "
           "cannot hold it.")
      .def("fill_async", checked("fill_async", &Group::fill_async), py::arg("sharded"),
           py::arg("value"), "Starts fill(); Future.get() returns None.")
      .def("finish", checked("finish", &Group::finish),
           "Waits until every device has done everything queued on its manager's queue.")
      .def("__repr__", [](Self<Group> self) -> std::string {
        const std::shared_ptr<Group>& held = self.held;
        if (!held) return "<clbuf.DeviceGroup (never initialised)>";
        std::string text = "<clbuf.DeviceGroup of " + std::to_string(held->size()) + " devices:";
        for (std::size_t i = 0; i < held->size(); ++i) {
          text += (i == 0 ? " " : ", ") + held->manager_of(i)->device().name;
        }
        return text + ">";
      });

  sharded_class
      .def_property_readonly(
          "size", [](Self<Sharded> self) { return sharded_of(self, "size")->size(); },
          "The number of elements of the array.")
      .def(
          "__len__", [](Self<Sharded> self) { return sharded_of(self, "__len__")->size(); },
          "The number of elements of the array (its flattened length).")
      .def_property_readonly(
          "nbytes", [](Self<Sharded> self) { return sharded_of(self, "nbytes")->bytes.size(); },
          "The bytes of the array (size times dtype.itemsize), ghost elements left out.")
      .def_property_readonly(
          "dtype",
          [](Self<Sharded> self) -> DtypeResult { return sharded_of(self, "dtype")->dtype; },
          "The numpy dtype of the elements.")
      .def_property_readonly(
          "shape",
          [](Self<Sharded> self) -> ShapeTuple {
            return py::tuple(py::cast(sharded_of(self, "shape")->shape));
          },
          "The numpy shape of the array, a tuple of ints (gather() returns this shape).")
      .def_property_readonly(
          "shards", [](Self<Sharded> self) { return sharded_of(self, "shards")->bytes.shards(); },
          "The number of shards: the group's device count.")
      .def_property_readonly(
          "ghost", [](Self<Sharded> self) { return sharded_of(self, "ghost")->ghost(); },
          "Ghost elements before and after each part in its shard (halo times unit).")
      .def_property_readonly(
          "unit", [](Self<Sharded> self) { return sharded_of(self, "unit")->unit; },
          "Elements per unit of the split (every part is a whole number of units).")
      .def(
          "shard",
          [](Self<Sharded> self, const Int& index) -> AnyBuffer {
            const std::shared_ptr<Sharded> s = sharded_of(self, "shard");
            const std::size_t i = as_size("ShardedBuffer.shard", index, "i");
            reported<Sharded>("shard", [&] { return s->bytes.count(i); });  // the range check
            return to_python(s->shards[i]);
          },
          py::arg("i"),
          "Shard i's DeviceBuffer: count(i) + 2 * ghost elements, 1-D, on manager(device(i))'s "
          "context, sharing the shard's memory (its int_ptr and to_pyopencl() are for kernels "
          "on that device). Its elements from `ghost` are the array's from offset(i).")
      .def(
          "device",
          [](Self<Sharded> self, const Int& index) {
            const std::shared_ptr<Sharded> s = sharded_of(self, "device");
            const std::size_t i = as_size("ShardedBuffer.device", index, "i");
            return reported<Sharded>("device", [&] { return s->bytes.device(i); });
          },
          py::arg("i"),
          "The group's device that holds shard i (one shard a device unless max_shard_bytes "
          "or a device's max allocation cut its part into pieces).")
      .def(
          "offset",
          [](Self<Sharded> self, const Int& index) {
            const std::shared_ptr<Sharded> s = sharded_of(self, "offset");
            const std::size_t i = as_size("ShardedBuffer.offset", index, "i");
            return reported<Sharded>("offset", [&] { return s->offset(i); });
          },
          py::arg("i"), "The first element of the (flattened) array that shard i holds.")
      .def(
          "count",
          [](Self<Sharded> self, const Int& index) {
            const std::shared_ptr<Sharded> s = sharded_of(self, "count");
            const std::size_t i = as_size("ShardedBuffer.count", index, "i");
            return reported<Sharded>("count", [&] { return s->count(i); });
          },
          py::arg("i"), "How many elements of the array shard i holds.")
      .def_property_readonly(
          "group",
          [](Self<Sharded> self) -> AnyGroup {
            return to_python(sharded_of(self, "group")->group);
          },
          "The DeviceGroup whose devices hold the shards.")
      .def("__repr__", [](Self<Sharded> self) -> std::string {
        const std::shared_ptr<Sharded>& s = self.held;
        if (!s) return "<clbuf.ShardedBuffer (never initialised)>";
        std::string counts;
        for (std::size_t i = 0; i < s->bytes.shards(); ++i) {
          counts += (i == 0 ? "" : ", ") + std::to_string(s->count(i));
        }
        return "<clbuf.ShardedBuffer shape=" + describe_shape(s->shape) +
               " dtype=" + describe_dtype(s->dtype) + " counts=[" + counts +
               "] ghost=" + std::to_string(s->ghost()) + ">";
      });

  halo_class
      .def(py::init([](const AnyGroup& group, const AnySharded& sharded) {
             const char* op = "ShardedHalo";
             if (!py::isinstance<Group>(group)) {
               fail(op, CL_INVALID_VALUE,
                    "group must be a clbuf.DeviceGroup, not " + type_name(group));
             }
             const std::shared_ptr<Group> owner = held_object<Group>(group);
             if (!owner) fail(op, CL_INVALID_VALUE, "group is an uninitialised clbuf.DeviceGroup");
             return std::make_shared<Halo>(owner, owner->member(op, sharded, "sharded"));
           }),
           py::arg("group"), py::arg("sharded"),
           "The exchange plan for ShardedBuffers of `group` laid out as `sharded` (the same "
           "dtype, split and halo; made with halo > 0).")
      .def("start", checked("start", &Halo::start), py::arg("field"),
           "Starts the exchange of `field` (a ShardedBuffer laid out as the plan's): its copies "
           "queue after the work already queued on the devices. Kernels that need no ghost "
           "element may run until finish().")
      .def("finish", checked("finish", &Halo::finish),
           "Waits for the exchange started last (nothing to do when none is under way).")
      .def("exchange", checked("exchange", &Halo::exchange), py::arg("field"),
           "start(field), then finish().")
      .def("copies", checked("copies", &Halo::copies),
           "The copies each exchange makes: dicts of from, from_offset, to, to_offset and count "
           "(elements; offsets within the shards, ghost elements included).");
}

}  // namespace clbuf_python
