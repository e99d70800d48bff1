// SPDX-License-Identifier: MIT
// Tracing (CLBUF_TRACE, Options::trace_path; detail/trace.hpp): the file is read back as JSON and
// its events counted. Blocking calls are one API span each with their bytes and path; a staged
// upload shows its chunks' host copies and DMAs interleaved; a started upload's span covers the
// time its queue was held; bad paths are a clbuf::Error; four threads trace one manager; the file
// is whole after cleanup(), destruction and an uncaught exception; tracing off writes nothing.
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "support/child_exit.hpp"
#include "support/device_test.hpp"
#include "support/json.hpp"

namespace {

using clbuf_test::Json;
using clbuf_test::JsonReader;

// Names go into the file as JSON strings: quotes, backslashes and control characters escaped,
// everything else as it is (a device's name could hold any of them).
TEST(TraceJson, StringsAreEscaped) {
  std::string out;
  clbuf::detail::append_json_string(out, "a\"b\\c\n\x01 d\xc3\xa9");
  EXPECT_EQ(out, "a\\\"b\\\\c\\u000a\\u0001 d\xc3\xa9");
  const Json parsed = JsonReader::parse("\"" + out + "\"");
  EXPECT_EQ(parsed.text, "a\"b\\c\n\x01 d\xc3\xa9");
}

/// True when `text` is well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates, nothing
/// past U+10FFFF), as a strict JSON reader (Python's json) requires of a file.
bool valid_utf8(const std::string& text) {
  std::size_t at = 0;
  while (at < text.size()) {
    const unsigned char lead = static_cast<unsigned char>(text[at]);
    std::size_t length = 0;
    unsigned low = 0x80, high = 0xbf;  // the range of the second byte
    if (lead < 0x80) {
      ++at;
      continue;
    } else if (lead >= 0xc2 && lead <= 0xdf) {
      length = 2;
    } else if (lead >= 0xe0 && lead <= 0xef) {
      length = 3;
      if (lead == 0xe0) low = 0xa0;
      if (lead == 0xed) high = 0x9f;
    } else if (lead >= 0xf0 && lead <= 0xf4) {
      length = 4;
      if (lead == 0xf0) low = 0x90;
      if (lead == 0xf4) high = 0x8f;
    } else {
      return false;
    }
    if (at + length > text.size()) return false;
    for (std::size_t k = 1; k < length; ++k) {
      const unsigned char next = static_cast<unsigned char>(text[at + k]);
      if (k == 1 ? (next < low || next > high) : (next < 0x80 || next > 0xbf)) return false;
    }
    at += length;
  }
  return true;
}

/// `text` as append_json_string() writes it, read back by the strict reader.
std::string json_round_trip(const std::string& text) {
  std::string out;
  clbuf::detail::append_json_string(out, text.data(), text.size());
  EXPECT_TRUE(valid_utf8(out)) << "not UTF-8 for input of " << text.size() << " bytes";
  return JsonReader::parse("\"" + out + "\"").text;
}

const std::string replacement = "\xef\xbf\xbd";  // U+FFFD

// Every byte value alone: ASCII as it is (control characters, DEL, quotes and backslashes
// escaped), every byte that cannot start a character (0x80-0xff alone) U+FFFD; the output is
// always well-formed UTF-8 inside a valid JSON string, NUL included.
TEST(TraceJson, EveryByteAloneIsValidJson) {
  for (int byte = 0; byte < 256; ++byte) {
    const std::string one(1, static_cast<char>(byte));
    const std::string back = json_round_trip(one);
    EXPECT_EQ(back, byte < 0x80 ? one : replacement) << "byte " << byte;
  }
  std::string out;
  clbuf::detail::append_json_string(out, "\x7f\x1f");
  EXPECT_EQ(out, "\\u007f\\u001f");
}

// Every pair of bytes and well-known ill-formed sequences: valid UTF-8 stays as it is, each
// maximal ill-formed part becomes one U+FFFD (the Unicode standard's practice, as browsers
// decode), never a byte of it raw.
TEST(TraceJson, IllFormedUtf8BecomesReplacementCharacters) {
  for (int first = 0; first < 256; ++first) {
    for (int second = 0; second < 256; ++second) {
      const std::string pair = {static_cast<char>(first), static_cast<char>(second)};
      const std::string back = json_round_trip(pair);
      if (valid_utf8(pair)) {
        EXPECT_EQ(back, pair) << first << " " << second;
      }
    }
  }
  const std::string r = replacement;
  const std::pair<std::string, std::string> cases[] = {
      {"caf\xe9", "caf" + r},          // Latin-1
      {"caf\xc3\xa9", "caf\xc3\xa9"},  // UTF-8 kept
      {"\xe2\x82\xac \xf0\x9f\x98\x80", "\xe2\x82\xac \xf0\x9f\x98\x80"},
      {"\x80", r},                          // a lone continuation byte
      {"\xbf\x80", r + r},                  // two
      {"\xc0\xaf", r + r},                  // overlong '/'
      {"\xe0\x80\xaf", r + r + r},          // overlong, three bytes
      {"\xf0\x80\x80\xaf", r + r + r + r},  // overlong, four bytes
      {"\xed\xa0\x80", r + r + r},          // a surrogate (U+D800)
      {"\xed\xbf\xbf", r + r + r},          // a surrogate (U+DFFF)
      {"\xf4\x90\x80\x80", r + r + r + r},  // past U+10FFFF
      {"\xf5\x80", r + r},                  // never a lead byte
      {"\xe2\x82", r},                      // cut short
      {"\xe2\x82x", r + "x"},               // cut short by ASCII
      {"\xf0\x9f\x98", r},                  // cut short, four bytes
      {"a\xff\"b\\", "a" + r + "\"b\\"},
  };
  for (const auto& c : cases) EXPECT_EQ(json_round_trip(c.first), c.second) << c.first;
  // Random byte strings: always valid.
  std::uint32_t state = 12345;
  for (int n = 0; n < 2000; ++n) {
    std::string text(static_cast<std::size_t>(n % 17), '\0');
    for (char& c : text) {
      state = state * 1664525u + 1013904223u;
      c = static_cast<char>(state >> 24);
    }
    json_round_trip(text);
  }
}

// A null name (and a null text) is an empty string, never a crash.
TEST(TraceJson, ANullNameIsEmpty) {
  std::string out;
  clbuf::detail::append_json_string(out, nullptr);
  EXPECT_EQ(out, "");
  clbuf::detail::TraceEvent event;
  event.name = nullptr;
  clbuf::detail::append_trace_event(out, event);
  EXPECT_NE(out.find("\"name\":\"\""), std::string::npos) << out;
}

// Numbers that are not whole (a ratio an argument carries) keep 17 significant digits, and a
// time not from the trace's clock (negative, or past 9e15 us) is written as such a number: both
// valid JSON that reads back as the value.
TEST(TraceJson, FractionsAndTimesOffTheClockAreWrittenAsTheyAre) {
  clbuf::detail::TraceEvent event;
  event.name = "n";
  event.begin = -2.5;
  event.end = 1e16;
  event.args[0] = {"ratio", nullptr, 0.1};
  event.args[1] = {"huge", nullptr, 1e300};
  std::string out;
  clbuf::detail::append_trace_event(out, event);
  out.erase(out.size() - 2);  // the ",\n" after the record
  const Json record = JsonReader::parse(out);
  EXPECT_EQ(record.number_of("ts"), -2.5) << out;
  EXPECT_EQ(record.number_of("dur"), 1e16 + 2.5) << out;
  const Json* args = record.find("args");
  ASSERT_NE(args, nullptr) << out;
  EXPECT_EQ(args->number_of("ratio"), 0.1) << out;
  EXPECT_EQ(args->number_of("huge"), 1e300) << out;
}

/// A fresh folder (mkdtemp, in TMPDIR or /tmp) for the test's trace files, removed with what it
/// holds.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");  // TMPDIR=/dev/shm: the tests on tmpfs
    std::string name =
        std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/clbuf_trace_XXXXXX";
    if (::mkdtemp(name.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = name;
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  bool empty() const { return std::filesystem::is_empty(path_); }

 private:
  std::string path_;
};

/// A trace file read back: its events, and the names of its processes and tracks.
struct Trace {
  std::vector<Json> events;
  std::map<int, std::string> processes;  // pid -> process_name
  std::map<int, std::string> tracks;     // tid -> thread_name

  /// Reads `path`, in the object form {"traceEvents": [...]} or the array form.
  static Trace read(const std::string& path) {
    const Json root = JsonReader::parse_file(path);
    const Json* list = root.kind == Json::array ? &root : root.find("traceEvents");
    if (list == nullptr || list->kind != Json::array) throw std::runtime_error("no traceEvents");
    Trace trace;
    for (const Json& event : list->items) {
      if (event.text_of("ph") == "M") {
        const Json* args = event.find("args");
        const std::string name = args != nullptr ? args->text_of("name") : "";
        auto& names = event.text_of("name") == "process_name" ? trace.processes : trace.tracks;
        names[static_cast<int>(
            event.number_of(event.text_of("name") == "process_name" ? "pid" : "tid"))] = name;
      }
      trace.events.push_back(event);
    }
    return trace;
  }

  /// The events of phase `ph` named `name`.
  std::vector<const Json*> named(const std::string& ph, const std::string& name) const {
    std::vector<const Json*> found;
    for (const Json& event : events) {
      if (event.text_of("ph") == ph && event.text_of("name") == name) found.push_back(&event);
    }
    return found;
  }
};

/// An argument of an event (its "args" member), as a number or text.
double arg_number(const Json& event, const std::string& key) {
  const Json* args = event.find("args");
  return args != nullptr ? args->number_of(key) : -1;
}
std::string arg_text(const Json& event, const std::string& key) {
  const Json* args = event.find("args");
  return args != nullptr ? args->text_of(key) : std::string();
}

/// Now on the trace's clock (steady_clock, microseconds).
double now_us() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

class TraceTest : public clbuf_test::DeviceTest {
 protected:
  /// Options of a manager forced onto the discrete paths, tracing to `path`.
  static clbuf::Options discrete(const std::string& path) {
    clbuf::Options options;
    options.memory = clbuf::MemoryModel::discrete;
    options.trace_path = path;
    return options;
  }

  TempDir dir_;
};

// (a) A blocking upload and download on the discrete paths: one API span each, on an "API calls"
// track of the manager's process, with their bytes, direction and the path stats() counts.
TEST_F(TraceTest, BlockingTransfersAreOneApiSpanEachWithBytesAndPath) {
  const std::string path = dir_.file("a.json");
  {
    clbuf::BufferManager traced(std::string(), discrete(path));
    const auto data = random<float>(4096);  // 16 KiB: a buffered upload, a bounced download
    auto buffer = traced.allocate<float>(data.size());
    traced.upload(buffer, data);
    EXPECT_TRUE(clbuf_test::same_bytes(data, traced.download(buffer)));
    EXPECT_EQ(traced.stats().upload.paths.buffered, 1u);
    EXPECT_EQ(traced.stats().download.paths.bounced, 1u);
  }
  const Trace trace = Trace::read(path);
  const auto uploads = trace.named("X", "upload");
  const auto downloads = trace.named("X", "download");
  ASSERT_EQ(uploads.size(), 1u);
  ASSERT_EQ(downloads.size(), 1u);
  EXPECT_EQ(arg_number(*uploads[0], "bytes"), 16384);
  EXPECT_EQ(arg_text(*uploads[0], "path"), "buffered");
  EXPECT_EQ(arg_text(*uploads[0], "direction"), "upload");
  EXPECT_EQ(arg_number(*downloads[0], "bytes"), 16384);
  EXPECT_EQ(arg_text(*downloads[0], "path"), "bounced");
  EXPECT_EQ(arg_text(*downloads[0], "direction"), "download");
  EXPECT_LE(uploads[0]->number_of("ts") + uploads[0]->number_of("dur"),
            downloads[0]->number_of("ts"));
  const int tid = static_cast<int>(uploads[0]->number_of("tid"));
  EXPECT_EQ(trace.tracks.at(tid).rfind("API calls", 0), 0u) << trace.tracks.at(tid);
  const int pid = static_cast<int>(uploads[0]->number_of("pid"));
  EXPECT_EQ(trace.processes.at(pid), "clbuf: " + manager().device().name);
  // The buffered write is a span of the "buffered writes" track too.
  const auto buffered = trace.named("X", "buffered write");
  ASSERT_EQ(buffered.size(), 1u);
  EXPECT_EQ(trace.tracks.at(static_cast<int>(buffered[0]->number_of("tid"))), "buffered writes");
  EXPECT_EQ(arg_text(*buffered[0], "operation"), "upload");
  EXPECT_EQ(arg_number(*buffered[0], "bytes"), 16384);
  EXPECT_FALSE(trace.named("C", "pinned bytes").empty()) << "no pinned memory counter";
}

// (b) A staged upload of 8 chunks on 2 copy threads: 8 host copies and 8 DMAs, each chunk once,
// inside the upload's API span, and interleaved: on a copy thread, a later chunk's copy starts
// before the DMA of an earlier chunk of that thread has ended (as the host sees it): each thread
// copies into its next slot while its last DMA runs, which is the pipeline at work.
TEST_F(TraceTest, AStagedUploadShowsItsChunksCopiesAndDmasInterleaved) {
  const std::string path = dir_.file("b.json");
  const std::size_t chunk = 64 << 10;
  {
    clbuf::Options options = discrete(path);
    options.staging_threshold_bytes = chunk;
    options.staging_chunk_bytes = chunk;
    options.staging_chunks = 4;  // 2 threads with 2 slots each
    options.copy_threads = 2;
    clbuf::BufferManager traced(std::string(), options);
    const auto data = random<std::uint8_t>(8 * chunk);
    auto buffer = traced.allocate<std::uint8_t>(data.size());
    traced.upload(buffer, data);
    EXPECT_EQ(traced.stats().upload.paths.staged, 1u);
  }
  const Trace trace = Trace::read(path);
  const auto upload = trace.named("X", "upload");
  const auto copies = trace.named("X", "chunk host copy");
  const auto dmas = trace.named("b", "chunk DMA (host view)");
  const auto dma_ends = trace.named("e", "chunk DMA (host view)");
  ASSERT_EQ(upload.size(), 1u);
  EXPECT_EQ(arg_text(*upload[0], "path"), "staged");
  ASSERT_EQ(copies.size(), 8u);
  ASSERT_EQ(dmas.size(), 8u);
  ASSERT_EQ(dma_ends.size(), 8u);
  std::map<double, double> dma_end;  // by id
  for (const Json* e : dma_ends) dma_end[e->number_of("id")] = e->number_of("ts");
  std::set<double> copied, moved;
  const double begin = upload[0]->number_of("ts");
  const double end = begin + upload[0]->number_of("dur");
  for (const Json* copy : copies) {
    copied.insert(arg_number(*copy, "chunk"));
    EXPECT_EQ(arg_number(*copy, "bytes"), static_cast<double>(chunk));
    EXPECT_GE(copy->number_of("ts"), begin);
    EXPECT_LE(copy->number_of("ts") + copy->number_of("dur"), end);
  }
  bool interleaved = false;
  for (const Json* dma : dmas) {
    moved.insert(arg_number(*dma, "chunk"));
    ASSERT_EQ(dma_end.count(dma->number_of("id")), 1u);
    const double dma_ends_at = dma_end[dma->number_of("id")];
    EXPECT_GE(dma->number_of("ts"), begin);
    EXPECT_LE(dma_ends_at, end);
    const std::string thread =
        "staging copy thread " + std::to_string(static_cast<int>(arg_number(*dma, "copy thread")));
    for (const Json* copy : copies) {
      const std::string& track = trace.tracks.at(static_cast<int>(copy->number_of("tid")));
      interleaved |= track.rfind(thread, 0) == 0 &&
                     arg_number(*copy, "chunk") > arg_number(*dma, "chunk") &&
                     copy->number_of("ts") < dma_ends_at;
    }
  }
  EXPECT_EQ(copied.size(), 8u);
  EXPECT_EQ(moved.size(), 8u);
  EXPECT_TRUE(interleaved) << "no copy thread began a chunk's copy before its earlier DMA ended";
  // The counter of DMAs in flight: two at once or more (each thread keeps two slots busy), back
  // to none at the end.
  double most = 0, last_ts = 0, last = -1;
  for (const Json* count : trace.named("C", "in-flight chunks")) {
    most = std::max(most, arg_number(*count, "chunks"));
    if (count->number_of("ts") >= last_ts) {
      last_ts = count->number_of("ts");
      last = arg_number(*count, "chunks");
    }
  }
  EXPECT_GE(most, 2);
  EXPECT_EQ(last, 0);
}

// (c) An upload started while the manager's queue is held (a barrier on a user event, as a long
// kernel would hold it): its span runs from the call until the device has done it, so it covers
// the moment the queue was let go.
TEST_F(TraceTest, AStartedUploadsSpanCoversTheTimeItsQueueWasHeld) {
  const std::string path = dir_.file("c.json");
  double released = 0;
  {
    clbuf::BufferManager traced(std::string(), discrete(path));
    const auto data = random<float>(1024);
    auto buffer = traced.allocate<float>(data.size());
    traced.finish();
    cl::UserEvent gate(traced.context());
    const cl_event wait = gate();
    ASSERT_EQ(clEnqueueBarrierWithWaitList(traced.queue()(), 1, &wait, nullptr), CL_SUCCESS);
    auto future = traced.upload_async(buffer, data);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    released = now_us();
    gate.setStatus(CL_COMPLETE);
    future.get();
    EXPECT_TRUE(clbuf_test::same_bytes(data, traced.download(buffer)));
  }
  // The span is recorded by the event's callback, on a thread of the driver's: the manager's end
  // waits for it.
  const Trace trace = Trace::read(path);
  const auto spans = trace.named("b", "upload_async");
  ASSERT_EQ(spans.size(), 1u);
  const auto ends = trace.named("e", "upload_async");
  ASSERT_EQ(ends.size(), 1u);
  EXPECT_EQ(arg_text(*spans[0], "path"), "direct");
  EXPECT_EQ(arg_number(*spans[0], "bytes"), 4096);
  EXPECT_LT(spans[0]->number_of("ts"), released);
  EXPECT_GT(ends[0]->number_of("ts"), released);
}

// trace_command(): an application's command (here a user event standing for a long kernel) is a
// span of the "application commands (host's view)" track from the call until the command
// completed; a manager that does not trace takes the call and writes nothing.
TEST_F(TraceTest, AnApplicationsCommandIsASpanUntilItCompletes) {
  const std::string path = dir_.file("command.json");
  double released = 0;
  {
    clbuf::BufferManager traced(std::string(), discrete(path));
    cl::UserEvent kernel(traced.context());
    traced.trace_command("my kernel", kernel);
    manager().trace_command("not traced", kernel);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    released = now_us();
    kernel.setStatus(CL_COMPLETE);
  }
  const Trace trace = Trace::read(path);
  const auto begins = trace.named("b", "my kernel");
  const auto ends = trace.named("e", "my kernel");
  ASSERT_EQ(begins.size(), 1u);
  ASSERT_EQ(ends.size(), 1u);
  EXPECT_LT(begins[0]->number_of("ts"), released);
  EXPECT_GE(ends[0]->number_of("ts"), released);
  EXPECT_EQ(trace.tracks.at(static_cast<int>(begins[0]->number_of("tid"))),
            "application commands (host's view)");
  EXPECT_TRUE(trace.named("b", "not traced").empty());
}

// Every public entry point of the tracer takes a null or empty name (and null texts), and a name
// that is not UTF-8: the call is recorded under "" or U+FFFD, never a crash, and the file is valid
// JSON in UTF-8.
TEST_F(TraceTest, NullEmptyAndNonUtf8NamesAreRecordedNeverACrash) {
  const std::string path = dir_.file("names.json");
  {
    clbuf::BufferManager traced(std::string(), discrete(path));
    cl::UserEvent kernel(traced.context());
    traced.trace_command(nullptr, kernel);
    traced.trace_command("", kernel);
    traced.trace_command("caf\xe9 \xc0\xaf\xed\xa0\x80 \x01\"\\", kernel);
    kernel.setStatus(CL_COMPLETE);
    clbuf::detail::Tracer tracer(path, std::string("proc\xff\0x", 7), "test");
    const double now = clbuf::detail::trace_now();
    const int track = tracer.track(std::string("track\xfe", 6));
    tracer.api_span(nullptr, now, now, {{nullptr, nullptr, 0}});
    tracer.api_span("api", now, now, {{"key\xff", "text\xff", 0}, {"n", nullptr, 1}});
    tracer.span(track, nullptr, now, now, {});
    tracer.overlapping(track, nullptr, now, now, {});
    tracer.counter(nullptr, {{"k", nullptr, 1}});
    tracer.counter("", {});
    tracer.flow(track, true, 1, now);
    tracer.until_complete(nullptr, track, nullptr, now, {});
    tracer.until_complete(kernel(), track, "\x80", now, {});
  }
  std::string text;
  {
    std::ifstream in(path, std::ios::binary);
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  EXPECT_TRUE(valid_utf8(text));
  const Trace trace = Trace::read(path);
  // trace_command(nullptr) and "", the overlapping span, until_complete() without an event
  EXPECT_EQ(trace.named("b", "").size(), 4u);
  EXPECT_EQ(trace
                .named("b", "caf" + replacement + " " + replacement + replacement + replacement +
                                replacement + replacement + " \x01\"\\")
                .size(),
            1u);
  EXPECT_EQ(trace.named("X", "").size(), 2u);  // the null api_span and span
  EXPECT_EQ(trace.named("C", "").size(), 2u);
  EXPECT_EQ(trace.named("b", replacement).size(), 1u);
  bool process = false;
  for (const auto& named : trace.processes)
    process |= named.second == "proc" + replacement + std::string("\0x", 2);
  EXPECT_TRUE(process);
}

// The rect calls are spans too: a blocking one on its thread's API track, a started one until
// its last command has completed.
TEST_F(TraceTest, RectCallsAreSpansToo) {
  const std::string path = dir_.file("rect.json");
  {
    clbuf::BufferManager traced(std::string(), discrete(path));
    const std::vector<int> data(64 * 64, 3);
    auto buffer = traced.allocate<int>(data.size());
    clbuf::Region region;
    region.size = {16, 8, 1};
    region.src_extents = {64, 64, 1};
    region.dst_extents = {64, 64, 1};
    region.dst_origin = {4, 2, 0};
    traced.upload_rect(buffer, data, region);
    traced.upload_rect_async(buffer, data, region).get();
  }
  const Trace trace = Trace::read(path);
  const auto blocking = trace.named("X", "upload_rect");
  const auto started = trace.named("b", "upload_rect_async");
  ASSERT_EQ(blocking.size(), 1u);
  ASSERT_EQ(started.size(), 1u);
  EXPECT_EQ(trace.named("e", "upload_rect_async").size(), 1u);
  EXPECT_EQ(arg_number(*blocking[0], "bytes"), 16 * 8 * sizeof(int));
  EXPECT_EQ(arg_number(*started[0], "bytes"), 16 * 8 * sizeof(int));
  EXPECT_EQ(arg_text(*started[0], "path"), "direct");
}

// (d) A path that cannot be written, by the option or by CLBUF_TRACE: the constructor throws a
// clbuf::Error CL_INVALID_VALUE naming the path and the OS's reason; the option wins over the
// environment.
TEST_F(TraceTest, AnUnwritablePathIsAClearError) {
  clbuf::Options options;
  options.trace_path = dir_.path();  // a folder
  EXPECT_CLBUF_ERROR(clbuf::BufferManager(std::string(), options), CL_INVALID_VALUE,
                     "BufferManager", dir_.path(), "Is a directory");
  const std::string missing = dir_.file("missing/trace.json");
  options.trace_path = missing;
  EXPECT_CLBUF_ERROR(clbuf::BufferManager(std::string(), options), CL_INVALID_VALUE, missing,
                     "No such file or directory");
  {
    clbuf_test::ScopedEnv env("CLBUF_TRACE", missing.c_str());
    EXPECT_CLBUF_ERROR(clbuf::BufferManager(), CL_INVALID_VALUE, missing, "CLBUF_TRACE");
    clbuf::Options good;
    good.trace_path = dir_.file("good.json");
    clbuf::BufferManager wins(std::string(), good);
    EXPECT_EQ(wins.options().trace_path, good.trace_path);
  }
  EXPECT_NO_THROW(Trace::read(dir_.file("good.json")));
}

// Malformed CLBUF_TRACE: a folder, and a path the process may not write (a read-only folder; as
// root, which writes those, a file in /sys, which no one may create). Each is the same clear
// Error at construction, before any transfer (the first traced call), never a crash; the manager
// that follows without tracing works.
TEST_F(TraceTest, AMalformedClbufTraceIsAClearErrorAtConstruction) {
  std::string read_only = "/sys/clbuf_trace_test.json";
  if (::geteuid() != 0) {
    const std::string locked = dir_.file("locked");
    std::filesystem::create_directory(locked);
    std::filesystem::permissions(
        locked, std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
    read_only = locked + "/trace.json";
  }
  for (const std::string& bad : {dir_.path(), dir_.path() + "/", read_only}) {
    clbuf_test::ScopedEnv env("CLBUF_TRACE", bad.c_str());
    EXPECT_CLBUF_ERROR(clbuf::BufferManager(), CL_INVALID_VALUE, "BufferManager",
                       "cannot write the trace file \"" + bad + "\"", "CLBUF_TRACE");
  }
  EXPECT_FALSE(std::filesystem::exists(read_only));
  clbuf_test::ScopedEnv off("CLBUF_TRACE", "");
  clbuf::BufferManager plain;
  const std::vector<int> data(64, 5);
  EXPECT_EQ(plain.download(plain.upload(data)), data);
}

// Under an MPI launcher (the rank in OMPI_COMM_WORLD_RANK, PMI_RANK or SLURM_PROCID) each rank
// writes a file of its own: the rank before the path's extension, once (a second manager given
// the first's options() shares its file), the manager's process pid = rank, named
// "rank N: <device>"; a second process of the file rank + 100000. A folder keeps its name (and
// its error); PMIX_RANK alone, which a singleton MPI_Init sets, is no launcher.
TEST_F(TraceTest, UnderAnMpiLauncherEachRankWritesItsOwnFile) {
  using clbuf::detail::rank_path;
  EXPECT_EQ(rank_path("t.json", 3), "t.rank3.json");
  EXPECT_EQ(rank_path("out.d/trace", 3), "out.d/trace.rank3");
  EXPECT_EQ(rank_path(".trace", 3), ".trace.rank3");
  EXPECT_EQ(rank_path("t.rank3.json", 3), "t.rank3.json");
  EXPECT_EQ(rank_path("t.rank3.json", 13), "t.rank3.rank13.json");
  clbuf_test::ScopedEnv ompi("OMPI_COMM_WORLD_RANK", nullptr);
  clbuf_test::ScopedEnv slurm("SLURM_PROCID", nullptr);
  clbuf_test::ScopedEnv pmi("PMI_RANK", nullptr);
  clbuf_test::ScopedEnv pmix("PMIX_RANK", "0");
  EXPECT_EQ(clbuf::detail::trace_path(dir_.file("t.json")), dir_.file("t.json"));
  ::setenv("PMI_RANK", "3", 1);  // ScopedEnv pmi puts it back
  EXPECT_EQ(clbuf::detail::trace_path(dir_.path()), dir_.path());
  EXPECT_EQ(clbuf::detail::trace_path(dir_.path() + "/"), dir_.path() + "/");
  const std::string ranked = dir_.file("t.rank3.json");
  {
    clbuf::Options options;
    options.trace_path = dir_.file("t.json");
    clbuf::BufferManager traced(std::string(), options);
    EXPECT_EQ(traced.options().trace_path, ranked);
    clbuf::BufferManager second(std::string(), traced.options());
    EXPECT_EQ(second.options().trace_path, ranked);
    static_cast<void>(traced.upload(std::vector<int>(16, 1)));
  }
  EXPECT_FALSE(std::filesystem::exists(dir_.file("t.json")));
  const Trace trace = Trace::read(ranked);
  ASSERT_EQ(trace.processes.size(), 2u);
  EXPECT_EQ(trace.processes.at(3), "rank 3: " + manager().device().name);
  EXPECT_EQ(trace.processes.at(100003), "rank 3: " + manager().device().name);
  const auto uploads = trace.named("X", "upload");
  ASSERT_EQ(uploads.size(), 1u);
  EXPECT_EQ(uploads[0]->number_of("pid"), 3);
}

// (e) Four threads, 200 transfers each, on one traced manager: every span is in the file (valid
// JSON), each thread's on an "API calls" track of its own. Under TSan: no race in the buffers.
TEST_F(TraceTest, FourThreadsTracingOneManagerLoseNoSpan) {
  const std::string path = dir_.file("e.json");
  {
    clbuf::Options options;
    options.trace_path = path;
    clbuf::BufferManager traced(std::string(), options);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&traced] {
        const std::vector<int> data(256, 7);
        auto buffer = traced.allocate<int>(data.size());
        for (int i = 0; i < 200; ++i) traced.upload(buffer, data);
      });
    }
    for (std::thread& thread : threads) thread.join();
  }
  const Trace trace = Trace::read(path);
  const auto uploads = trace.named("X", "upload");
  EXPECT_EQ(uploads.size(), 800u);
  std::set<double> tracks;
  for (const Json* upload : uploads) tracks.insert(upload->number_of("tid"));
  EXPECT_EQ(tracks.size(), 4u);
}

// A thread's buffer is written into the file once it is full, before cleanup(): by the file's
// writer thread, off the thread that recorded it, so the test waits for it (at most 10 s).
TEST_F(TraceTest, AFullBufferIsWrittenBeforeCleanup) {
  const std::string path = dir_.file("full.json");
  clbuf::Options options;
  options.trace_path = path;
  clbuf::BufferManager traced(std::string(), options);
  const std::vector<int> data(16, 7);
  auto buffer = traced.allocate<int>(data.size());
  for (int i = 0; i < 4200; ++i) traced.upload(buffer, data);
  // 4096 events at least (a full buffer), whatever events an upload makes on this device (on
  // a discrete one a buffered write's too: then about half of them are uploads); the file's
  // writer thread may still be at it.
  std::size_t events = 0;
  std::size_t uploads = 0;
  for (int tries = 0; tries < 1000 && events < 4096; ++tries) {
    if (tries > 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    try {
      const Trace before = Trace::read(path);
      events = before.events.size();
      uploads = before.named("X", "upload").size();
    } catch (const std::runtime_error&) {  // read while the writer thread was writing: again
    }
  }
  EXPECT_GE(events, 4096u);
  EXPECT_GE(uploads, 2000u);
  traced.cleanup();
  EXPECT_EQ(Trace::read(path).named("X", "upload").size(), 4200u);
}

// Threads that end leave their buffers to the file, which writes them out and lets them go: 100
// threads, one upload each, lose no span.
TEST_F(TraceTest, BuffersOfEndedThreadsAreWrittenOut) {
  const std::string path = dir_.file("threads.json");
  {
    clbuf::Options options;
    options.trace_path = path;
    clbuf::BufferManager traced(std::string(), options);
    const std::vector<int> data(16, 7);
    auto buffer = traced.allocate<int>(data.size());
    for (int t = 0; t < 100; ++t) std::thread([&] { traced.upload(buffer, data); }).join();
    // Past 64 buffers a new thread's first event wrote the ended threads' spans out.
    EXPECT_GE(Trace::read(path).named("X", "upload").size(), 64u);
  }
  EXPECT_EQ(Trace::read(path).named("X", "upload").size(), 100u);
}

// (f) Tracing off: no file is written, the options say so, and stats() count as a traced
// manager's do.
TEST_F(TraceTest, TracingOffWritesNothingAndCountsTheSame) {
  clbuf_test::ScopedEnv env("CLBUF_TRACE", nullptr);
  const auto work = [this](clbuf::BufferManager& m) {
    const auto data = random<float>(20000);
    auto buffer = m.upload(data);
    static_cast<void>(m.download(buffer));
    m.upload_async(buffer, data).get();
    return m.stats();
  };
  const std::string cwd = std::filesystem::current_path();
  std::filesystem::current_path(dir_.path());  // a relative path would land here
  clbuf::BufferManager plain(std::string(), discrete(""));
  EXPECT_TRUE(plain.options().trace_path.empty());
  const clbuf::TransferStats off = work(plain);
  std::filesystem::current_path(cwd);
  EXPECT_TRUE(dir_.empty()) << "a file was written with tracing off";
  clbuf::BufferManager traced(std::string(), discrete(dir_.file("f.json")));
  const clbuf::TransferStats on = work(traced);
  for (auto member : {&clbuf::TransferStats::upload, &clbuf::TransferStats::download}) {
    EXPECT_EQ((off.*member).operations, (on.*member).operations);
    EXPECT_EQ((off.*member).bytes, (on.*member).bytes);
    EXPECT_EQ(clbuf_test::path_taken(off.*member), clbuf_test::path_taken(on.*member));
  }
}

// (g) The file is valid JSON after cleanup() (the manager still alive) and holds its spans; two
// managers tracing to one path share the file, each a process of its own.
TEST_F(TraceTest, TheFileIsWholeAfterCleanupAndSharedByManagers) {
  const std::string path = dir_.file("g.json");
  clbuf::Options options;
  options.trace_path = path;
  clbuf::BufferManager first(std::string(), options);
  auto second = std::make_unique<clbuf::BufferManager>(std::string(), options);
  const std::vector<int> data(100, 1);
  static_cast<void>(first.upload(data));
  static_cast<void>(second->upload(data));
  first.cleanup();
  Trace trace = Trace::read(path);
  EXPECT_EQ(trace.processes.size(), 2u);
  auto uploads = trace.named("X", "upload");
  ASSERT_EQ(uploads.size(), 2u);
  EXPECT_NE(uploads[0]->number_of("pid"), uploads[1]->number_of("pid"));
  static_cast<void>(second->upload(data));
  second.reset();
  EXPECT_EQ(Trace::read(path).named("X", "upload").size(), 3u);
}

// Once every manager of a path has gone, the next one starts the file afresh.
TEST_F(TraceTest, APathIsWrittenAfreshOnceItsManagersHaveGone) {
  const std::string path = dir_.file("again.json");
  clbuf::Options options;
  options.trace_path = path;
  const std::vector<int> data(100, 1);
  for (int uploads = 2; uploads >= 1; --uploads) {
    clbuf::BufferManager traced(std::string(), options);
    for (int i = 0; i < uploads; ++i) static_cast<void>(traced.upload(data));
  }
  const Trace trace = Trace::read(path);
  EXPECT_EQ(trace.processes.size(), 1u);
  EXPECT_EQ(trace.named("X", "upload").size(), 1u);
}

// The program ends by an uncaught exception: the terminate handler writes the buffers, so the
// file is valid JSON with the spans recorded before.
TEST_F(TraceTest, TheFileIsWholeWhenAnUncaughtExceptionEndsTheProgram) {
  if (clbuf_test::thread_sanitizer) GTEST_SKIP() << "a death test forks; not under TSan";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  // The threadsafe style runs this test again in a new process, with a folder of its own: the
  // parent's is passed on by the environment, which the child inherits.
  if (std::getenv("CLBUF_TRACE_TEST_DIR") == nullptr) {
    ::setenv("CLBUF_TRACE_TEST_DIR", dir_.path().c_str(), 1);
  }
  const std::string path = std::string(std::getenv("CLBUF_TRACE_TEST_DIR")) + "/terminate.json";
  clbuf::Options options;
  options.trace_path = path;
  EXPECT_DEATH(
      {
        if (dir_.path() != std::getenv("CLBUF_TRACE_TEST_DIR")) {  // the child's own: unused
          std::filesystem::remove(dir_.path());
        }
        clbuf::BufferManager traced(std::string(), options);
        static_cast<void>(traced.upload(std::vector<int>(100, 1)));
        std::thread([] { throw std::runtime_error("uncaught"); }).join();
      },
      "uncaught");
  ::unsetenv("CLBUF_TRACE_TEST_DIR");
  EXPECT_EQ(Trace::read(path).named("X", "upload").size(), 1u);
}

// Every spelling of one file (relative, "./", "a/../", absolute, a symlink, a hard link) is one
// file: the managers tracing to them share one writer, each a process of its own, and no
// manager's events vanish.
TEST_F(TraceTest, EverySpellingOfAFileSharesOneWriter) {
  const std::string path = dir_.file("t.json");
  std::filesystem::create_directory(dir_.file("sub"));
  { std::ofstream(path) << "old"; }  // the file exists: a hard link needs it
  std::filesystem::create_symlink(path, dir_.file("link.json"));
  std::filesystem::create_hard_link(path, dir_.file("hard.json"));
  const std::string cwd = std::filesystem::current_path();
  std::filesystem::current_path(dir_.path());
  const std::vector<std::string> spellings = {"t.json",
                                              "./t.json",
                                              "sub/../t.json",
                                              path,
                                              dir_.path() + "//t.json",
                                              "link.json",
                                              dir_.file("hard.json")};
  {
    std::vector<std::unique_ptr<clbuf::BufferManager>> managers;
    for (const std::string& spelling : spellings) {
      clbuf::Options options;
      options.trace_path = spelling;
      managers.push_back(std::make_unique<clbuf::BufferManager>(std::string(), options));
    }
    std::filesystem::current_path(cwd);
    const std::vector<int> data(64, 1);
    for (auto& manager : managers) static_cast<void>(manager->upload(data));
    managers[3]->cleanup();  // one flush writes every thread's buffer of the file
    EXPECT_EQ(Trace::read(path).named("X", "upload").size(), spellings.size());
    managers.erase(managers.begin());  // the first goes; the others keep the file
    static_cast<void>(managers.back()->upload(data));
  }
  const Trace trace = Trace::read(path);
  EXPECT_EQ(trace.processes.size(), spellings.size());
  EXPECT_EQ(trace.named("X", "upload").size(), spellings.size() + 1);
  EXPECT_TRUE(std::filesystem::is_symlink(dir_.file("link.json")));
  EXPECT_TRUE(std::filesystem::equivalent(path, dir_.file("hard.json")));
}

// A path that holds a NUL (a std::string, Python's clbuf.trace("t\0.json")) or is empty is
// refused with the operation and the path escaped, never traced into the part before the NUL;
// a path that is no file to write (a FIFO) is refused too.
TEST_F(TraceTest, APathWithANulOrNoFileIsRefused) {
  const std::string nul = dir_.file(std::string("t\0.json", 7));
  clbuf::Options options;
  options.trace_path = nul;
  EXPECT_CLBUF_ERROR(clbuf::BufferManager(std::string(), options), CL_INVALID_VALUE,
                     "BufferManager", dir_.file("t\\0.json"), "NUL");
  EXPECT_FALSE(std::filesystem::exists(dir_.file("t")));
  EXPECT_CLBUF_ERROR(clbuf::detail::Tracer("", "p", "trace"), CL_INVALID_VALUE, "trace", "empty");
  EXPECT_CLBUF_ERROR(clbuf::detail::scoped_trace_path(&nul), CL_INVALID_VALUE, "clbuf.trace()",
                     "NUL");
  EXPECT_EQ(clbuf::detail::scoped_trace_path(), "");  // refused: nothing set
  // A name as long as a name may be (255 bytes) is written, though no temporary name fits
  // beside it; one byte more is the system's error.
  const std::string longest = dir_.file(std::string(250, 'n') + ".json");
  {
    clbuf::detail::Tracer tracer(longest, "p", "trace");
    tracer.counter("c", {});
  }
  EXPECT_NO_THROW(Trace::read(longest));
  EXPECT_CLBUF_ERROR(
      clbuf::detail::Tracer(dir_.file(std::string(251, 'n') + ".json"), "p", "trace"),
      CL_INVALID_VALUE, "File name too long");
  const std::string fifo = dir_.file("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  options.trace_path = fifo;
  EXPECT_CLBUF_ERROR(clbuf::BufferManager(std::string(), options), CL_INVALID_VALUE, fifo,
                     "not a regular file");
}

/// Runs `child` in a process of its own (fork), its stderr into `stderr_path`; its wait status.
int in_child_process(const std::function<int()>& child, const std::string& stderr_path) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (!stderr_path.empty()) {
      const int fd = ::open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      ::dup2(fd, 2);
    }
    clbuf_test::exit_child(child());  // what the child ran counted in a coverage build
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

/// The text of the file at `path`.
std::string file_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

/// Records spans as fast as it can, its buffers written by the writer thread and by flush().
[[noreturn]] void trace_forever(const std::string& path) {
  clbuf::detail::Tracer tracer(path, "writer", "trace");
  const int track = tracer.track("spans");
  for (std::uint64_t n = 0;; ++n) {
    const double now = clbuf::detail::trace_now();
    tracer.span(track, "span", now, now + 1, {{"n", nullptr, static_cast<double>(n)}});
    if (n % 1000 == 999) tracer.flush();
  }
}

/// The files of `paths` that a strict JSON reader refuses (Python's json, which also requires
/// well-formed UTF-8; the tests' own reader where there is no /usr/bin/python3), with the reason.
std::vector<std::string> not_json(const std::vector<std::string>& paths, const TempDir& dir) {
  std::vector<std::string> bad;
  if (::access("/usr/bin/python3", X_OK) == 0) {
    const std::string list = dir.file("files.txt");
    const std::string out = dir.file("bad.txt");
    {
      std::ofstream names(list);
      for (const std::string& path : paths) names << path << '\n';
    }
    const std::string command =
        "/usr/bin/python3 -c \"import json,sys\n"
        "for name in open(sys.argv[1]).read().split():\n"
        "    try: json.load(open(name, encoding='utf-8'))\n"
        "    except Exception as e: print(name, repr(e)[:200])\" " +
        list + " > " + out;
    if (std::system(command.c_str()) != 0) bad.push_back("python3 failed: " + command);
    std::ifstream lines(out);
    for (std::string line; std::getline(lines, line);) bad.push_back(line);
    return bad;
  }
  for (const std::string& path : paths) {
    const std::string text = file_text(path);
    try {
      if (!valid_utf8(text)) throw std::runtime_error("not UTF-8");
      JsonReader::parse(text);
    } catch (const std::runtime_error& error) {
      bad.push_back(path + " " + error.what());
    }
  }
  return bad;
}

// A process killed (SIGKILL) at any instant leaves a file that is valid JSON: 100 processes
// tracing as fast as they can (a flush each 1000 events, the writer thread's each 4096), each
// killed after a random time, every file read back by a strict reader.
TEST(TraceFiles, AKillAtAnyInstantLeavesValidJson) {
  if (clbuf_test::thread_sanitizer) GTEST_SKIP() << "forks; not under TSan";
  TempDir dir;
  std::uint32_t state = 2024;
  std::vector<std::string> paths;
  for (int kill = 0; kill < 100; ++kill) {
    const std::string path = dir.file("k" + std::to_string(kill) + ".json");
    const pid_t pid = ::fork();
    if (pid == 0) trace_forever(path);
    // The random instant counts from the file's making, however slowly the child starts (a
    // sanitizer's or a busy machine's start-up), so the kills fall in its writing.
    for (int wait = 0; wait < 10000 && !std::filesystem::exists(path); ++wait) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    state = state * 1664525u + 1013904223u;
    std::this_thread::sleep_for(std::chrono::microseconds(200 + (state >> 8) % 10000));
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (std::filesystem::exists(path)) paths.push_back(path);  // else killed before it opened it
  }
  EXPECT_GE(paths.size(), 90u);
  for (const std::string& bad : not_json(paths, dir)) ADD_FAILURE() << bad;
}

// A trace that cannot be written at all (/dev/full) is an Error at construction naming the path
// and the system's reason.
TEST_F(TraceTest, ATraceFileThatCannotBeWrittenIsAnErrorAtConstruction) {
  clbuf::Options options;
  options.trace_path = "/dev/full";
  EXPECT_CLBUF_ERROR(clbuf::BufferManager(std::string(), options), CL_INVALID_VALUE,
                     "BufferManager", "/dev/full", "No space left on device");
}

// A write that fails mid-trace (the file-size limit, RLIMIT_FSIZE / ulimit -f, reached: as a full
// disk fails) is reported: one line on stderr, clbuf::trace_write_errors() names the file and the
// reason; the process is not killed (SIGXFSZ), no transfer fails, and the file is valid JSON with
// the events written before, within the limit.
TEST(TraceFiles, AFailedWriteIsReportedAndTheFileStaysValid) {
  if (clbuf_test::thread_sanitizer) GTEST_SKIP() << "forks; not under TSan";
  TempDir dir;
  const std::string path = dir.file("limited.json");
  const std::string errors = dir.file("stderr.txt");
  const rlim_t limit = 100000;
  const int status = in_child_process(
      [&] {
        const rlimit small = {limit, RLIM_INFINITY};
        if (::setrlimit(RLIMIT_FSIZE, &small) != 0) return 3;
        {
          clbuf::detail::Tracer tracer(path, "limited", "trace");
          const int track = tracer.track("spans");
          if (!clbuf::trace_write_errors().empty()) return 4;
          for (int n = 0; n < 20000; ++n) {
            tracer.span(track, "span", n, n + 1, {});
            if (n % 3000 == 0) tracer.flush();
          }
        }
        const std::string reported = clbuf::trace_write_errors();
        if (reported.find(path) == std::string::npos) return 5;
        if (reported.find("File too large") == std::string::npos) return 6;
        return 0;
      },
      errors);
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0);
  const std::string text = file_text(path);
  EXPECT_LE(text.size(), limit);
  const Json root = JsonReader::parse(text);
  ASSERT_NE(root.find("traceEvents"), nullptr);
  EXPECT_GT(root.find("traceEvents")->items.size(), 100u);
  const std::string reported = file_text(errors);
  EXPECT_EQ(std::count(reported.begin(), reported.end(), '\n'), 1) << reported;
  EXPECT_NE(reported.find(path), std::string::npos) << reported;
}

// A full disk mid-trace (a tmpfs of 256 KiB, mounted where the test may: as root) is reported as
// the size limit is: clbuf::trace_write_errors() names the file and "No space left on device",
// the file is valid JSON with the events written before, and no call failed.
TEST(TraceFiles, AFullDiskIsReportedAndTheFileStaysValid) {
  TempDir dir;
  const std::string disk = dir.file("disk");
  std::filesystem::create_directory(disk);
  if (::mount("tmpfs", disk.c_str(), "tmpfs", 0, "size=256k") != 0) {
    GTEST_SKIP() << "cannot mount a small tmpfs here: " << std::strerror(errno);
  }
  const std::string path = disk + "/full.json";
  {
    clbuf::detail::Tracer tracer(path, "full", "trace");
    const int track = tracer.track("spans");
    for (int n = 0; n < 20000; ++n) {
      tracer.span(track, "span", n, n + 1, {});
      if (n % 3000 == 0) tracer.flush();
    }
  }
  const std::string reported = clbuf::trace_write_errors();
  EXPECT_NE(reported.find(path + "\" could not be written (No space left on device)"),
            std::string::npos)
      << reported;
  std::vector<std::string> paths = {path};
  const std::vector<std::string> bad = not_json(paths, dir);
  EXPECT_TRUE(bad.empty()) << bad.front();
  const Json root = JsonReader::parse(file_text(path));
  EXPECT_GT(root.find("traceEvents")->items.size(), 1000u);
  ::umount2(disk.c_str(), MNT_DETACH);
}

// A trace path that is a symbolic link to no file yet: the link stays, and the file it names is
// made and holds the trace.
TEST(TraceFiles, ASymlinkToNoFileGetsItsTargetMadeAndWritten) {
  TempDir dir;
  const std::string link = dir.file("link.json");
  const std::string target = dir.file("target.json");
  ASSERT_EQ(::symlink(target.c_str(), link.c_str()), 0);
  {
    clbuf::detail::Tracer tracer(link, "linked", "trace");
    tracer.span(tracer.track("spans"), "span", 1, 2, {});
  }
  EXPECT_TRUE(std::filesystem::is_symlink(link));
  EXPECT_EQ(Trace::read(target).named("X", "span").size(), 1u);
}

// A trace file on a full disk (a tmpfs of 64 KiB, filled; where the test may mount one) is an
// Error at construction naming the path and "No space left on device": not even the empty
// trace fits.
TEST(TraceFiles, ATraceFileOnAFullDiskIsAnErrorAtConstruction) {
  TempDir dir;
  const std::string disk = dir.file("disk");
  std::filesystem::create_directory(disk);
  if (::mount("tmpfs", disk.c_str(), "tmpfs", 0, "size=64k") != 0) {
    GTEST_SKIP() << "cannot mount a small tmpfs here: " << std::strerror(errno);
  }
  struct Unmounted {
    std::string at;
    ~Unmounted() { ::umount2(at.c_str(), MNT_DETACH); }
  } unmount{disk};
  {
    std::ofstream filler(disk + "/filler", std::ios::binary);
    const std::string block(4096, 'x');
    for (int i = 0; i < 64 && filler.write(block.data(), 4096).flush(); ++i) {
    }
  }
  const std::string path = disk + "/trace.json";
  EXPECT_CLBUF_ERROR(clbuf::detail::Tracer(path, "full", "trace"), CL_INVALID_VALUE, path,
                     "No space left on device");
}

// A burst of full buffers (12 of 4096 events, handed to the writer thread as they fill; past 8
// waiting, the recording thread writes its own) with a flush in the middle, which writes the
// queued buffers itself: every span is in the file once.
TEST(TraceFiles, ABurstOfFullBuffersWithAFlushMeanwhileLosesNoEvent) {
  TempDir dir;
  const std::string path = dir.file("burst.json");
  const int spans = 12 * 4096;
  {
    clbuf::detail::Tracer tracer(path, "burst", "trace");
    const int track = tracer.track("spans");
    for (int n = 0; n < spans; ++n) {
      tracer.span(track, "span", n, n + 1, {});
      if (n == spans / 2) tracer.flush();
    }
  }
  // Each span once, by its start (n): the records read as text, not as a tree of 49,152.
  const std::string text = file_text(path);
  ASSERT_GE(text.size(), 4u);
  EXPECT_EQ(text.substr(text.size() - 4), "\n]}\n");
  std::vector<bool> seen(spans, false);
  std::size_t found = 0;
  const std::string name = "\"name\":\"span\"";
  for (std::size_t at = text.find(name); at != std::string::npos; at = text.find(name, at + 1)) {
    const std::size_t ts = text.find("\"ts\":", at);
    ASSERT_NE(ts, std::string::npos);
    const auto n = static_cast<std::size_t>(std::strtoull(text.c_str() + ts + 5, nullptr, 10));
    ASSERT_LT(n, seen.size());
    EXPECT_FALSE(seen[n]) << "span " << n << " twice";
    seen[n] = true;
    ++found;
  }
  EXPECT_EQ(found, static_cast<std::size_t>(spans));
}

// A file opened again while its last holder is still closing it (its writer thread writing out a
// backlog of full buffers) waits for that close, then starts the file afresh: the file holds
// the new writer's events only, whole.
TEST(TraceFiles, AFileOpenedWhileItsLastHolderClosesItWaitsThenStartsAfresh) {
  TempDir dir;
  const std::string path = dir.file("reopened.json");
  for (int round = 0; round < 3; ++round) {
    std::shared_ptr<clbuf::detail::TraceFile> held;
    clbuf::detail::TraceEvent event;
    event.name = "old span";
    {
      clbuf::detail::Tracer first(path, "first", "trace");
      held = first.file();
      event.pid = first.pid();
      event.tid = first.track("old");
    }
    for (int n = 0; n < 12 * 4096; ++n) {  // full buffers queued for the writer thread
      event.begin = n;
      event.end = n + 1;
      held->record(event);
    }
    const std::weak_ptr<clbuf::detail::TraceFile> watch = held;
    std::thread closer([&] { held.reset(); });  // its last holder: the backlog written now
    while (!watch.expired()) std::this_thread::yield();
    {
      clbuf::detail::Tracer second(path, "second", "trace");
      second.span(second.track("new"), "new span", 1, 2, {});
    }
    closer.join();
    const Trace trace = Trace::read(path);
    EXPECT_EQ(trace.named("X", "new span").size(), 1u) << "round " << round;
    EXPECT_TRUE(trace.named("X", "old span").empty()) << "round " << round;
  }
}

// A block device (a node of the loop driver, made where the test may: as root) named as the trace
// file is refused at construction and never written: only a regular file or a character device
// (/dev/null) takes a trace.
TEST(TraceFiles, ABlockDeviceIsRefusedAsATraceFile) {
  TempDir dir;
  const std::string node = dir.file("block");
  if (::mknod(node.c_str(), S_IFBLK | 0600, makedev(7, 0)) != 0) {
    GTEST_SKIP() << "cannot make a block device node here: " << std::strerror(errno);
  }
  EXPECT_CLBUF_ERROR(clbuf::detail::Tracer(node, "block", "trace"), CL_INVALID_VALUE, node,
                     "not a regular file");
}

// A trace file that is a mount point (a file bound over it, where the test may mount) cannot be
// replaced by a rename: it is started afresh in place, and holds the new trace only.
TEST(TraceFiles, ATraceFileThatIsAMountPointIsStartedAfreshInPlace) {
  TempDir dir;
  const std::string path = dir.file("bound.json");
  const std::string source = dir.file("source.json");
  {
    clbuf::detail::Tracer old(source, "old", "trace");
    old.span(old.track("old"), "old span", 1, 2, {});
  }
  std::ofstream(path) << "placeholder";
  if (::mount(source.c_str(), path.c_str(), nullptr, MS_BIND, nullptr) != 0) {
    GTEST_SKIP() << "cannot bind-mount a file here: " << std::strerror(errno);
  }
  struct Unmounted {
    std::string at;
    ~Unmounted() { ::umount2(at.c_str(), MNT_DETACH); }
  } unmount{path};
  {
    clbuf::detail::Tracer fresh(path, "fresh", "trace");
    fresh.span(fresh.track("new"), "new span", 1, 2, {});
  }
  const Trace trace = Trace::read(path);
  EXPECT_EQ(trace.named("X", "new span").size(), 1u);
  EXPECT_TRUE(trace.named("X", "old span").empty());
  std::set<std::string> names;  // the temporary file of the refused rename is gone
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    names.insert(entry.path().filename().string());
  }
  EXPECT_EQ(names, (std::set<std::string>{"bound.json", "source.json"}));
}

}  // namespace
