// SPDX-License-Identifier: MIT
// clbuf.mpi (python/clbuf/mpi.py): Communicator over the C++ clbuf::mpi::Communicator, on the
// MPI_Comm of an mpi4py communicator (MPI._handleof). Built where CMake finds MPI
// (CLBUF_PYTHON_MPI). Buffers travel as their bytes; allreduce, iallreduce and HaloExchange use
// the buffer's dtype. Neighbour and Box are Python classes (python/clbuf/mpi.py), read here by
// their attributes as clbuf.Region is; cartesian_faces returns tuples mpi.py makes them of.
#include <clbuf/mpi.hpp>

#include "manager.hpp"

namespace clbuf_python {
namespace {

namespace names {
constexpr char optional_device_buffer[] = "Optional[clbuf.DeviceBuffer]";
constexpr char optional_comm[] = "Optional[mpi4py.MPI.Comm]";
constexpr char optional_int[] = "Optional[int]";
constexpr char optional_str[] = "Optional[str]";
constexpr char optional_bool[] = "Optional[bool]";
constexpr char communicator[] = "clbuf.mpi.Communicator";
constexpr char plan[] = "Sequence[clbuf.mpi.Neighbour]";
constexpr char ints[] = "Sequence[int]";
constexpr char faces[] = "List[Tuple[Any, ...]]";
constexpr char constants[] = "Dict[str, int]";
}  // namespace names

using OptionalBuffer = Typed<names::optional_device_buffer>;
using OptionalComm = Typed<names::optional_comm>;
using OptionalInt = Typed<names::optional_int>;
using OptionalStr = Typed<names::optional_str>;
using OptionalBool = Typed<names::optional_bool>;
using AnyCommunicator = Typed<names::communicator>;
using Plan = Typed<names::plan>;
using Ints = Typed<names::ints>;
using Faces = Typed<names::faces>;
using Constants = Typed<names::constants>;

class Communicator;

/// clbuf.mpi.Request: an isend, irecv, ibroadcast or iallreduce in flight; keeps its buffer
/// (and a typed alias of it, `keep`) alive.
class Request {
 public:
  Request(clbuf::mpi::Request request, std::shared_ptr<Handle> buffer,
          std::shared_ptr<void> keep = nullptr)
      : buffer_(std::move(buffer)), keep_(std::move(keep)), request_(std::move(request)) {}
  ~Request() {
    if (Py_IsInitialized() != 0 && PyGILState_Check() != 0) {
      NoGil release;
      request_ = clbuf::mpi::Request();
    }
  }
  void wait() {
    NoGil release;
    request_.wait();
  }
  bool test() {
    NoGil release;
    return request_.test();
  }

