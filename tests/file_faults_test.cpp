// SPDX-License-Identifier: MIT
// The failure branches of clbuf's .npy files and checkpoints (issue 44; docs/design.md "What a
// failed call leaves behind"), each reached as it happens: a device failing mid-file (OpenCL
// calls failed by tests/fault/fault_hook.hpp), a file cut short after its header was checked, a
// destination that is a folder, a full disk (a small tmpfs, mounted where the test may: as root),
// a leftover temporary folder that cannot be removed (a mount point inside it), a manifest whose
// checksum holds but whose lines are wrong, another rank failing (a CheckpointRanks whose all_ok
// says so). Each failure is a clbuf::Error naming the call and the file; save_npy leaves the old
// file and no temporary file, Checkpoint::save the previous checkpoint and no DIR.tmp,
// Checkpoint::load no buffer changed.
#include "fault/fault_hook.hpp"  // first: defines CLBUF_CL before clbuf is included

#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <clbuf/checkpoint.hpp>
#include <clbuf/clbuf.hpp>
#include <clbuf/detail/crc32c.hpp>
#include <clbuf/sharded_npy.hpp>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "support/child_exit.hpp"
#include "support/device_test.hpp"

namespace {

using clbuf::MemoryModel;
using clbuf_fault::state;

/// A fresh folder under TMPDIR (or /tmp), removed with what it holds at the end (after the
/// mounts made in it are detached).
class TempFolder {
 public:
  TempFolder() {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = std::string(base != nullptr ? base : "/tmp") + "/clbuf-faults-XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  TempFolder(const TempFolder&) = delete;
  TempFolder& operator=(const TempFolder&) = delete;
  ~TempFolder() {
    for (auto at = mounts_.rbegin(); at != mounts_.rend(); ++at) ::umount2(at->c_str(), MNT_DETACH);
    try {
      clbuf::detail::remove_tree("test", path_);
    } catch (...) {  // NOLINT(bugprone-empty-catch): best effort
    }
  }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }
  /// The names in `folder` (this folder by default), sorted.
  std::vector<std::string> entries(const std::string& folder = std::string()) const {
    auto names = clbuf::detail::folder_entries("test", folder.empty() ? path_ : folder);
    std::sort(names.begin(), names.end());
    return names;
  }
  /// Mounts a tmpfs of `options` ("size=64k") at the folder `at` (made here); false where this
  /// process may not mount (not root, or a container without the right).
  bool mount_tmpfs(const std::string& at, const std::string& options) {
    ::mkdir(at.c_str(), 0755);
    if (::mount("tmpfs", at.c_str(), "tmpfs", 0, options.c_str()) != 0) return false;
    mounts_.push_back(at);
    return true;
  }

