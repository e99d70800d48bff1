// SPDX-License-Identifier: MIT
// native() of views in kernels (issue 38). The OpenCL conformance suite's overlapping sub-buffer
// test (test_sub_buffers_overlapping) through clbuf: 16 overlapping views of one buffer at
// offsets and sizes that are multiples of CL_DEVICE_MEM_BASE_ADDR_ALIGN, each passed to a kernel
// by native(), checked, then destroyed; repeated, and from several threads; under the driver's
// own rule and under each rule forced (CLBUF_SUB_BUFFER_RULE). On NVIDIA's driver this pattern
// crashed in clReleaseMemObject while each view released its sub-buffer with itself. Then each
// rule's release order, observed through OpenCL's destructor callbacks on any driver, and
// set_view_args(), which passes a view to a kernel with no sub-buffer.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "support/device_test.hpp"

namespace {

using clbuf_test::code_text;
using clbuf_test::same_bytes;
using clbuf_test::ScopedEnv;

constexpr std::size_t kRootElements = std::size_t{1} << 16;  // 256 KiB of uint32
constexpr int kViews = 16;

const char* const kKernels =
    "__kernel void copy(__global const uint* in, __global uint* out) {"
    " size_t i = get_global_id(0); out[i] = in[i]; }"
    "__kernel void copy_at(__global const uint* in, ulong offset, __global uint* out) {"
    " size_t i = get_global_id(0); out[i] = in[offset + i]; }"
    "__kernel void copy_at_uint(__global const uint* in, uint offset, __global uint* out) {"
    " size_t i = get_global_id(0); out[i] = in[offset + i]; }";

/// A DeviceTest whose manager is made under CLBUF_SUB_BUFFER_RULE=`rule` ("": the driver's own
/// rule; nullptr: the environment's setting, so that a run can force another rule), with the
/// kernels above built for its context.
class KernelTest : public clbuf_test::DeviceTest {
 protected:
  void set_up(const char* rule) {
    const char* given = std::getenv("CLBUF_SUB_BUFFER_RULE");
    rule_ = rule != nullptr ? rule : given != nullptr ? given : "";
    {
      const ScopedEnv env("CLBUF_SUB_BUFFER_RULE", rule_.c_str());
      clbuf_test::DeviceTest::SetUp();
      if (IsSkipped() || HasFatalFailure()) return;
      effective_ = clbuf::detail::sub_buffer_rule(manager().device().platform);
    }
    align_ = cl_device().getInfo<CL_DEVICE_MEM_BASE_ADDR_ALIGN>() / 8 / sizeof(std::uint32_t);
    program_ = cl::Program(manager().context(), kKernels);
    program_.build();
  }

  /// Runs `kernel` over `count` work items and returns `out`'s first `count` elements.
  std::vector<std::uint32_t> run(const cl::Kernel& kernel, clbuf::DeviceBuffer<std::uint32_t>& out,
                                 std::size_t count) {
    cl::CommandQueue queue = manager().queue();
    EXPECT_EQ(queue.enqueueNDRangeKernel(kernel, cl::NullRange, cl::NDRange(count)), CL_SUCCESS);
    std::vector<std::uint32_t> got(count);
    manager().download(out, got.data(), count);
    return got;
  }

  std::string rule_;  // CLBUF_SUB_BUFFER_RULE as the manager was made
  clbuf::detail::SubBufferRule effective_ = clbuf::detail::SubBufferRule::with_view;  // its rule
  std::size_t align_ = 1;  // CL_DEVICE_MEM_BASE_ADDR_ALIGN in elements
  cl::Program program_;
};

/// The conformance pattern under each rule: the driver's own (or the environment's), `ordered`
/// and `refuse` forced.
class ConformancePattern : public KernelTest, public ::testing::WithParamInterface<const char*> {
 protected:
  void SetUp() override {
    set_up(GetParam());
    if (!IsSkipped() && !HasFatalFailure() &&
        manager().device().platform.find("NVIDIA") != std::string::npos &&
        effective_ != clbuf::detail::SubBufferRule::refuse) {
      GTEST_SKIP() << "forced here, this rule crashes NVIDIA's driver (the crash clbuf refuses "
                      "to reach: bench/results/h100/2026-12-06-issue38/)";
    }
  }

