// SPDX-License-Identifier: MIT
// clbuf::Checkpoint: a named set of device buffers (and the shards of sharded buffers) saved to
// a folder and loaded back, atomic and checked (docs/design.md "Files and checkpoints").
//
// The folder DIR holds one .npy file per buffer (numpy reads each) and a manifest: each array's
// file, dtype, shape, size and the CRC32C of the file's bytes (detail/crc32c.hpp), taken while
// the chunks pass between the device and the file (no second pass), and a CRC32C of the
// manifest itself. With several ranks (clbuf::mpi, mpi/checkpoint.hpp) each rank writes its own
// files and manifest ("<name>.rank<r>.npy", "manifest.rank<r>").
//
// save(): everything is written into DIR.tmp (made afresh), every file fsync'd, then the folder;
// then (rank 0, once every rank has finished: the collective commit) DIR, if it exists, is
// renamed DIR.old, DIR.tmp renamed DIR, the parent folder fsync'd, and DIR.old removed. DIR only
// ever appears by a rename of a whole, synced folder, so at any instant (a SIGKILL, a power cut
// after the fsyncs) either DIR is a complete checkpoint, or DIR is absent and DIR.old is (killed
// between the two renames). load() reads DIR, else DIR.old.
//
// load(): reads the manifest (its own CRC checked), then each file into a new buffer of the
// manager, its header checked against the manifest and the CRC32C of its bytes against the
// manifest's; only when every file (on every rank) has passed are the bytes copied into the
// buffers given to add() (a device copy). Anything missing, truncated, corrupted (a byte
// flipped in any file, the manifest too) or of another dtype or shape than the buffer given is a
// clbuf::Error (CL_INVALID_VALUE) naming the file and what differs, and the buffers are as they
// were. Every file is read through the folder as opened (detail::OpenFolder), so a load while
// another process saves reads one whole checkpoint, the old or the new.
#ifndef CLBUF_CHECKPOINT_HPP
#define CLBUF_CHECKPOINT_HPP

#include <clbuf/buffer.hpp>
#include <clbuf/detail/buffer_access.hpp>
#include <clbuf/detail/crc32c.hpp>
#include <clbuf/detail/file_io.hpp>
#include <clbuf/detail/npy_io.hpp>
#include <clbuf/device_group.hpp>
#include <clbuf/error.hpp>
#include <clbuf/manager.hpp>
#include <clbuf/sharded_buffer.hpp>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <memory>
#include <new>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace clbuf {

/// The ranks that write one checkpoint together (a single process: rank 0 of 1).
/// clbuf::mpi::checkpoint_ranks() makes one of a Communicator.
struct CheckpointRanks {
  int rank = 0;  ///< this process's rank among them
  int size = 1;  ///< how many ranks write the checkpoint
  /// True on every rank when `ok` is true on every rank (a collective; also a barrier).
  std::function<bool(bool ok)> all_ok = [](bool ok) { return ok; };
};

namespace detail {

/// One array's line of a manifest.
struct ManifestEntry {
  std::string name, file, descr;
  std::uint64_t bytes = 0;  // the file's
  std::uint32_t crc = 0;    // CRC32C of the file's bytes
  std::vector<std::size_t> shape;
};

/// A checkpoint's manifest: its text and its parse, each with the CRC32C of the text before its
/// last line.
struct Manifest {
  int rank = 0, ranks = 1;
  std::vector<ManifestEntry> entries;

  std::string text() const {
    std::ostringstream out;
    out << "clbuf-checkpoint 1\nrank " << rank << " of " << ranks << "\n";
    for (const ManifestEntry& e : entries) {
      out << "array " << e.name << ' ' << e.file << ' ' << e.descr << ' ' << e.bytes << ' ' << e.crc
          << ' ' << e.shape.size();
      for (std::size_t extent : e.shape) out << ' ' << extent;
      out << '\n';
    }
    std::string body = out.str();
    return body + "crc32c " + std::to_string(Crc32c::of(body.data(), body.size())) + "\n";
  }