 private:
  std::string path_;
  std::vector<std::string> mounts_;
};

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

void write_all(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

std::vector<float> ramp(std::size_t count, float start = 0.0f) {
  std::vector<float> data(count);
  for (std::size_t i = 0; i < count; ++i) data[i] = start + static_cast<float>(i);
  return data;
}

/// The message of the clbuf::Error that `statement` throws; a failure when it throws none or
/// another exception.
std::string clbuf_error_of(const std::function<void()>& statement) {
  try {
    statement();
  } catch (const clbuf::Error& error) {
    return error.what();
  } catch (const std::exception& error) {
    ADD_FAILURE() << "not a clbuf::Error: " << error.what();
    return std::string();
  }
  ADD_FAILURE() << "no error";
  return std::string();
}

/// `text` holds every one of `parts`.
::testing::AssertionResult holds(const std::string& text, const std::vector<std::string>& parts) {
  for (const std::string& part : parts) {
    if (text.find(part) == std::string::npos) {
      return ::testing::AssertionFailure() << "\"" << part << "\" is not in: " << text;
    }
  }
  return ::testing::AssertionSuccess();
}

/// Disarms the fault hook on the way out of a scope (an assertion's early return included).
struct Disarmed {
  Disarmed() = default;
  Disarmed(const Disarmed&) = delete;
  Disarmed& operator=(const Disarmed&) = delete;
  ~Disarmed() { state().disarm(); }
};

/// The OpenCL call that moves a file's bytes on `model`, to be failed at its `n`th call: on a
/// device's own memory (host) the wait for the queue (clFinish), else the chunk's read from the
/// device (a save) or write to it (a load).
void arm_file_transfer(MemoryModel model, bool save, long n) {
  if (model == MemoryModel::host) {
    state().arm(clbuf_fault::Finish, n, false);
  } else {
    state().arm(save ? clbuf_fault::EnqueueReadBuffer : clbuf_fault::EnqueueWriteBuffer, n, false);
  }
}

/// A manager on one memory model, with 4 KiB chunks (small files cross chunk edges).
class FileFaults : public ::testing::TestWithParam<MemoryModel> {
 protected:
  void SetUp() override {
    if (clbuf_test::host_model_unavailable(GetParam())) {
      GTEST_SKIP() << "MemoryModel::host needs a CPU device";
    }
    clbuf::Options options = clbuf_test::fault_options(GetParam());
    try {
      manager_ = std::make_unique<clbuf::BufferManager>("", options);
    } catch (const clbuf::Error& error) {
      if (clbuf_test::device_required()) FAIL() << "no device: " << error.what();
      GTEST_SKIP() << "no OpenCL device: " << error.what();
    }
  }
  void TearDown() override { state().disarm(); }
  clbuf::BufferManager& manager() { return *manager_; }

  /// A manifest line by line: the manifest of the checkpoint in `folder`, its checksum line
  /// dropped, `edit` applied, and the checksum made again for what it then says.
  static void rewrite_manifest(const std::string& folder,
                               const std::function<void(std::string&)>& edit) {
    std::string text = read_all(folder + "/manifest");
    text = text.substr(0, text.rfind("crc32c "));
    edit(text);
    text += "crc32c " + std::to_string(clbuf::detail::Crc32c::of(text.data(), text.size())) + "\n";
    write_all(folder + "/manifest", text);
  }

  std::unique_ptr<clbuf::BufferManager> manager_;
  TempFolder folder_;
};

INSTANTIATE_TEST_SUITE_P(Models, FileFaults,
                         ::testing::Values(MemoryModel::host, MemoryModel::discrete),
                         clbuf_test::model_name);

// ---------------------------------------------------------------------------------------------
// The file system refusing.

// A destination that is a folder is found only at the rename into place: the save fails there,
// naming both paths, and the temporary file it wrote is gone (blocking and asynchronous).
TEST_P(FileFaults, ASaveOntoAFolderFailsAtTheRenameAndLeavesNoTemporaryFile) {
  const std::string target = folder_ / "taken.npy";
  ASSERT_EQ(::mkdir(target.c_str(), 0755), 0);
  write_all(target + "/inside", "kept");
  auto buffer = manager().upload(ramp(3000));
  const std::string message = clbuf_error_of([&] { manager().save_npy(target, buffer); });
  EXPECT_TRUE(holds(message, {"save_npy", "cannot rename to '" + target + "'"}));
  EXPECT_EQ(folder_.entries(), std::vector<std::string>{"taken.npy"});
  clbuf::Future<void> saved = manager().save_npy_async(target, buffer);
  const std::string later = clbuf_error_of([&] { saved.get(); });
  EXPECT_TRUE(holds(later, {"save_npy_async", "cannot rename to '" + target + "'"}));
  EXPECT_EQ(folder_.entries(), std::vector<std::string>{"taken.npy"});
  EXPECT_TRUE(read_all(target + "/inside") == "kept");
}

// A file cut short after load_npy_async checked its header against its size (another process
// truncating it while the load waits for the queue): the read that finds the end is the load's
// error, at get(), naming the file and where it ended.
TEST_P(FileFaults, AFileCutShortAfterItsHeaderWasCheckedFailsTheLoadAtGet) {
  const std::string path = folder_ / "a.npy";
  manager().save_npy(path, manager().upload(ramp(5000)));
  const std::size_t header = clbuf::read_npy_header(path).data_offset;
  // The manager's queue held by a user event: the load's bytes move only once it completes.
  cl::UserEvent gate(manager().context());
  struct Opened {  // completes the gate however the test ends
    cl_event event;
    ~Opened() {
      if (event != nullptr) ::clSetUserEventStatus(event, CL_COMPLETE);
    }
  } open_at_end{gate()};
  const std::vector<cl::Event> wait_for = {gate};
  manager().queue().enqueueBarrierWithWaitList(&wait_for);
  clbuf::Future<clbuf::DeviceBuffer<float>> loading = manager().load_npy_async<float>(path);
  auto target = manager().allocate<float>(5000);
  clbuf::Future<void> into = manager().load_npy_async(path, target);
  ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(header + 400)), 0);
  ASSERT_EQ(::clSetUserEventStatus(gate(), CL_COMPLETE), CL_SUCCESS);
  open_at_end.event = nullptr;
  const std::string message = clbuf_error_of([&] { static_cast<void>(loading.get()); });
  EXPECT_TRUE(holds(message, {"load_npy_async", path, "the file ends at byte", "truncated"}));
  EXPECT_TRUE(holds(clbuf_error_of([&] { into.get(); }), {"load_npy_async", path, "truncated"}));
  auto after = manager().upload(ramp(10));  // the manager still works
  EXPECT_TRUE(manager().download(after) == ramp(10));
}