  /// One round of test_sub_buffers_overlapping: kViews views of `root` (whose contents are
  /// `shadow`) at random offsets and sizes, multiples of the base alignment, each passed to a
  /// kernel by native() while all are alive (where the `refuse` rule refuses one, with a clear
  /// error, by set_view_args instead), its bytes checked; then all destroyed, in creation order
  /// (round 0), reverse order (1) or a random order (2). Returns how many were refused.
  int round(clbuf::DeviceBuffer<std::uint32_t>& root, const std::vector<std::uint32_t>& shadow,
            std::mt19937& rng, int round) {
    const auto between = [&](std::size_t low, std::size_t high) {
      return std::uniform_int_distribution<std::size_t>(low, high)(rng);
    };
    cl::Kernel copy(program_, "copy");
    cl::Kernel copy_at(program_, "copy_at");
    clbuf::DeviceBuffer<std::uint32_t> out = manager().allocate<std::uint32_t>(kRootElements);
    std::vector<clbuf::DeviceBuffer<std::uint32_t>> views;
    int refused = 0;
    for (int i = 0; i < kViews; ++i) {
      const std::size_t offset = between(0, kRootElements / align_ - 1) * align_;
      const std::size_t count = between(1, (kRootElements - offset) / align_) * align_;
      views.push_back(manager().view(root, offset, count));
      const bool by_native = pass(views.back(), copy, copy_at, out);
      refused += by_native ? 0 : 1;
      const std::vector<std::uint32_t> got = run(by_native ? copy : copy_at, out, count);
      EXPECT_TRUE(same_bytes(shadow.data() + offset, got.data(), count * sizeof(std::uint32_t)))
          << "view " << i << " at element " << offset << ", " << count << " elements";
    }
    std::vector<std::size_t> order(views.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    if (round % 3 == 1) std::reverse(order.begin(), order.end());
    if (round % 3 == 2) std::shuffle(order.begin(), order.end(), rng);
    for (std::size_t i : order) views[i] = clbuf::DeviceBuffer<std::uint32_t>();
    return refused;
  }

  /// Sets `view` and `out` as the arguments of `copy` by native(); where that is refused (the
  /// `refuse` rule only), checks the error and sets those of `copy_at` by set_view_args().
  /// Returns false when native() was refused.
  bool pass(const clbuf::DeviceBuffer<std::uint32_t>& view, cl::Kernel& copy, cl::Kernel& copy_at,
            const clbuf::DeviceBuffer<std::uint32_t>& out) {
    try {
      copy.setArg(0, view.native());
      copy.setArg(1, out.native());
      return true;
    } catch (const clbuf::Error& error) {
      EXPECT_EQ(effective_, clbuf::detail::SubBufferRule::refuse)
          << "only the refuse rule (forced, or NVIDIA's own) refuses: " << error.what();
      EXPECT_EQ(error.code(), CL_INVALID_OPERATION) << error.what();
      EXPECT_TRUE(clbuf_test::has_fragments(
          error.what(), {"native: " + code_text(CL_INVALID_OPERATION), "overlap another view's",
                         "NVIDIA's driver crashes", "clbuf::set_view_args"}));
    }
    clbuf::set_view_args(copy_at, 0, view);
    copy_at.setArg(2, out.native());
    return false;
  }

  /// `rounds` rounds on a root of random contents, which must be unchanged after.
  void rounds(clbuf::DeviceBuffer<std::uint32_t>& root, const std::vector<std::uint32_t>& shadow,
              std::uint32_t seed, int rounds) {
    std::mt19937 rng(seed);
    for (int i = 0; i < rounds; ++i) {
      SCOPED_TRACE("round " + std::to_string(i));
      round(root, shadow, rng, i);
    }
    EXPECT_TRUE(same_bytes(shadow, manager().download(root)));
  }
};

TEST_P(ConformancePattern, RunsRepeatedly) {
  const std::vector<std::uint32_t> shadow = random<std::uint32_t>(kRootElements);
  clbuf::DeviceBuffer<std::uint32_t> root = manager().upload(shadow);
  rounds(root, shadow, seed_, 12);
}

// Four threads, each on a root of its own, on one manager.
TEST_P(ConformancePattern, RunsFromFourThreads) {
  std::vector<std::thread> threads;
  for (std::uint32_t t = 0; t < 4; ++t) {
    threads.emplace_back([this, t] {
      std::mt19937 rng(seed_ + t);
      const auto shadow = clbuf_test::random_values<std::uint32_t>(rng, kRootElements);
      clbuf::DeviceBuffer<std::uint32_t> root = manager().upload(shadow);
      rounds(root, shadow, seed_ + 100 + t, 6);
    });
  }
  for (std::thread& thread : threads) thread.join();
}

// Four threads, each making its own 16 views of one shared root: every view overlaps views of
// the other threads too.
TEST_P(ConformancePattern, OnOneSharedRootRunsFromFourThreads) {
  const std::vector<std::uint32_t> shadow = random<std::uint32_t>(kRootElements);
  clbuf::DeviceBuffer<std::uint32_t> root = manager().upload(shadow);
  std::vector<std::thread> threads;
  for (std::uint32_t t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] { rounds(root, shadow, seed_ + t, 6); });
  }
  for (std::thread& thread : threads) thread.join();
}