 private:
  std::shared_ptr<Handle> buffer_;
  std::shared_ptr<void> keep_;
  clbuf::mpi::Request request_;  // declared last: destroyed (waited for) first
};

clbuf::mpi::Op as_op(const char* operation, const py::handle& op) {
  if (py::isinstance<py::str>(op)) {
    const std::string text = op.cast<std::string>();
    if (text == "sum") return clbuf::mpi::Op::sum;
    if (text == "min") return clbuf::mpi::Op::min;
    if (text == "max") return clbuf::mpi::Op::max;
  }
  fail(operation, CL_INVALID_VALUE,
       "op must be \"sum\", \"min\" or \"max\", not " + short_repr(op));
}

template <class T>
struct Tag {
  using type = T;
};

/// Whether `dtype` names an element type that MPI and OpenCL C both have: int8-int64,
/// uint8-uint64, float32 or float64 (the ones by_dtype() takes).
inline bool has_mpi_type(const py::dtype& dtype) {
  const char kind = dtype.kind();
  const py::ssize_t item = dtype.itemsize();
  const bool integer_size = item == 1 || item == 2 || item == 4 || item == 8;
  return (kind == 'f' && (item == 4 || item == 8)) ||
         ((kind == 'i' || kind == 'u') && integer_size);
}

/// f(Tag<T>{}) for the C++ element type T of `dtype`: int8-int64, uint8-uint64, float32 or
/// float64; clbuf.Error (CL_INVALID_VALUE) naming `what` for any other dtype.
template <class F>
auto by_dtype(const char* operation, const py::dtype& dtype, const char* what, F&& f) {
  const char kind = dtype.kind();
  const py::ssize_t item = dtype.itemsize();
  if (kind == 'f' && item == 4) return f(Tag<float>{});
  if (kind == 'f' && item == 8) return f(Tag<double>{});
  if (kind == 'i' && item == 1) return f(Tag<std::int8_t>{});
  if (kind == 'i' && item == 2) return f(Tag<std::int16_t>{});
  if (kind == 'i' && item == 4) return f(Tag<std::int32_t>{});
  if (kind == 'i' && item == 8) return f(Tag<std::int64_t>{});
  if (kind == 'u' && item == 1) return f(Tag<std::uint8_t>{});
  if (kind == 'u' && item == 2) return f(Tag<std::uint16_t>{});
  if (kind == 'u' && item == 4) return f(Tag<std::uint32_t>{});
  if (kind == 'u' && item == 8) return f(Tag<std::uint64_t>{});
  fail(operation, CL_INVALID_VALUE,
       std::string(what) + " takes int8-int64, uint8-uint64, float32 and float64 buffers, not " +
           describe_dtype(dtype));
}

template <class T>
void allreduce_as(clbuf::mpi::Communicator& comm, Handle& handle, clbuf::mpi::Op op) {
  clbuf::DeviceBuffer<T> alias = typed_alias<T>("allreduce", *handle.manager, handle.memory);
  if (!alias.valid()) alias = handle.manager->allocate<T>(0);
  comm.allreduce(alias, op);
}

/// getattr(object, name); clbuf.Error saying `object` (`what`) must be a `kind` when it has none.
py::object attribute(const char* operation, const py::handle& object, const char* name,
                     const std::string& what, const char* kind) {
  try {
    return object.attr(name);
  } catch (py::error_already_set& error) {
    error.restore();
    const std::string why = take_python_error();
    fail(operation, CL_INVALID_VALUE,
         what + " must be a " + kind + ", not " + type_name(object) + " (" + why + ")");
  }
}

clbuf::mpi::Box as_box(const char* operation, const py::handle& value, const std::string& what) {
  const char* kind = "clbuf.mpi.Box";
  const auto origin =
      counts3(operation, attribute(operation, value, "origin", what, kind), what + ".origin");
  const auto size =
      counts3(operation, attribute(operation, value, "size", what, kind), what + ".size");
  const auto field =
      counts3(operation, attribute(operation, value, "field", what, kind), what + ".field");
  return clbuf::mpi::Box{clbuf::Offset{origin[0], origin[1], origin[2]},
                         clbuf::Extents{size[0], size[1], size[2]},
                         clbuf::Extents{field[0], field[1], field[2]}};
}

/// A plan (a sequence of clbuf.mpi.Neighbour) as the C++ plan.
std::vector<clbuf::mpi::Neighbour> as_plan(const char* operation, const py::handle& plan) {
  if (PySequence_Check(plan.ptr()) == 0 || py::isinstance<py::str>(plan)) {
    fail(operation, CL_INVALID_VALUE,
         "plan must be a list of clbuf.mpi.Neighbour, not " + type_name(plan));
  }
  const py::list items = py::list(py::reinterpret_borrow<py::object>(plan));
  std::vector<clbuf::mpi::Neighbour> out;
  out.reserve(items.size());
  const char* kind = "clbuf.mpi.Neighbour";
  for (std::size_t i = 0; i < items.size(); ++i) {
    const py::handle item = items[i];
    const std::string what = "plan[" + std::to_string(i) + "]";
    const auto get = [&](const char* name) { return attribute(operation, item, name, what, kind); };
    clbuf::mpi::Neighbour n;
    n.rank = as_int(operation, get("rank"), what + ".rank");
    n.send_offset = as_size(operation, get("send_offset"), (what + ".send_offset").c_str());
    n.recv_offset = as_size(operation, get("recv_offset"), (what + ".recv_offset").c_str());
    n.count = as_size(operation, get("count"), (what + ".count").c_str());
    n.send_tag = as_int(operation, get("send_tag"), what + ".send_tag");
    n.recv_tag = as_int(operation, get("recv_tag"), what + ".recv_tag");
    const py::object send_box = get("send_box");
    if (!send_box.is_none()) n.send_box = as_box(operation, send_box, what + ".send_box");
    const py::object recv_box = get("recv_box");
    if (!recv_box.is_none()) n.recv_box = as_box(operation, recv_box, what + ".recv_box");
    out.push_back(n);
  }
  return out;
}

py::object box_tuple(const std::optional<clbuf::mpi::Box>& box) {
  if (!box) return py::none();
  return py::make_tuple(py::make_tuple(box->origin.x, box->origin.y, box->origin.z),
                        py::make_tuple(box->size.x, box->size.y, box->size.z),
                        py::make_tuple(box->field.x, box->field.y, box->field.z));
}

const char* path_name(clbuf::mpi::Path path) {
  switch (path) {
    case clbuf::mpi::Path::automatic:
      return "automatic";
    case clbuf::mpi::Path::zero_copy:
      return "zero_copy";
    case clbuf::mpi::Path::map:
      return "map";
    case clbuf::mpi::Path::staged:
      return "staged";
    case clbuf::mpi::Path::whole:
      return "whole";
  }
  return "unknown";
}

/// Communicator's keyword arguments as clbuf::mpi::Options (None: the default); the library
/// checks their ranges.
clbuf::mpi::Options as_options(const py::handle& chunk_bytes, const py::handle& depth,
                               const py::handle& path, const py::handle& device_reduce_bytes,
                               const py::handle& verify_collectives) {
  const char* op = "Communicator";
  clbuf::mpi::Options options;
  if (!chunk_bytes.is_none()) options.chunk_bytes = as_size(op, chunk_bytes, "chunk_bytes");
  if (!depth.is_none()) options.depth = as_size(op, depth, "depth");
  if (!device_reduce_bytes.is_none()) {
    options.device_reduce_bytes = as_size(op, device_reduce_bytes, "device_reduce_bytes");
  }
  if (!path.is_none()) {
    bool found = false;
    if (py::isinstance<py::str>(path)) {
      const std::string text = path.cast<std::string>();
      for (const clbuf::mpi::Path candidate :
           {clbuf::mpi::Path::automatic, clbuf::mpi::Path::zero_copy, clbuf::mpi::Path::map,
            clbuf::mpi::Path::staged, clbuf::mpi::Path::whole}) {
        if (text == path_name(candidate)) {
          options.path = candidate;
          found = true;
        }
      }
    }
    if (!found) {
      fail(op, CL_INVALID_VALUE,
           "path must be \"automatic\", \"zero_copy\", \"map\", \"staged\" or \"whole\", not " +
               short_repr(path));
    }
  }
  if (!verify_collectives.is_none()) {
    if (!py::isinstance<py::bool_>(verify_collectives)) {
      fail(op, CL_INVALID_VALUE,
           "verify_collectives must be a bool, not " + type_name(verify_collectives));
    }
    options.verify_collectives = verify_collectives.cast<bool>();
  }
  return options;
}

/// clbuf.mpi.Persistent: a send_init or recv_init; keeps its buffer and communicator alive.
class Persistent {
 public:
  Persistent(clbuf::mpi::Persistent persistent, std::shared_ptr<Handle> buffer,
             std::shared_ptr<Communicator> comm)
      : comm_(std::move(comm)), buffer_(std::move(buffer)), persistent_(std::move(persistent)) {}
  ~Persistent() {
    if (Py_IsInitialized() != 0 && PyGILState_Check() != 0) {
      NoGil release;
      persistent_.reset();
    }
  }
  void start() {
    NoGil release;
    persistent_->start();
  }
  void wait() {
    NoGil release;
    persistent_->wait();
  }
  bool test() {
    NoGil release;
    return persistent_->test();
  }
  bool active() const { return persistent_->active(); }