// A checkpoint folder under a regular file: the path cannot be looked at (ENOTDIR), and the
// save says so, naming the path, before anything is written.
TEST_P(FileFaults, ACheckpointBelowAFileIsAnErrorNamingThePath) {
  write_all(folder_ / "plain", "a file, not a folder");
  auto u = manager().upload(ramp(10));
  clbuf::Checkpoint checkpoint(manager(), folder_ / "plain/ckpt");
  checkpoint.add("u", u);
  const std::string message = clbuf_error_of([&] { checkpoint.save(); });
  EXPECT_TRUE(holds(
      message, {"Checkpoint::save", "cannot stat", folder_ / "plain/ckpt.tmp", "Not a directory"}));
  EXPECT_TRUE(read_all(folder_ / "plain") == "a file, not a folder");
}

// A full disk (a tmpfs of 256 KiB) fails every kind of save with the system's reason, and each
// leaves what was there: save_npy and its async form the old file, DeviceGroup::save_npy too,
// Checkpoint::save the previous checkpoint; none leaves a temporary file or folder.
TEST_P(FileFaults, AFullDiskFailsEverySaveAndLeavesWhatWasThere) {
  const std::string disk = folder_ / "disk";
  if (!folder_.mount_tmpfs(disk, "size=256k")) {
    GTEST_SKIP() << "cannot mount a small tmpfs here: " << std::strerror(errno);
  }
  const std::string path = disk + "/a.npy";
  manager().save_npy(path, manager().upload(ramp(100)));
  const std::string old_file = read_all(path);
  auto small = manager().upload(ramp(1000, 7.0f));
  clbuf::Checkpoint checkpoint(manager(), disk + "/ckpt");
  checkpoint.add("u", small);
  checkpoint.save();
  auto big = manager().upload(ramp(100000));  // 400 KB
  EXPECT_TRUE(holds(clbuf_error_of([&] { manager().save_npy(path, big); }),
                    {"save_npy", "No space left on device"}));
  clbuf::Future<void> saved = manager().save_npy_async(path, big);
  EXPECT_TRUE(
      holds(clbuf_error_of([&] { saved.get(); }), {"save_npy_async", "No space left on device"}));
  clbuf::Checkpoint too_big(manager(), disk + "/ckpt");
  too_big.add("u", big);
  EXPECT_TRUE(holds(clbuf_error_of([&] { too_big.save(); }),
                    {"Checkpoint::save", "No space left on device"}));
  EXPECT_EQ(folder_.entries(disk), (std::vector<std::string>{"a.npy", "ckpt"}));
  EXPECT_TRUE(read_all(path) == old_file);
  manager().fill(small, 0.0f);
  checkpoint.load();
  EXPECT_TRUE(manager().download(small) == ramp(1000, 7.0f));
}