/// "DriversOwn" for nullptr (CLBUF_SUB_BUFFER_RULE as the run sets it: normally unset), else the
/// rule forced.
std::string rule_name(const ::testing::TestParamInfo<const char*>& rule) {
  return rule.param == nullptr ? std::string("DriversOwn") : std::string(rule.param);
}

INSTANTIATE_TEST_SUITE_P(Rules, ConformancePattern, ::testing::Values(nullptr, "ordered", "refuse"),
                         rule_name);

/// The order in which OpenCL destroys the memory objects it watches (destructor callbacks, which
/// run when the last reference is gone). Outlives every object it watches.
class Destructions {
 public:
  void watch(const cl::Buffer& buffer, char name) {
    std::lock_guard<std::mutex> lock(mutex_);
    names_.push_back(Name{this, name});
    ASSERT_EQ(clSetMemObjectDestructorCallback(buffer(), &destroyed, &names_.back()), CL_SUCCESS);
  }
  /// The names of the objects destroyed so far, in order.
  std::string seen() {
    std::lock_guard<std::mutex> lock(mutex_);
    return seen_;
  }

 private:
  struct Name {
    Destructions* owner;
    char name;
  };
  static void CL_CALLBACK destroyed(cl_mem, void* data) {
    const Name& name = *static_cast<Name*>(data);
    std::lock_guard<std::mutex> lock(name.owner->mutex_);
    name.owner->seen_ += name.name;
  }
  std::mutex mutex_;
  std::deque<Name> names_;  // stable addresses for the callbacks
  std::string seen_;
};

/// Views of one root whose sub-buffers (native()) are watched, under a rule forced by the
/// derived fixture.
class SubBufferOrder : public KernelTest {
 protected:
  void TearDown() override {
    views_.clear();
    KernelTest::TearDown();
  }
  /// View `name` of the root (made on first use) at element `offset`, `count` elements, in
  /// alignment steps, with its native() sub-buffer made and watched.
  void add(char name, std::size_t offset, std::size_t count) {
    if (!root_.valid()) root_ = manager().upload(random<std::uint32_t>(8 * align_));
    views_.push_back(manager().view(root_, offset * align_, count * align_));
    const cl::Buffer& sub_buffer = views_.back().native();
    if (!late_callbacks()) watched_.watch(sub_buffer, name);
  }
  /// NVIDIA's driver runs destructor callbacks late, not when the last reference goes (seen on
  /// the H100: none had run when the test looked, and one ran after the fixture was gone), so
  /// there sub-buffers are not watched and the release order is proven on PoCL.
  bool late_callbacks() { return manager().device().platform.find("NVIDIA") != std::string::npos; }
  /// set_up(rule), then a skip where destructor callbacks run late.
  void set_up_watched(const char* rule) {
    set_up(rule);
    if (!IsSkipped() && !HasFatalFailure() && late_callbacks()) {
      GTEST_SKIP() << "this driver runs destructor callbacks late: the order is proven on PoCL";
    }
  }
  /// Destroys view `i` (in the order added).
  void destroy(std::size_t i) { views_.at(i) = clbuf::DeviceBuffer<std::uint32_t>(); }
  /// Views a [0, 4), b [1, 5) and c [2, 6) in alignment steps (each overlaps the others), their
  /// sub-buffers made but not used, destroyed a, c, b: the order their sub-buffers went in.
  std::string three_overlapping_destroyed_a_c_b() {
    add('a', 0, 4);
    add('b', 1, 4);
    add('c', 2, 4);
    destroy(0);
    destroy(2);
    destroy(1);
    return watched_.seen();
  }