 private:
  std::shared_ptr<Communicator> comm_;
  std::shared_ptr<Handle> buffer_;
  std::optional<clbuf::mpi::Persistent> persistent_;  // declared last: destroyed first
};

class Communicator : public std::enable_shared_from_this<Communicator> {
 public:
  Communicator(std::shared_ptr<Manager> manager, std::uintptr_t comm,
               const clbuf::mpi::Options& options)
      : manager_(std::move(manager)) {
    NoGil release;
    comm_ = std::make_unique<clbuf::mpi::Communicator>(manager_->cpp(),
                                                       reinterpret_cast<MPI_Comm>(comm), options);
  }
  clbuf::mpi::Communicator& cpp() const noexcept { return *comm_; }
  int rank() const { return comm_->rank(); }
  int size() const { return comm_->size(); }
  Dict options() const {
    const clbuf::mpi::Options& o = comm_->options();
    py::dict out;
    out["chunk_bytes"] = o.chunk_bytes;
    out["depth"] = o.depth;
    out["path"] = path_name(o.path);
    out["device_reduce_bytes"] = o.device_reduce_bytes;
    out["verify_collectives"] = o.verify_collectives;
    return out;
  }
  void send(const AnyBuffer& buffer, const Int& dest_arg, const Int& tag_arg) {
    const int dest = as_int("send", dest_arg, "dest");
    const int tag = as_int("send", tag_arg, "tag");
    auto h = as_handle("send", buffer, "buffer");
    typed("send", *h, [&](const auto& memory) {
      NoGil release;
      comm_->send(memory, dest, tag);
    });
  }
  void recv(const AnyBuffer& buffer, const Int& source_arg, const Int& tag_arg) {
    const int source = as_int("recv", source_arg, "source");
    const int tag = as_int("recv", tag_arg, "tag");
    auto h = as_handle("recv", buffer, "buffer");
    typed("recv", *h, [&](auto& memory) {
      NoGil release;
      comm_->recv(memory, source, tag);
    });
  }
  void sendrecv(const AnyBuffer& out, const Int& dest_arg, const AnyBuffer& in,
                const Int& source_arg, const Int& tag_arg) {
    const int dest = as_int("sendrecv", dest_arg, "dest");
    const int source = as_int("sendrecv", source_arg, "source");
    const int tag = as_int("sendrecv", tag_arg, "tag");
    auto o = as_handle("sendrecv", out, "out");
    auto i = as_handle("sendrecv", in, "in_");
    // One element type a call: other dtypes on the two sides, or an empty side, as bytes.
    if (!o->dtype.equal(i->dtype) || o->nbytes() == 0 || i->nbytes() == 0) {
      NoGil release;
      comm_->sendrecv(o->memory, dest, i->memory, source, tag);
      return;
    }
    typed("sendrecv", *o, [&](const auto& sent) {
      using T = typename std::decay_t<decltype(sent)>::value_type;
      auto& received = typed_memory<T>("sendrecv", *i);
      NoGil release;
      comm_->sendrecv(sent, dest, received, source, tag);
    });
  }
  std::shared_ptr<Request> isend(const AnyBuffer& buffer, const Int& dest_arg, const Int& tag_arg) {
    const int dest = as_int("isend", dest_arg, "dest");
    const int tag = as_int("isend", tag_arg, "tag");
    auto h = as_handle("isend", buffer, "buffer");
    clbuf::mpi::Request request;
    typed("isend", *h, [&](const auto& memory) {
      NoGil release;
      request = comm_->isend(memory, dest, tag);
    });
    return std::make_shared<Request>(std::move(request), h);
  }
  std::shared_ptr<Request> irecv(const AnyBuffer& buffer, const Int& source_arg,
                                 const Int& tag_arg) {
    const int source = as_int("irecv", source_arg, "source");
    const int tag = as_int("irecv", tag_arg, "tag");
    auto h = as_handle("irecv", buffer, "buffer");
    clbuf::mpi::Request request;
    typed("irecv", *h, [&](auto& memory) {
      NoGil release;
      request = comm_->irecv(memory, source, tag);
    });
    return std::make_shared<Request>(std::move(request), h);
  }
  std::shared_ptr<Persistent> send_init(const AnyBuffer& buffer, const Int& dest_arg,
                                        const Int& tag_arg) {
    const int dest = as_int("send_init", dest_arg, "dest");
    const int tag = as_int("send_init", tag_arg, "tag");
    auto h = as_handle("send_init", buffer, "buffer");
    std::optional<clbuf::mpi::Persistent> made;
    typed("send_init", *h,
          [&](const auto& memory) { made.emplace(comm_->send_init(memory, dest, tag)); });
    return std::make_shared<Persistent>(std::move(*made), h, shared_from_this());
  }
  std::shared_ptr<Persistent> recv_init(const AnyBuffer& buffer, const Int& source_arg,
                                        const Int& tag_arg) {
    const int source = as_int("recv_init", source_arg, "source");
    const int tag = as_int("recv_init", tag_arg, "tag");
    auto h = as_handle("recv_init", buffer, "buffer");
    std::optional<clbuf::mpi::Persistent> made;
    typed("recv_init", *h,
          [&](auto& memory) { made.emplace(comm_->recv_init(memory, source, tag)); });
    return std::make_shared<Persistent>(std::move(*made), h, shared_from_this());
  }
  void broadcast(const AnyBuffer& buffer, const Int& root_arg) {
    const int root = as_int("broadcast", root_arg, "root");
    auto h = as_handle("broadcast", buffer, "buffer");
    NoGil release;
    comm_->broadcast(h->memory, root);
  }
  std::shared_ptr<Request> ibroadcast(const AnyBuffer& buffer, const Int& root_arg) {
    const int root = as_int("ibroadcast", root_arg, "root");
    auto h = as_handle("ibroadcast", buffer, "buffer");
    clbuf::mpi::Request request;
    {
      NoGil release;
      request = comm_->ibroadcast(h->memory, root);
    }
    return std::make_shared<Request>(std::move(request), h);
  }
  void allreduce(const AnyBuffer& buffer, const Str& op) {
    auto h = as_handle("allreduce", buffer, "buffer");
    const clbuf::mpi::Op reduction = as_op("allreduce", op);
    by_dtype("allreduce", h->dtype, "allreduce", [&](auto tag) {
      using T = typename decltype(tag)::type;
      NoGil release;
      allreduce_as<T>(*comm_, *h, reduction);
    });
  }
  std::shared_ptr<Request> iallreduce(const AnyBuffer& buffer, const Str& op) {
    const char* name = "iallreduce";
    auto h = as_handle(name, buffer, "buffer");
    const clbuf::mpi::Op reduction = as_op(name, op);
    return by_dtype(name, h->dtype, name, [&](auto tag) {
      using T = typename decltype(tag)::type;
      // Cached on the Handle (the GIL held); the Request keeps the Handle, and so the alias.
      std::shared_ptr<clbuf::DeviceBuffer<T>> alias = alias_of<T>(name, *h, *h->manager);
      if (!alias->valid()) {
        alias = std::make_shared<clbuf::DeviceBuffer<T>>(h->manager->allocate<T>(0));
      }
      clbuf::mpi::Request request;
      {
        NoGil release;
        request = comm_->iallreduce(*alias, reduction);
      }
      return std::make_shared<Request>(std::move(request), h, alias);
    });
  }
  void scatter(const OptionalBuffer& all, const AnyBuffer& mine, const Int& root_arg) {
    const int root = as_int("scatter", root_arg, "root");
    scatter_gather("scatter", all, mine, root, true);
  }
  void gather(const AnyBuffer& mine, const OptionalBuffer& all, const Int& root_arg) {
    const int root = as_int("gather", root_arg, "root");
    scatter_gather("gather", all, mine, root, false);
  }
  void barrier() {
    NoGil release;
    comm_->barrier();
  }