// The same for a DeviceGroup's ShardedBuffer, written shard by shard into one file.
TEST(ShardedFileFaults, AFullDiskFailsAShardedSaveAndLeavesTheOldFile) {
  TempFolder folder;
  const std::string disk = folder / "disk";
  if (!folder.mount_tmpfs(disk, "size=128k")) {
    GTEST_SKIP() << "cannot mount a small tmpfs here: " << std::strerror(errno);
  }
  clbuf::DeviceGroup group("", clbuf_test::fault_options(MemoryModel::discrete));
  const std::string path = disk + "/whole.npy";
  write_all(path, "the old file");
  clbuf::ShardedBuffer<float> array =
      group.scatter(ramp(100000), clbuf::Partition().max_shard_bytes(64 << 10));
  EXPECT_TRUE(holds(clbuf_error_of([&] { clbuf::save_npy(group, path, array); }),
                    {"DeviceGroup::save_npy", "No space left on device"}));
  EXPECT_EQ(folder.entries(disk), std::vector<std::string>{"whole.npy"});
  EXPECT_TRUE(read_all(path) == "the old file");
}

// A save cut off earlier (a kill) can leave DIR.tmp behind; the next save removes it first. One
// that cannot be removed (here a file system mounted inside it: busy, or read-only) fails that
// save, naming what could not be removed, and the previous checkpoint stays whole.
TEST_P(FileFaults, ALeftoverTemporaryFolderThatCannotBeRemovedFailsTheSaveAndKeepsTheCheckpoint) {
  auto u = manager().upload(ramp(500, 1.0f));
  const std::string folder = folder_ / "ckpt";
  clbuf::Checkpoint checkpoint(manager(), folder);
  checkpoint.add("u", u);
  checkpoint.save();
  const std::string leftover = folder + ".tmp";
  ASSERT_EQ(::mkdir(leftover.c_str(), 0755), 0);
  if (!folder_.mount_tmpfs(leftover + "/busy", "size=64k")) {
    GTEST_SKIP() << "cannot mount a tmpfs here: " << std::strerror(errno);
  }
  manager().fill(u, 2.0f);
  EXPECT_TRUE(holds(clbuf_error_of([&] { checkpoint.save(); }),
                    {"Checkpoint::save", "cannot remove the folder", leftover + "/busy"}));
  // A read-only file system holding a file: the file cannot be removed.
  write_all(leftover + "/busy/stuck", "x");
  ASSERT_EQ(
      ::mount(nullptr, (leftover + "/busy").c_str(), nullptr, MS_REMOUNT | MS_RDONLY, "size=64k"),
      0)
      << std::strerror(errno);
  EXPECT_TRUE(holds(
      clbuf_error_of([&] { checkpoint.save(); }),
      {"Checkpoint::save", "cannot remove", leftover + "/busy/stuck", "Read-only file system"}));
  manager().fill(u, 0.0f);
  checkpoint.load();
  EXPECT_TRUE(manager().download(u) == ramp(500, 1.0f));
}

// ---------------------------------------------------------------------------------------------
// Manifests whose checksum holds (written so) but whose contents are wrong: each is refused,
// naming the manifest and what is wrong, and the buffers stay as they were.