  Destructions watched_;
  clbuf::DeviceBuffer<std::uint32_t> root_;
  std::vector<clbuf::DeviceBuffer<std::uint32_t>> views_;
};

class OrderedSubBuffers : public SubBufferOrder {
 protected:
  void SetUp() override { set_up_watched("ordered"); }
};

// NVIDIA's rule: a sub-buffer whose view is gone waits for every newer one that overlaps it, so
// overlapping sub-buffers go newest first whatever order their views are destroyed in.
TEST_F(OrderedSubBuffers, OverlappingSubBuffersAreReleasedNewestFirst) {
  add('a', 0, 4);  // a [0, 4) b [1, 5) c [2, 6), in alignment steps: each overlaps the others
  add('b', 1, 4);
  add('c', 2, 4);
  destroy(0);
  EXPECT_EQ(watched_.seen(), "") << "a waits for b and c";
  destroy(2);
  EXPECT_EQ(watched_.seen(), "c");
  destroy(1);
  EXPECT_EQ(watched_.seen(), "cba");
}

// Only overlap orders: a sub-buffer that no newer one overlaps goes with its view.
TEST_F(OrderedSubBuffers, ASubBufferNoNewerOneOverlapsGoesWithItsView) {
  add('a', 0, 2);  // a [0, 2) b [2, 4) c [1, 3): c overlaps both, a and b are disjoint
  add('b', 2, 2);
  destroy(1);
  EXPECT_EQ(watched_.seen(), "b") << "a is older and disjoint";
  add('c', 1, 2);
  destroy(0);
  EXPECT_EQ(watched_.seen(), "b") << "a waits for c";
  destroy(2);
  EXPECT_EQ(watched_.seen(), "bca");
}

// A copy of the handle kept past the view holds the sub-buffer; clbuf's reference goes in order.
TEST_F(OrderedSubBuffers, AHandleKeptPastItsViewIsReleasedByItsHolder) {
  add('a', 0, 4);
  cl::Buffer kept = views_[0].native();
  destroy(0);
  EXPECT_EQ(watched_.seen(), "");
  kept = cl::Buffer();
  EXPECT_EQ(watched_.seen(), "a");
}

// A view of an adopted sub-buffer: native() is a sub-buffer of the parent, and the adopted one,
// older, is kept until that sub-buffer is released, even when the application and the adopted
// DeviceBuffer let it go first.
TEST_F(OrderedSubBuffers, AnAdoptedSubBufferOutlivesTheSubBuffersOfItsViews) {
  const std::size_t bytes = 4 * align_ * sizeof(std::uint32_t);
  cl::Buffer parent(manager().context(), CL_MEM_READ_WRITE, 2 * bytes);
  const cl_buffer_region region{bytes / 4, bytes};
  cl::Buffer sub = parent.createSubBuffer(CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION, &region);
  watched_.watch(sub, 's');
  auto adopted = std::make_unique<clbuf::DeviceBuffer<std::uint32_t>>(
      manager().adopt<std::uint32_t>(sub, 4 * align_));
  views_.push_back(manager().view(*adopted, align_, 2 * align_));
  watched_.watch(views_[0].native(), 'v');
  sub = cl::Buffer();
  adopted.reset();
  EXPECT_EQ(watched_.seen(), "");
  destroy(0);
  EXPECT_EQ(watched_.seen(), "vs");
}