  /// Parses `text` of the file `path`. @throws Error naming the path and what is wrong.
  static Manifest parse(const char* operation, const std::string& path, const std::string& text) {
    const std::size_t last = text.rfind("crc32c ");
    if (last == std::string::npos || (last != 0 && text[last - 1] != '\n')) {
      fail_file_contents(operation, path, "the manifest has no checksum line (truncated?)");
    }
    std::uint64_t stated = 0;
    std::istringstream tail(text.substr(last + 7));
    if (!(tail >> stated) || Crc32c::of(text.data(), last) != stated || text.back() != '\n') {
      fail_file_contents(operation, path,
                         "the manifest's checksum does not match its contents (corrupted)");
    }
    std::istringstream in(text.substr(0, last));
    Manifest m;
    std::string word, of;
    int version = 0;
    if (!(in >> word >> version) || word != "clbuf-checkpoint" || version != 1 ||
        !(in >> word >> m.rank >> of >> m.ranks) || word != "rank" || of != "of") {
      fail_file_contents(operation, path, "not a clbuf checkpoint manifest (version 1)");
    }
    while (in >> word) {
      ManifestEntry e;
      std::size_t dims = 0;
      if (word != "array" || !(in >> e.name >> e.file >> e.descr >> e.bytes >> e.crc >> dims) ||
          dims > 64) {
        fail_file_contents(operation, path, "a line of the manifest is not an array's");
      }
      e.shape.resize(dims);
      for (std::size_t& extent : e.shape) {
        if (!(in >> extent)) fail_file_contents(operation, path, "an array's shape is cut short");
      }
      m.entries.push_back(std::move(e));
    }
    return m;
  }
};

/// The most bytes a manifest may have: far more than any holds (a line an array, 2 KB at most),
/// and a size past it (a corrupted file, a sparse one of terabytes) is refused before memory is
/// taken for it or its bytes read.
constexpr std::uint64_t manifest_max_bytes = std::uint64_t{1} << 30;

/// Reads the whole small file `file` (a manifest: at most manifest_max_bytes).
inline std::string read_small_file(const char* operation, const File& file) {
  const std::uint64_t size = file.size(operation);
  if (size > manifest_max_bytes) {
    fail_file_contents(operation, file.path(),
                       "has " + std::to_string(size) + " bytes, more than a manifest may (" +
                           std::to_string(manifest_max_bytes) +
                           "): not a clbuf checkpoint manifest");
  }
  std::string text(static_cast<std::size_t>(size), '\0');
  file.read_at(operation, &text[0], text.size(), 0);
  return text;
}

/// Writes `text` as the new file `path`, fsync'd.
inline void write_small_file(const char* operation, const std::string& path,
                             const std::string& text) {
  File file = File::create(operation, path);
  file.write_at(operation, text.data(), text.size(), 0);
  file.sync(operation);
  file.close(operation);
}

}  // namespace detail

/// A named set of device buffers of one manager, saved to a folder and loaded back atomically
/// and checked (the header's comment has the protocol). Not thread-safe; the buffers given to
/// add() must outlive it. Another process (or Checkpoint) must not save to the same folder at
/// the same time; one may load from it meanwhile (it reads one whole checkpoint).
class Checkpoint {
 public:
  /// The checkpoint of `manager`'s buffers in the folder `folder` (for several ranks, `ranks`:
  /// clbuf::mpi::checkpoint_ranks(comm); the folder then on a file system they all see).
  Checkpoint(BufferManager& manager, std::string folder, CheckpointRanks ranks = {})
      : manager_(manager), folder_(std::move(folder)), ranks_(std::move(ranks)) {
    while (folder_.size() > 1 && folder_.back() == '/') folder_.pop_back();
  }

  /// Adds `buffer` (a buffer or a view) as the array `name` ([A-Za-z0-9_-], unique), of `shape`
  /// (empty: buffer.shape()). @throws Error CL_INVALID_VALUE for a bad or repeated name or a
  /// shape that does not hold buffer.size() elements.
  template <class T>
  Checkpoint& add(const std::string& name, DeviceBuffer<T>& buffer,
                  std::vector<std::size_t> shape = {}) {
    add_on(manager_, name, buffer, std::move(shape));
    return *this;
  }

  /// Adds every shard of `array`, a ShardedBuffer of `group` (its ghost elements too), as the
  /// arrays "<name>-shard<k>", each saved and loaded through its own device's manager; a load
  /// needs an array of the same partition (shard sizes). @throws Error as add().
  template <class T>
  Checkpoint& add(const std::string& name, DeviceGroup& group, ShardedBuffer<T>& array) {
    check_name("Checkpoint::add", name);
    for (std::size_t k = 0; k < array.shards(); ++k) {
      add_on(group.manager(array.device(k)), name + "-shard" + std::to_string(k), array.shard(k),
             {array.shard(k).size()});
    }
    return *this;
  }