 private:
  /// The Handle's memory as DeviceBuffer<T> (its typed alias, cached on the Handle; the GIL
  /// held), so that a message carries its element type and a receiver of another dtype fails
  /// naming both. Not for an empty buffer (no alias).
  template <class T>
  clbuf::DeviceBuffer<T>& typed_memory(const char* operation, Handle& handle) {
    return *alias_of<T>(operation, handle, *handle.manager);
  }

  /// f(memory) with the Handle's memory typed by its dtype where MPI and OpenCL C both name
  /// the type (int8-int64, uint8-uint64, float32, float64), else (and for empty buffers) as
  /// bytes: then only sizes are compared between sender and receiver.
  template <class F>
  void typed(const char* operation, Handle& handle, F&& f) {
    const bool named = has_mpi_type(handle.dtype);
    // Bytes that do not start at a multiple of the element size in their OpenCL buffer (adopted
    // memory) have no typed alias either.
    if (!named || handle.nbytes() == 0 ||
        handle.memory.native_offset_bytes() % handle.itemsize() != 0) {
      f(handle.memory);
      return;
    }
    by_dtype(operation, handle.dtype, operation, [&](auto tag) {
      using T = typename decltype(tag)::type;
      f(typed_memory<T>(operation, handle));
    });
  }
  /// `all` may be None on ranks other than the root (the library reads it on the root only).
  void scatter_gather(const char* op, const py::handle& all, const py::handle& mine, int root,
                      bool scatter) {
    auto m = as_handle(op, mine, "mine");
    std::shared_ptr<Handle> a;
    if (!all.is_none()) {
      a = as_handle(op, all, "all");
      if (!a->dtype.equal(m->dtype)) {
        fail(op, CL_INVALID_VALUE,
             "all holds " + describe_dtype(a->dtype) + " but mine holds " +
                 describe_dtype(m->dtype));
      }
    }
    clbuf::DeviceBuffer<std::uint8_t> none;
    clbuf::DeviceBuffer<std::uint8_t>& whole = a ? a->memory : none;
    NoGil release;
    if (scatter) {
      comm_->scatter(whole, m->memory, root);
    } else {
      comm_->gather(m->memory, whole, root);
    }
  }