TEST_P(FileFaults, AManifestWithARightChecksumAndWrongContentsIsRefused) {
  auto u = manager().upload(ramp(300, 5.0f));
  const std::string folder = folder_ / "ckpt";
  clbuf::Checkpoint checkpoint(manager(), folder);
  checkpoint.add("u", u);
  checkpoint.save();
  const std::string original = read_all(folder + "/manifest");
  manager().fill(u, -1.0f);
  const auto replace = [](const std::string& from, const std::string& to) {
    return [from, to](std::string& text) {
      const std::size_t at = text.find(from);
      ASSERT_NE(at, std::string::npos) << from << " in " << text;
      text.replace(at, from.size(), to);
    };
  };
  struct Case {
    std::function<void(std::string&)> edit;
    std::vector<std::string> says;
  };
  const std::vector<Case> cases = {
      {replace("clbuf-checkpoint 1", "clbuf-checkpoint 2"), {"not a clbuf checkpoint manifest"}},
      {replace("rank 0 of 1", "rank 0 by 1"), {"not a clbuf checkpoint manifest"}},
      {replace("array u", "table u"), {"a line of the manifest is not an array's"}},
      {replace(" 1 300\n", " 65 300\n"), {"a line of the manifest is not an array's"}},
      {replace(" 1 300\n", " 2 300\n"), {"an array's shape is cut short"}},
      {replace("rank 0 of 1", "rank 0 of 2"), {"written by rank 0 of 2, read by rank 0 of 1"}},
      {replace(" <f4 ", " <f4 1"), {folder + "/u.npy", "is not what the manifest says"}},
  };
  for (std::size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE("case " + std::to_string(i));
    write_all(folder + "/manifest", original);
    rewrite_manifest(folder, cases[i].edit);
    std::vector<std::string> says = cases[i].says;
    says.emplace_back("Checkpoint::load");
    EXPECT_TRUE(holds(clbuf_error_of([&] { checkpoint.load(); }), says));
  }
  EXPECT_TRUE(manager().download(u) == std::vector<float>(300, -1.0f));
  write_all(folder + "/manifest", original);
  checkpoint.load();
  EXPECT_TRUE(manager().download(u) == ramp(300, 5.0f));
}

// A manifest of a size no manifest has (here a sparse file of 1 TiB) is refused at once, naming
// it, before memory is taken for it: not an allocation of a terabyte, nor a read of one.
TEST_P(FileFaults, AManifestOfATerabyteIsRefusedBeforeItIsRead) {
  auto u = manager().upload(ramp(100, 5.0f));
  const std::string folder = folder_ / "ckpt";
  clbuf::Checkpoint checkpoint(manager(), folder);
  checkpoint.add("u", u);
  checkpoint.save();
  const std::string manifest = folder + "/manifest";
  ASSERT_EQ(::truncate(manifest.c_str(), off_t{1} << 40), 0) << std::strerror(errno);
  EXPECT_CLBUF_ERROR(checkpoint.load(), CL_INVALID_VALUE, "Checkpoint::load", manifest,
                     "1099511627776 bytes, more than a manifest may");
  EXPECT_TRUE(manager().download(u) == ramp(100, 5.0f));
}