class SubBuffersWithTheirViews : public SubBufferOrder {
 protected:
  void SetUp() override { set_up_watched("with_view"); }
};

// Every other driver's rule, as before issue 38: each sub-buffer goes with its view. (Made and
// released without use, which NVIDIA's driver survives too.)
TEST_F(SubBuffersWithTheirViews, EachSubBufferIsReleasedWithItsView) {
  EXPECT_EQ(three_overlapping_destroyed_a_c_b(), "acb");
}

class RefusedSubBuffers : public SubBufferOrder {
 protected:
  void SetUp() override { set_up_watched("refuse"); }
};

// The refuse rule: native() of a view is an error while an overlapping view's sub-buffer is
// alive, before OpenCL is called; disjoint views and views after the overlapping one is gone
// get theirs.
TEST_F(RefusedSubBuffers, NativeOfAnOverlappingViewIsAClearError) {
  add('a', 0, 2);
  add('b', 2, 2);
  clbuf::DeviceBuffer<std::uint32_t> c = manager().view(root_, align_, 2 * align_);
  const std::size_t unit = align_ * sizeof(std::uint32_t);  // bytes per alignment step
  EXPECT_CLBUF_ERROR(c.native(), CL_INVALID_OPERATION, "native: " + code_text(CL_INVALID_OPERATION),
                     "the view's bytes [" + std::to_string(unit) + ", ",
                     "overlap another view's sub-buffer [0, ", "NVIDIA's driver crashes",
                     "native_root()", "clbuf::set_view_args");
  destroy(0);
  EXPECT_CLBUF_ERROR(c.native(), CL_INVALID_OPERATION,
                     "sub-buffer [" + std::to_string(2 * unit));  // b is alive
  destroy(1);
  ASSERT_NE(c.native()(), nullptr);
  EXPECT_EQ(watched_.seen(), "ab");
}

// The driver's own rule, as the GPU run confirms: on NVIDIA's platform native() of a view that
// overlaps a live sub-buffer is refused (an error, not the driver's crash); elsewhere each
// sub-buffer is released with its view.
class DriversOwnSubBufferRule : public SubBufferOrder {
 protected:
  void SetUp() override { set_up(""); }
};

TEST_F(DriversOwnSubBufferRule, RefusesOverlapOnNvidiaAndReleasesWithTheViewElsewhere) {
  if (manager().device().platform.find("NVIDIA") == std::string::npos) {
    EXPECT_EQ(three_overlapping_destroyed_a_c_b(), "acb") << manager().device().platform;
    return;
  }
  add('a', 0, 4);
  EXPECT_CLBUF_ERROR(add('b', 1, 4), CL_INVALID_OPERATION, "NVIDIA's driver crashes");
  destroy(0);
  EXPECT_NO_THROW(add('c', 2, 4)) << "a's sub-buffer went with a: c overlaps nothing alive";
  EXPECT_CLBUF_ERROR(views_.at(1).native(), CL_INVALID_OPERATION, "overlap another view's");
}

// The rule by platform name, and CLBUF_SUB_BUFFER_RULE over it.
TEST(SubBufferRule, IsRefuseOnNvidiasPlatformUnlessTheEnvironmentSaysOtherwise) {
  using clbuf::detail::sub_buffer_rule;
  using clbuf::detail::SubBufferRule;
  {
    const ScopedEnv unset("CLBUF_SUB_BUFFER_RULE", nullptr);
    EXPECT_EQ(sub_buffer_rule("NVIDIA CUDA"), SubBufferRule::refuse);
    EXPECT_EQ(sub_buffer_rule("Portable Computing Language"), SubBufferRule::with_view);
    EXPECT_EQ(sub_buffer_rule("Oclgrind"), SubBufferRule::with_view);
  }
  const ScopedEnv bogus("CLBUF_SUB_BUFFER_RULE", "sideways");
  EXPECT_EQ(sub_buffer_rule("NVIDIA CUDA"), SubBufferRule::refuse) << "unknown values: ignored";
  const ScopedEnv ordered("CLBUF_SUB_BUFFER_RULE", "ordered");
  EXPECT_EQ(sub_buffer_rule("Portable Computing Language"), SubBufferRule::ordered);
  const ScopedEnv refuse("CLBUF_SUB_BUFFER_RULE", "refuse");
  EXPECT_EQ(sub_buffer_rule("NVIDIA CUDA"), SubBufferRule::refuse);
  const ScopedEnv with_view("CLBUF_SUB_BUFFER_RULE", "with_view");
  EXPECT_EQ(sub_buffer_rule("NVIDIA CUDA"), SubBufferRule::with_view);
}