  std::shared_ptr<Manager> manager_;  // the C++ communicator must not outlive it
  std::unique_ptr<clbuf::mpi::Communicator> comm_;
};

/// One clbuf::mpi::HaloExchange<T>, whatever T.
class AnyHalo {
 public:
  AnyHalo() = default;
  AnyHalo(const AnyHalo&) = delete;
  AnyHalo& operator=(const AnyHalo&) = delete;
  virtual ~AnyHalo() = default;
  /// The field's typed alias (alias_of(), the GIL held).
  virtual std::shared_ptr<void> alias(const char* operation, Handle& field) = 0;
  virtual void start(void* alias) = 0;
  virtual bool test() = 0;
  virtual void finish() = 0;
};

template <class T>
class TypedHalo final : public AnyHalo {
 public:
  TypedHalo(clbuf::mpi::Communicator& comm, std::vector<clbuf::mpi::Neighbour> plan)
      : exchange_(comm, std::move(plan)) {}
  std::shared_ptr<void> alias(const char* operation, Handle& field) override {
    return alias_of<T>(operation, field, *field.manager);
  }
  void start(void* alias) override {
    exchange_.start(*static_cast<clbuf::DeviceBuffer<T>*>(alias));
  }
  bool test() override { return exchange_.test(); }
  void finish() override { exchange_.finish(); }