// Out of host memory while a checkpoint's manifest is read (a child process whose address space
// is capped 64 MiB above what it uses, reading a manifest of 512 MiB): the load's error is
// CL_OUT_OF_HOST_MEMORY naming Checkpoint::load, never std::bad_alloc. The load fails before
// any OpenCL call, so the forked child needs no driver thread.
TEST_P(FileFaults, NoMemoryForTheManifestIsAnOutOfHostMemoryError) {
  if (clbuf_test::address_sanitizer || clbuf_test::thread_sanitizer) {
    GTEST_SKIP() << "caps the address space; the sanitizers' shadow memory does not fit it";
  }
  auto u = manager().upload(ramp(100, 5.0f));
  const std::string folder = folder_ / "ckpt";
  clbuf::Checkpoint checkpoint(manager(), folder);
  checkpoint.add("u", u);
  checkpoint.save();
  ASSERT_EQ(::truncate((folder + "/manifest").c_str(), off_t{512} << 20), 0);
  std::fflush(nullptr);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    int status = 0;
    long pages = 0;
    std::ifstream statm("/proc/self/statm");
    if (!(statm >> pages)) clbuf_test::exit_child(90);
    struct rlimit cap {};
    cap.rlim_cur = static_cast<rlim_t>(pages) * static_cast<rlim_t>(::sysconf(_SC_PAGESIZE)) +
                   (rlim_t{64} << 20);
    cap.rlim_max = RLIM_INFINITY;
    if (::setrlimit(RLIMIT_AS, &cap) != 0) clbuf_test::exit_child(91);
    try {
      checkpoint.load();
      status = 1;
    } catch (const clbuf::Error& error) {
      const std::string what = error.what();
      if (error.code() != CL_OUT_OF_HOST_MEMORY) status = 2;
      if (what.find("Checkpoint::load") == std::string::npos) status = 3;
    } catch (...) {
      status = 4;
    }
    cap.rlim_cur = RLIM_INFINITY;
    ::setrlimit(RLIMIT_AS, &cap);
    clbuf_test::exit_child(status);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the child was killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0)
      << "1: loaded; 2: another code; 3: not naming Checkpoint::load; 4: not a clbuf::Error";
  EXPECT_TRUE(manager().download(u) == ramp(100, 5.0f));
}

// ---------------------------------------------------------------------------------------------
// Several ranks, as clbuf::mpi::checkpoint_ranks() makes them: here one process whose all_ok
// says that another rank failed at a chosen step.

/// Ranks of one process playing rank `rank` of `size`, whose all_ok reports a failure elsewhere
/// at its `fail_at`th call (0: never); `calls` counts them.
clbuf::CheckpointRanks ranks_failing_at(int rank, int size, int fail_at,
                                        std::shared_ptr<int> calls) {
  clbuf::CheckpointRanks ranks;
  ranks.rank = rank;
  ranks.size = size;
  ranks.all_ok = [fail_at, calls](bool ok) { return ok && ++*calls != fail_at; };
  return ranks;
}

// Another rank failing at the save's first or second step (making the temporary folder, writing
// the files) fails the save on this rank too, saying so; rank 0 removes the temporary folder and
// the previous checkpoint stays. A load where another rank failed changes no buffer here.
TEST_P(FileFaults, AnotherRankFailingFailsTheCallHereAndLeavesTheCheckpointAsItWas) {
  auto u = manager().upload(ramp(700, 3.0f));
  const std::string folder = folder_ / "ckpt";
  auto calls = std::make_shared<int>(0);
  clbuf::Checkpoint first(manager(), folder, ranks_failing_at(0, 2, 0, calls));
  first.add("u", u);
  first.save();
  EXPECT_EQ(folder_.entries(folder), (std::vector<std::string>{"manifest.rank0", "u.rank0.npy"}));
  manager().fill(u, 4.0f);
  for (int step = 1; step <= 2; ++step) {
    SCOPED_TRACE("another rank fails at step " + std::to_string(step));
    *calls = 0;
    clbuf::Checkpoint failing(manager(), folder, ranks_failing_at(0, 2, step, calls));
    failing.add("u", u);
    EXPECT_TRUE(
        holds(clbuf_error_of([&] { failing.save(); }),
              {"Checkpoint::save", "another rank failed", "'" + folder + "' is as it was"}));
    EXPECT_EQ(folder_.entries(), std::vector<std::string>{"ckpt"});
  }
  *calls = 0;
  clbuf::Checkpoint loading(manager(), folder, ranks_failing_at(0, 2, 1, calls));
  loading.add("u", u);
  EXPECT_TRUE(
      holds(clbuf_error_of([&] { loading.load(); }), {"Checkpoint::load", "another rank failed"}));
  EXPECT_TRUE(manager().download(u) == std::vector<float>(700, 4.0f));
  first.load();  // the previous checkpoint, whole
  EXPECT_TRUE(manager().download(u) == ramp(700, 3.0f));
  // Read by another count of ranks: refused, naming both.
  clbuf::Checkpoint three(manager(), folder, ranks_failing_at(0, 3, 0, calls));
  three.add("u", u);
  EXPECT_TRUE(holds(clbuf_error_of([&] { three.load(); }),
                    {"manifest.rank0", "written by rank 0 of 2, read by rank 0 of 3"}));
}