  /// Writes every array, atomically: the folder holds the previous checkpoint until this one is
  /// whole (collective over the ranks). @throws Error CL_INVALID_VALUE naming the file (a full
  /// disk, no permission, a folder of that name that is not a checkpoint); the previous
  /// checkpoint is kept and the temporary folder removed.
  void save() {
    const char* op = "Checkpoint::save";
    static_cast<void>(manager_.context());  // fails after cleanup()
    detail::check_output_path(op, folder_, "the checkpoint folder");
    const std::string temporary = folder_ + ".tmp";
    bool ok = collective(op, [&] {
      if (ranks_.rank != 0) return;
      refuse_foreign_folder(op);
      detail::remove_tree(op, temporary);
      detail::make_folder(op, temporary);
    });
    if (ok) ok = collective(op, [&] { write_files(op, temporary); });
    if (ok)
      ok = collective(op, [&] {
        if (ranks_.rank == 0) commit(op, temporary);
      });
    if (!ok) {
      if (ranks_.rank == 0) remove_quietly(temporary);
      rethrow(op);
    }
  }

  /// Loads every array into the buffers given to add(), once every file has been checked
  /// (collective over the ranks). @throws Error CL_INVALID_VALUE naming the file and what
  /// differs; the buffers are then unchanged.
  void load() {
    const char* op = "Checkpoint::load";
    detail::check_output_path(op, folder_, "the checkpoint folder");
    std::vector<std::function<void()>> commits;
    const bool ok = collective(op, [&] { commits = read_files(op); });
    if (!ok) rethrow(op);
    for (const auto& commit : commits) commit();
    manager_.finish();
  }

  /// The folder a load() reads: `folder`, or `folder`.old where a save was cut off between its
  /// two renames; empty when neither exists.
  static std::string complete_folder(const std::string& folder) {
    if (detail::is_folder(folder)) return folder;
    if (detail::is_folder(folder + ".old")) return folder + ".old";
    return std::string();
  }

 private:
  struct Array {
    std::string name, descr;
    std::vector<std::size_t> shape;
    // Writes the .npy file; returns its CRC32C and size.
    std::function<std::pair<std::uint32_t, std::uint64_t>(const char*, const detail::File&)> save;
    // Loads the checked file into a new buffer; returns its CRC32C and the copy into the target.
    std::function<std::pair<std::uint32_t, std::function<void()>>(const char*,
                                                                  const detail::NpyFile&)>
        load;
  };

  template <class T>
  void add_on(BufferManager& on, const std::string& name, DeviceBuffer<T>& buffer,
              std::vector<std::size_t> shape) {
    const char* op = "Checkpoint::add";
    check_name(op, name);
    for (const Array& earlier : arrays_) {
      if (earlier.name == name) detail::fail(op, CL_INVALID_VALUE, "'" + name + "' added twice");
    }
    if (shape.empty()) shape = buffer.shape();
    detail::check_shape(op, shape, buffer.size());
    Array array;
    array.name = name;
    array.descr = detail::npy_descr<T>();
    array.shape = shape;
    DeviceBuffer<T>* target = &buffer;
    BufferManager* manager = &on;
    array.save = [manager, target, shape](const char* o, const detail::File& file) {
      return save_array(*manager, o, file, *target, shape);
    };
    array.load = [manager, target](const char* o, const detail::NpyFile& npy) {
      return load_array(*manager, o, npy, *target);
    };
    arrays_.push_back(std::move(array));
  }