 private:
  clbuf::mpi::HaloExchange<T> exchange_;
};

/// clbuf.mpi.HaloExchange: a clbuf::mpi::HaloExchange<T> of the field's dtype, made at
/// construction (dtype given) or at the first start() (and again when a field of another dtype
/// comes). Keeps its communicator alive, and the field while an exchange is in flight.
class HaloExchange {
 public:
  HaloExchange(std::shared_ptr<Communicator> comm, std::vector<clbuf::mpi::Neighbour> plan,
               const OptionalDType& dtype)
      : comm_(std::move(comm)), plan_(std::move(plan)) {
    if (!dtype.is_none()) build(as_dtype("HaloExchange", dtype));
  }
  ~HaloExchange() {
    if (Py_IsInitialized() != 0 && PyGILState_Check() != 0) {
      NoGil release;
      exchange_.reset();
    }
  }
  void start(const AnyBuffer& field) {
    const char* op = "HaloExchange.start";
    auto h = as_handle(op, field, "field");
    if (field_) fail(op, CL_INVALID_OPERATION, "the last exchange has not finished");
    if (!exchange_ || kind_ != h->dtype.kind() || itemsize_ != h->dtype.itemsize()) {
      build(h->dtype);
    }
    std::shared_ptr<void> alias = exchange_->alias(op, *h);
    {
      NoGil release;
      exchange_->start(alias.get());
    }
    field_ = std::move(h);
    alias_ = std::move(alias);
  }
  bool test() {
    if (!field_) return true;
    bool done = false;
    {
      NoGil release;
      done = exchange_->test();
    }
    if (done) release_field();
    return done;
  }
  void finish() {
    if (!field_) return;
    std::exception_ptr failure;
    {
      NoGil release;
      try {
        exchange_->finish();
      } catch (...) {
        failure = std::current_exception();
      }
    }
    release_field();
    if (failure) std::rethrow_exception(failure);
  }
  bool active() const noexcept { return field_ != nullptr; }
  std::string dtype() const {
    if (!exchange_) return "";
    return std::string(1, kind_) + std::to_string(itemsize_);
  }

 private:
  void build(const py::dtype& dtype) {
    const char* op = "HaloExchange";
    std::vector<clbuf::mpi::Neighbour> plan = plan_;
    exchange_ = by_dtype(op, dtype, op, [&](auto tag) -> std::unique_ptr<AnyHalo> {
      using T = typename decltype(tag)::type;
      NoGil release;
      return std::make_unique<TypedHalo<T>>(comm_->cpp(), std::move(plan));
    });
    kind_ = dtype.kind();
    itemsize_ = dtype.itemsize();
  }
  void release_field() {
    alias_.reset();
    field_.reset();
  }