// ---------------------------------------------------------------------------------------------
// The device failing mid-file (OpenCL calls failed by the fault hook).

// save_npy and save_npy_async: the error names the call; the old file is as it was and no
// temporary file is left. The manager works on.
TEST_P(FileFaults, ADeviceFailingMidSaveLeavesTheOldFileAndNoTemporaryFile) {
  const std::string path = folder_ / "a.npy";
  write_all(path, "the old file");
  auto buffer = manager().upload(ramp(10000));  // 40 KB: ten chunks of 4 KiB
  {
    Disarmed disarm;
    arm_file_transfer(GetParam(), true, GetParam() == MemoryModel::host ? 1 : 3);
    EXPECT_TRUE(holds(clbuf_error_of([&] { manager().save_npy(path, buffer); }), {"save_npy"}));
  }
  EXPECT_TRUE(read_all(path) == "the old file");
  EXPECT_EQ(folder_.entries(), std::vector<std::string>{"a.npy"});
  {
    Disarmed disarm;
    // Its second chunk's read; on the host model, whose job makes no OpenCL call but its
    // flushes, every flush (the call's error then, or its Future's).
    if (GetParam() == MemoryModel::host) {
      state().arm(clbuf_fault::Flush, 1, true);
    } else {
      arm_file_transfer(GetParam(), true, 2);
    }
    const std::string message = clbuf_error_of([&] {
      clbuf::Future<void> saved = manager().save_npy_async(path, buffer);
      saved.get();
    });
    EXPECT_TRUE(holds(message, {"save_npy_async"}));
  }
  EXPECT_TRUE(read_all(path) == "the old file");
  EXPECT_EQ(folder_.entries(), std::vector<std::string>{"a.npy"});
  manager().save_npy(path, buffer);
  EXPECT_TRUE(manager().download(manager().load_npy<float>(path)) == ramp(10000));
}

// A load whose device writes fail: the error names the call (a new buffer is then not made).
TEST_P(FileFaults, ADeviceFailingMidLoadIsTheLoadsError) {
  const std::string path = folder_ / "a.npy";
  manager().save_npy(path, manager().upload(ramp(10000)));
  auto target = manager().upload(std::vector<float>(10000, 9.0f));
  {
    Disarmed disarm;
    arm_file_transfer(GetParam(), false, GetParam() == MemoryModel::host ? 1 : 3);
    EXPECT_TRUE(holds(clbuf_error_of([&] { manager().load_npy(path, target); }), {"load_npy"}));
  }
  if (GetParam() != MemoryModel::host) {  // a new buffer's memory on the host model is fresh
    Disarmed disarm;
    arm_file_transfer(GetParam(), false, 2);
    EXPECT_TRUE(holds(clbuf_error_of([&] { static_cast<void>(manager().load_npy<float>(path)); }),
                      {"load_npy"}));
  }
  manager().load_npy(path, target);
  EXPECT_TRUE(manager().download(target) == ramp(10000));
}