  static void check_name(const char* op, const std::string& name) {
    bool good = !name.empty() && name.size() <= 200;
    for (char c : name) {
      good = good && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '_' || c == '-');
    }
    if (!good) {
      detail::fail(op, CL_INVALID_VALUE,
                   "the array name '" + name + "' is not 1-200 of [A-Za-z0-9_-]");
    }
  }

  std::string file_name(const std::string& name) const {
    return ranks_.size == 1 ? name + ".npy" : name + ".rank" + std::to_string(ranks_.rank) + ".npy";
  }
  std::string manifest_name() const {
    return ranks_.size == 1 ? "manifest" : "manifest.rank" + std::to_string(ranks_.rank);
  }

  template <class T>
  static std::pair<std::uint32_t, std::uint64_t> save_array(BufferManager& manager, const char* op,
                                                            const detail::File& file,
                                                            const DeviceBuffer<T>& buffer,
                                                            const std::vector<std::size_t>& shape) {
    const auto entry = detail::ManagerAccess::enter(manager, op);  // cleanup() waits
    if (!buffer.valid()) detail::fail_invalid_buffer(op);
    const std::string header = detail::format_npy_header(detail::npy_descr<T>(), shape);
    detail::Crc32c crc;
    detail::npy_write(detail::ManagerAccess::engine(manager), op, file, header,
                      detail::BufferAccess::memory(buffer), buffer.size_bytes(), sizeof(T), &crc);
    return {crc.value(), header.size() + buffer.size_bytes()};
  }

  template <class T>
  static std::pair<std::uint32_t, std::function<void()>> load_array(BufferManager& manager,
                                                                    const char* op,
                                                                    const detail::NpyFile& npy,
                                                                    DeviceBuffer<T>& target) {
    const auto entry = detail::ManagerAccess::enter(manager, op);  // cleanup() waits
    npy.check_type(op, NpyType<T>::kind, NpyType<T>::bytes);
    detail::check_file_elements(op, npy, target.size());
    auto fresh = std::make_shared<DeviceBuffer<T>>(
        detail::ManagerAccess::allocate<T>(manager, op, target.size()));
    detail::Crc32c crc;
    detail::npy_read(detail::ManagerAccess::engine(manager), op, npy,
                     detail::BufferAccess::memory(*fresh), true, &crc);
    BufferManager* m = &manager;
    DeviceBuffer<T>* into = &target;
    return {crc.value(), [m, fresh, into] {
              if (!fresh->empty()) m->copy(*fresh, *into);
            }};
  }

  /// Runs `step` on every rank; true when it succeeded on all. The first local failure is kept
  /// for rethrow().
  template <class Step>
  bool collective(const char* op, Step&& step) {
    bool ok = true;
    try {
      step();
    } catch (const Error& e) {
      ok = false;
      error_ = std::make_unique<Error>(e);
    } catch (const std::bad_alloc&) {
      ok = false;
      error_ = std::make_unique<Error>(
          CL_OUT_OF_HOST_MEMORY, detail::error_message(op, CL_OUT_OF_HOST_MEMORY, "no memory"));
    } catch (const std::exception& e) {  // never skip the collective: other ranks wait in it
      ok = false;
      error_ = std::make_unique<Error>(CL_INVALID_VALUE,
                                       detail::error_message(op, CL_INVALID_VALUE, e.what()));
    }
    return ranks_.all_ok(ok);
  }

  [[noreturn]] void rethrow(const char* op) {
    if (error_) {
      const Error e = *error_;
      error_.reset();
      throw e;
    }
    detail::fail(
        op, CL_INVALID_VALUE,
        "another rank failed (its own error names the file); '" + folder_ + "' is as it was");
  }

  static void remove_quietly(const std::string& path) noexcept {
    try {
      detail::remove_tree("Checkpoint::save", path);
    } catch (...) {  // NOLINT(bugprone-empty-catch): the error being reported matters more
    }
  }

  /// A folder `folder_` that is not a checkpoint is never replaced.
  void refuse_foreign_folder(const char* op) const {
    if (!detail::path_exists(folder_)) return;
    if (detail::path_exists(folder_ + "/manifest") ||
        detail::path_exists(folder_ + "/manifest.rank0")) {
      return;
    }
    detail::fail_file_contents(op, folder_,
                               "exists and is not a clbuf checkpoint (no manifest): not replaced");
  }

  void write_files(const char* op, const std::string& temporary) {
    detail::Manifest manifest;
    manifest.rank = ranks_.rank;
    manifest.ranks = ranks_.size;
    for (const Array& array : arrays_) {
      detail::ManifestEntry entry;
      entry.name = array.name;
      entry.file = file_name(array.name);
      entry.descr = array.descr;
      entry.shape = array.shape;
      detail::File file = detail::File::create(op, temporary + "/" + entry.file);
      const auto written = array.save(op, file);
      file.sync(op);
      file.close(op);
      entry.crc = written.first;
      entry.bytes = written.second;
      manifest.entries.push_back(std::move(entry));
    }
    detail::write_small_file(op, temporary + "/" + manifest_name(), manifest.text());
    detail::sync_folder(op, temporary);
  }

  /// Rank 0, once every rank's files are synced: the renames (header comment).
  void commit(const char* op, const std::string& temporary) {
    const std::string old = folder_ + ".old";
    const std::string parent = detail::folder_of(folder_);
    if (detail::path_exists(folder_)) {
      detail::remove_tree(op, old);  // folder_ is whole: the old one is not needed
      detail::rename_path(op, folder_, old);
    }
    detail::rename_path(op, temporary, folder_);
    detail::sync_folder(op, parent);
    detail::remove_tree(op, old);
    detail::sync_folder(op, parent);
  }

  /// Reads and checks every file of the checkpoint into new buffers; returns the copies into the
  /// buffers given to add(). A save by another process at the same time replaces the folder by
  /// a rename: what is read is one checkpoint, the old or the new (read_checkpoint() reads
  /// through the folder it opened); where the folder was replaced while it was read (a file of
  /// it removed meanwhile), the new one is read, up to 8 times.
  std::vector<std::function<void()>> read_files(const char* op) {
    for (int attempt = 1;; ++attempt) {
      const std::string path = complete_folder(folder_);
      if (path.empty()) detail::fail_file(op, folder_, "no checkpoint (nor a .old one) at", ENOENT);
      std::unique_ptr<detail::OpenFolder> folder;
      try {
        folder = std::make_unique<detail::OpenFolder>(op, path);
        return read_checkpoint(op, *folder);
      } catch (const Error&) {
        // Read again where a save moved on meanwhile: the folder opened is no longer at `path`,
        // or `path` is DIR.old while DIR is back (its files being removed as they were read).
        const bool replaced =
            folder == nullptr || folder->replaced_at(path) || complete_folder(folder_) != path;
        if (!replaced || attempt == 8) throw;
      }
    }
  }

  std::vector<std::function<void()>> read_checkpoint(const char* op,
                                                     const detail::OpenFolder& folder) {
    const std::string manifest_path = folder.path() + "/" + manifest_name();
    const detail::Manifest manifest = detail::Manifest::parse(
        op, manifest_path, detail::read_small_file(op, folder.open_read(op, manifest_name())));
    if (manifest.ranks != ranks_.size || manifest.rank != ranks_.rank) {
      detail::fail_file_contents(op, manifest_path,
                                 "written by rank " + std::to_string(manifest.rank) + " of " +
                                     std::to_string(manifest.ranks) + ", read by rank " +
                                     std::to_string(ranks_.rank) + " of " +
                                     std::to_string(ranks_.size));
    }
    std::vector<std::function<void()>> commits;
    for (const Array& array : arrays_) {
      const detail::ManifestEntry* entry = nullptr;
      for (const detail::ManifestEntry& e : manifest.entries) {
        if (e.name == array.name) entry = &e;
      }
      if (entry == nullptr) {
        detail::fail_file_contents(op, manifest_path, "has no array '" + array.name + "'");
      }
      if (entry->file != file_name(array.name)) {  // never a path outside the folder
        detail::fail_file_contents(op, manifest_path,
                                   "names the file '" + entry->file + "' for the array '" +
                                       array.name + "', not '" + file_name(array.name) + "'");
      }
      commits.push_back(read_one(op, folder, *entry, array));
    }
    return commits;
  }

  static std::function<void()> read_one(const char* op, const detail::OpenFolder& folder,
                                        const detail::ManifestEntry& entry, const Array& array) {
    const std::string path = folder.path() + "/" + entry.file;
    if (entry.descr != array.descr || entry.shape != array.shape) {
      detail::fail_file_contents(op, path,
                                 "holds " + entry.descr + " of shape " +
                                     detail::shape_text(entry.shape) + ", the buffer added as '" +
                                     array.name + "' is " + array.descr + " of shape " +
                                     detail::shape_text(array.shape));
    }
    const detail::NpyFile npy = detail::NpyFile::of(op, folder.open_read(op, entry.file));
    const std::uint64_t size = npy.file.size(op);
    if (size != entry.bytes || npy.header.descr() != entry.descr ||
        npy.header.shape != entry.shape) {
      detail::fail_file_contents(
          op, path,
          "the file (" + std::to_string(size) + " bytes, " + npy.header.descr() + ", shape " +
              detail::shape_text(npy.header.shape) + ") is not what the manifest says (" +
              std::to_string(entry.bytes) + " bytes, " + entry.descr + ", shape " +
              detail::shape_text(entry.shape) + ")");
    }
    auto loaded = array.load(op, npy);
    if (loaded.first != entry.crc) {
      char text[64];
      std::snprintf(text, sizeof(text), "0x%08x, the manifest says 0x%08x", loaded.first,
                    entry.crc);
      detail::fail_file_contents(op, path,
                                 std::string("corrupted: the CRC32C of its bytes is ") + text);
    }
    return std::move(loaded.second);
  }

  BufferManager& manager_;
  std::string folder_;
  CheckpointRanks ranks_;
  std::vector<Array> arrays_;
  std::unique_ptr<Error> error_;
};

}  // namespace clbuf

#endif  // CLBUF_CHECKPOINT_HPP