  std::shared_ptr<Communicator> comm_;  // the C++ exchange holds a reference to its communicator
  std::vector<clbuf::mpi::Neighbour> plan_;
  std::shared_ptr<Handle> field_;      // the field of the exchange in flight
  std::shared_ptr<void> alias_;        // its typed alias
  std::unique_ptr<AnyHalo> exchange_;  // declared last: destroyed (finished) first
  char kind_ = 0;
  py::ssize_t itemsize_ = 0;
};

}  // namespace

template <>
struct PythonName<Communicator> {
  static constexpr const char* name = "mpi.Communicator";
  static constexpr const char* scope = "";
  static constexpr const char* made_by = "create one with clbuf.mpi.Communicator(bm, comm)";
};
template <>
struct PythonName<Request> {
  static constexpr const char* name = "mpi.Request";
  static constexpr const char* scope = "Request.";
  static constexpr const char* made_by =
      "requests come from isend(), irecv(), ibroadcast() and iallreduce()";
};
template <>
struct PythonName<Persistent> {
  static constexpr const char* name = "mpi.Persistent";
  static constexpr const char* scope = "Persistent.";
  static constexpr const char* made_by =
      "persistent requests come from send_init() and recv_init()";
};
template <>
struct PythonName<HaloExchange> {
  static constexpr const char* name = "mpi.HaloExchange";
  static constexpr const char* scope = "HaloExchange.";
  static constexpr const char* made_by = "create one with clbuf.mpi.HaloExchange(comm, plan)";
};

void bind_mpi(py::module_& m) {
  // Registered as the extension's private _Mpi* classes, shown as clbuf.mpi's (python/clbuf/
  // mpi.py exports them under those names).
  python_class<Request>(
      m, "_MpiRequest",
      "An isend, irecv, ibroadcast or iallreduce in flight; keeps its buffer alive until done.")
      .def("wait", waiting("wait", &Request::wait), "Blocks until the transfer has completed.")
      .def("test", waiting("test", &Request::test), "True once the transfer has completed.");
  python_class<Persistent>(
      m, "_MpiPersistent",
      "A send_init or recv_init: the same transfer, started as often as needed.")
      .def("start", checked("start", &Persistent::start),
           "Begins one transfer; clbuf.Error while the last one is active.")
      .def("wait", waiting("wait", &Persistent::wait),
           "Blocks until the transfer started last has completed.")
      .def("test", waiting("test", &Persistent::test),
           "True once the transfer started last has completed (or none is active).")
      .def_property_readonly("active", checked("active", &Persistent::active),
                             "True while a transfer that was started has not completed.");
  python_class<Communicator>(
      m, "_MpiCommunicator",
      "DeviceBuffers between MPI ranks: the C++ clbuf::mpi::Communicator for a BufferManager on "
      "an mpi4py communicator. Point to point (send, recv, sendrecv, isend, irecv, send_init, "
      "recv_init), collectives (broadcast, ibroadcast, allreduce, iallreduce, scatter, gather, "
      "barrier); HaloExchange takes one.")
      .def(py::init([](const AnyManager& bm, const OptionalComm& comm,
                       const OptionalInt& chunk_bytes, const OptionalInt& depth,
                       const OptionalStr& path, const OptionalInt& device_reduce_bytes,
                       const OptionalBool& verify_collectives) {
             const char* op = "Communicator";
             if (!py::isinstance<Manager>(bm)) {
               fail(op, CL_INVALID_VALUE, "bm must be a clbuf.BufferManager, not " + type_name(bm));
             }
             std::shared_ptr<Manager> manager = held_object<Manager>(bm);
             if (!manager) fail_uninitialised<Manager>(op);
             const clbuf::mpi::Options options =
                 as_options(chunk_bytes, depth, path, device_reduce_bytes, verify_collectives);
             // comm's MPI_Comm, once clbuf.mpi has checked that comm is an mpi4py communicator
             // of the MPI library this extension was built with.
             const auto handle = py::module_::import("clbuf.mpi")
                                     .attr("_comm_handle")(op, comm)
                                     .cast<std::uintptr_t>();
             return std::make_shared<Communicator>(std::move(manager), handle, options);
           }),
           py::arg("bm"), py::arg("comm") = py::none(), py::kw_only(),
           py::arg("chunk_bytes") = py::none(), py::arg("depth") = py::none(),
           py::arg("path") = py::none(), py::arg("device_reduce_bytes") = py::none(),
           py::arg("verify_collectives") = py::none(),
           "A communicator for `bm` on the mpi4py communicator `comm` (None: MPI.COMM_WORLD), "
           "duplicated; collective over `comm` (local with path='whole'). The keywords are the "
           "C++ clbuf::mpi::Options (None: the default): chunk_bytes, depth, path ('automatic', "
           "'zero_copy', 'map', 'staged', or 'whole': plain MPI messages for peers without "
           "clbuf), device_reduce_bytes, verify_collectives.")
      .def_property_readonly("rank", checked("rank", &Communicator::rank),
                             "This rank's number in the communicator.")
      .def_property_readonly("size", checked("size", &Communicator::size),
                             "The number of ranks in the communicator.")
      .def_property_readonly("options", checked("options", &Communicator::options),
                             "The options in use, a dict of chunk_bytes, depth, path, "
                             "device_reduce_bytes and verify_collectives.")
      .def("send", checked("send", &Communicator::send), py::arg("buffer"), py::arg("dest"),
           py::arg("tag") = 0, "Sends the whole buffer to rank `dest`; returns when it is sent.")
      .def("recv", checked("recv", &Communicator::recv), py::arg("buffer"), py::arg("source"),
           py::arg("tag") = 0,
           "Receives a message from rank `source` into the whole buffer (its dtype and size must "
           "be the sender's).")
      .def("sendrecv", checked("sendrecv", &Communicator::sendrecv), py::arg("out"),
           py::arg("dest"), py::arg("in_"), py::arg("source"), py::arg("tag") = 0,
           "Sends `out` to `dest` and receives `in_` from `source` at once (no deadlock).")
      .def("isend", checked("isend", &Communicator::isend), py::arg("buffer"), py::arg("dest"),
           py::arg("tag") = 0, "Starts send(); returns a Request.")
      .def("irecv", checked("irecv", &Communicator::irecv), py::arg("buffer"), py::arg("source"),
           py::arg("tag") = 0, "Starts recv(); returns a Request.")
      .def("send_init", checked("send_init", &Communicator::send_init), py::arg("buffer"),
           py::arg("dest"), py::arg("tag") = 0,
           "A persistent send of the buffer to `dest`, started by its start().")
      .def("recv_init", checked("recv_init", &Communicator::recv_init), py::arg("buffer"),
           py::arg("source"), py::arg("tag") = 0,
           "A persistent receive into the buffer from `source`, started by its start().")
      .def("broadcast", checked("broadcast", &Communicator::broadcast), py::arg("buffer"),
           py::arg("root"), "Every rank's buffer gets the root's (collective).")
      .def("ibroadcast", checked("ibroadcast", &Communicator::ibroadcast), py::arg("buffer"),
           py::arg("root"), "Starts broadcast(); returns a Request.")
      .def("allreduce", checked("allreduce", &Communicator::allreduce), py::arg("buffer"),
           py::arg("op") = "sum",
           "Every rank's buffer becomes the elementwise 'sum', 'min' or 'max' over the ranks "
           "(int8-int64, uint8-uint64, float32, float64; collective).")
      .def("iallreduce", checked("iallreduce", &Communicator::iallreduce), py::arg("buffer"),
           py::arg("op") = "sum", "Starts allreduce(); returns a Request.")
      .def("scatter", checked("scatter", &Communicator::scatter), py::arg("all"), py::arg("mine"),
           py::arg("root"),
           "Rank r's `mine` gets part r of the root's `all` (size * len(mine) elements; None on "
           "the other ranks).")
      .def("gather", checked("gather", &Communicator::gather), py::arg("mine"), py::arg("all"),
           py::arg("root"),
           "The root's `all` gets every rank's `mine`, in rank order (None on the other ranks).")
      .def("barrier", checked("barrier", &Communicator::barrier),
           "Returns once every rank has called it.");
  python_class<HaloExchange>(
      m, "_MpiHaloExchange",
      "A persistent halo exchange of one field: each Neighbour of `plan` sends its range or box "
      "of the field to its rank and receives its ghost cells from it.")
      .def(py::init([](const AnyCommunicator& comm, const Plan& plan, const OptionalDType& dtype) {
             const char* op = "HaloExchange";
             if (!py::isinstance<Communicator>(comm)) {
               fail(op, CL_INVALID_VALUE,
                    "comm must be a clbuf.mpi.Communicator, not " + type_name(comm));
             }
             std::shared_ptr<Communicator> held = held_object<Communicator>(comm);
             if (!held) fail_uninitialised<Communicator>(op);
             return std::make_shared<HaloExchange>(std::move(held), as_plan(op, plan), dtype);
           }),
           py::arg("comm"), py::arg("plan"), py::kw_only(), py::arg("dtype") = py::none(),
           "An exchange of `plan` (a list of clbuf.mpi.Neighbour, e.g. from cartesian_faces()) "
           "on `comm`; with `dtype`, checked and its pack buffers made now, else at the first "
           "start().")
      .def("start", checked("start", &HaloExchange::start), py::arg("field"),
           "Packs and sends the boxes and ranges sent, posts the receives; returns.")
      .def("test", checked("test", &HaloExchange::test),
           "Moves the exchange on; True once the field holds every ghost cell (or none is in "
           "flight).")
      .def("finish", checked("finish", &HaloExchange::finish),
           "Blocks until the field holds every ghost cell.")
      .def_property_readonly("active", checked("active", &HaloExchange::active),
                             "True while an exchange that was started has not finished.");
  m.def(
      "_mpi_cartesian_faces",
      [](std::uintptr_t cart, const Ints& interior, const Int& halo_width, bool edges_and_corners,
         const Int& first_tag) -> Faces {
        const char* op = "cartesian_faces";
        const auto n = counts3(op, interior, "interior");
        const std::size_t width = as_size(op, halo_width, "halo");
        const int tag = as_int(op, first_tag, "first_tag");
        std::vector<clbuf::mpi::Neighbour> plan;
        {
          NoGil release;
          plan = clbuf::mpi::cartesian_faces(reinterpret_cast<MPI_Comm>(cart),
                                             clbuf::Extents{n[0], n[1], n[2]}, width,
                                             edges_and_corners, tag);
        }
        py::list out;
        for (const clbuf::mpi::Neighbour& neighbour : plan) {
          out.append(py::make_tuple(neighbour.rank, neighbour.send_offset, neighbour.recv_offset,
                                    neighbour.count, neighbour.send_tag, neighbour.recv_tag,
                                    box_tuple(neighbour.send_box), box_tuple(neighbour.recv_box)));
        }
        return Faces(std::move(out));
      },
      py::arg("cart"), py::arg("interior"), py::arg("halo"), py::arg("edges_and_corners"),
      py::arg("first_tag"),
      "clbuf.mpi.cartesian_faces()'s plan as tuples (rank, send_offset, recv_offset, count, "
      "send_tag, recv_tag, send_box, recv_box); a box is None or (origin, size, field).");
  m.def(
      "_mpi_constants",
      []() -> Constants {
        py::dict out;
        out["PROC_NULL"] = MPI_PROC_NULL;
        out["ANY_SOURCE"] = MPI_ANY_SOURCE;
        out["ANY_TAG"] = MPI_ANY_TAG;
        return Constants(std::move(out));
      },
      "MPI_PROC_NULL, MPI_ANY_SOURCE and MPI_ANY_TAG of the MPI library this extension was built "
      "with.");
}

}  // namespace clbuf_python