// Every clFlush failing while an asynchronous file call starts: its job's own flush (which must
// bring the queue's marker it waits for to the device) fails too, and the call reports a
// clbuf::Error (at the call or at get()); the job has ended with it, and the next call works.
TEST_P(FileFaults, FailedFlushesAtAnAsyncFileCallAreItsErrorAndTheNextCallWorks) {
  const std::string path = folder_ / "a.npy";
  manager().save_npy(path, manager().upload(ramp(3000)));
  {
    Disarmed disarm;
    state().arm(clbuf_fault::Flush, 1, true);
    const std::string message = clbuf_error_of([&] {
      clbuf::Future<clbuf::DeviceBuffer<float>> loading = manager().load_npy_async<float>(path);
      static_cast<void>(loading.get());
    });
    EXPECT_TRUE(holds(message, {"load_npy_async", "clFlush"}));
  }
  clbuf::Future<clbuf::DeviceBuffer<float>> again = manager().load_npy_async<float>(path);
  EXPECT_TRUE(manager().download(again.get()) == ramp(3000));
}

// Checkpoint::save with the device failing while it reads the second array: the error names the
// call, no DIR.tmp is left, and the previous checkpoint loads whole.
TEST_P(FileFaults, ADeviceFailingMidCheckpointSaveKeepsThePreviousCheckpoint) {
  auto u = manager().upload(ramp(5000, 1.0f));
  auto v = manager().upload(ramp(5000, 2.0f));
  const std::string folder = folder_ / "ckpt";
  clbuf::Checkpoint checkpoint(manager(), folder);
  checkpoint.add("u", u).add("v", v);
  checkpoint.save();
  manager().fill(u, 10.0f);
  manager().fill(v, 20.0f);
  {
    Disarmed disarm;
    // The host model waits for the queue once per array; the others read 5 chunks an array.
    arm_file_transfer(GetParam(), true, GetParam() == MemoryModel::host ? 2 : 7);
    EXPECT_TRUE(holds(clbuf_error_of([&] { checkpoint.save(); }), {"Checkpoint::save"}));
  }
  EXPECT_EQ(folder_.entries(), std::vector<std::string>{"ckpt"});
  checkpoint.load();
  EXPECT_TRUE(manager().download(u) == ramp(5000, 1.0f));
  EXPECT_TRUE(manager().download(v) == ramp(5000, 2.0f));
}

// Checkpoint::load with the device failing (the new buffers' allocation, or the writes into
// them): the error names the call and no buffer given to add() changes.
TEST_P(FileFaults, ADeviceFailingMidCheckpointLoadChangesNoBuffer) {
  auto u = manager().upload(ramp(5000, 1.0f));
  auto v = manager().upload(ramp(5000, 2.0f));
  const std::string folder = folder_ / "ckpt";
  clbuf::Checkpoint checkpoint(manager(), folder);
  checkpoint.add("u", u).add("v", v);
  checkpoint.save();
  manager().fill(u, 10.0f);
  manager().fill(v, 20.0f);
  for (int kind = 0; kind < 2; ++kind) {
    SCOPED_TRACE(kind == 0 ? "clCreateBuffer" : "the writes");
    Disarmed disarm;
    if (kind == 0) {
      state().arm(clbuf_fault::CreateBuffer, 1, true);  // the new buffers' (and the retry)
    } else if (GetParam() != MemoryModel::host) {
      arm_file_transfer(GetParam(), false, 7);
    } else {
      continue;  // a fresh buffer of the host model is written without an OpenCL call
    }
    EXPECT_TRUE(holds(clbuf_error_of([&] { checkpoint.load(); }), {"Checkpoint::load"}));
    state().disarm();
    EXPECT_TRUE(manager().download(u) == std::vector<float>(5000, 10.0f));
    EXPECT_TRUE(manager().download(v) == std::vector<float>(5000, 20.0f));
  }
  checkpoint.load();
  EXPECT_TRUE(manager().download(u) == ramp(5000, 1.0f));
  EXPECT_TRUE(manager().download(v) == ramp(5000, 2.0f));
}

}  // namespace