class SetViewArgs : public KernelTest {
 protected:
  void SetUp() override { set_up(""); }
};

// One line passes a view at any element offset, aligned or not, a view of a view, or a whole
// buffer to a kernel taking `__global uint* in, ulong offset`; no sub-buffer is made.
TEST_F(SetViewArgs, PassesAViewAtAnyOffsetToAKernel) {
  const std::vector<std::uint32_t> data = random<std::uint32_t>(4 * align_ + 7);
  clbuf::DeviceBuffer<std::uint32_t> root = manager().upload(data);
  clbuf::DeviceBuffer<std::uint32_t> out = manager().allocate<std::uint32_t>(data.size());
  cl::Kernel copy_at(program_, "copy_at");
  copy_at.setArg(2, out.native());
  for (const std::size_t offset : {std::size_t{0}, std::size_t{1}, std::size_t{3}, align_ + 5}) {
    clbuf::DeviceBuffer<std::uint32_t> view = manager().view(root, offset, 2 * align_);
    clbuf::set_view_args(copy_at, 0, view);
    const std::vector<std::uint32_t> got = run(copy_at, out, view.size());
    EXPECT_TRUE(same_bytes(data.data() + offset, got.data(), view.size_bytes())) << offset;
    clbuf::DeviceBuffer<std::uint32_t> inner = manager().view(view, 2, 5);
    clbuf::set_view_args(copy_at, 0, inner);
    EXPECT_TRUE(same_bytes(data.data() + offset + 2, run(copy_at, out, 5).data(), 5 * 4));
  }
  clbuf::set_view_args(copy_at, 0, root);
  EXPECT_TRUE(same_bytes(data, run(copy_at, out, data.size())));
}

TEST_F(SetViewArgs, WrongBuffersAndArgumentsAreClearErrors) {
  clbuf::DeviceBuffer<std::uint32_t> root = manager().upload(random<std::uint32_t>(64));
  clbuf::DeviceBuffer<std::uint32_t> view = manager().view(root, 3, 10);
  cl::Kernel copy_at(program_, "copy_at");
  clbuf::DeviceBuffer<std::uint32_t> gone = std::move(view);
  EXPECT_CLBUF_ERROR(clbuf::set_view_args(copy_at, 0, view), CL_INVALID_MEM_OBJECT,  // NOLINT
                     "set_view_args: " + code_text(CL_INVALID_MEM_OBJECT), "moved from");
  EXPECT_CLBUF_ERROR(clbuf::set_view_args(copy_at, 2, gone), CL_INVALID_ARG_INDEX,
                     "set_view_args: " + code_text(CL_INVALID_ARG_INDEX),
                     "argument 3 (the element offset, a ulong, 8 bytes) of the kernel");
  cl::Kernel narrow(program_, "copy_at_uint");
  EXPECT_CLBUF_ERROR(clbuf::set_view_args(narrow, 0, gone), CL_INVALID_ARG_SIZE,
                     "set_view_args: " + code_text(CL_INVALID_ARG_SIZE), "argument 1 (");
  clbuf::DeviceBuffer<std::uint32_t> empty = manager().view(root, 64, 0);
  clbuf::set_view_args(copy_at, 0, empty);  // a null buffer, offset 0: valid OpenCL
}

}  // namespace
