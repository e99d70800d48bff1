// SPDX-License-Identifier: MIT
// The tracer's events and their JSON (detail/trace.hpp): the trace's clock, an event as a thread's
// buffer holds it (TraceEvent), and its Chrome Trace Event Format text. Names and texts of any
// bytes are written as valid JSON in UTF-8 (append_json_string()).
#ifndef CLBUF_DETAIL_TRACE_JSON_HPP
#define CLBUF_DETAIL_TRACE_JSON_HPP

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

namespace clbuf {
namespace detail {

/// Now, in microseconds of std::chrono::steady_clock: the trace's clock.
inline double trace_now() noexcept {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

/// `time` in the trace's clock.
inline double trace_time(std::chrono::steady_clock::time_point time) noexcept {
  return std::chrono::duration<double, std::micro>(time.time_since_epoch()).count();
}

/// One argument of an event: a number, or `text` (a string literal) when not null.
struct TraceArg {
  const char* key = nullptr;  // null: no argument
  const char* text = nullptr;
  double number = 0;
};

/// One event as a thread's buffer holds it: no allocation but the buffer's own. `name` and every
/// text are string literals (or outlive the file). Phases: 'X' a complete span, 'A' a span that
/// may overlap others on its track (written as the async pair "b"/"e" with `id`), 'C' a counter,
/// 's' and 'f' the start and the end of a flow arrow `id` (bound to the span around `begin` on
/// its track: an MPI message's send and its receive).
struct TraceEvent {
  static constexpr std::size_t max_args = 5;
  char phase = 'X';
  const char* name = "";
  int pid = 0;
  int tid = 0;
  double begin = 0;  // microseconds, trace_now()
  double end = 0;
  std::uint64_t id = 0;
  TraceArg args[max_args];
};

/// The length of the well-formed UTF-8 character at `text` (RFC 3629: no overlong form, no
/// surrogate, nothing past U+10FFFF), of at most `size` bytes; 0 when there is none there. Sets
/// `part` to the bytes of the longest start of one (the maximal ill-formed part: 1 at least).
inline std::size_t utf8_character(const unsigned char* text, std::size_t size,
                                  std::size_t& part) noexcept {
  const unsigned char lead = text[0];
  part = 1;
  if (lead < 0x80) return 1;
  std::size_t length = 0;
  unsigned char low = 0x80, high = 0xbf;  // the range of the second byte
  if (lead >= 0xc2 && lead <= 0xdf) {
    length = 2;
  } else if (lead >= 0xe0 && lead <= 0xef) {
    length = 3;
    if (lead == 0xe0) low = 0xa0;   // overlong below
    if (lead == 0xed) high = 0x9f;  // surrogates above
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    length = 4;
    if (lead == 0xf0) low = 0x90;   // overlong below
    if (lead == 0xf4) high = 0x8f;  // past U+10FFFF above
  } else {
    return 0;  // a continuation byte, C0, C1 (overlong) or F5-FF: never a lead byte
  }
  for (std::size_t k = 1; k < length; ++k) {
    if (k >= size) return 0;
    const unsigned char next = text[k];
    if (k == 1 ? (next < low || next > high) : (next < 0x80 || next > 0xbf)) return 0;
    part = k + 1;
  }
  return length;
}

/// The `size` bytes at `text` as a JSON string's contents, always valid JSON in well-formed UTF-8,
/// whatever the bytes: `"` and `\\` escaped, control characters (0x00-0x1f, 0x7f) as \\u00XX,
/// well-formed UTF-8 as it is, and each maximal ill-formed part (a byte that starts no character,
/// or a character cut short) as one U+FFFD, the replacement character (the Unicode standard's
/// practice, which browsers follow).
inline void append_json_string(std::string& out, const char* text, std::size_t size) {
  if (text == nullptr) return;
  const char* plain = text;  // the common case, names and keys with nothing to escape: at once
  const char* const end = text + size;
  while (plain != end && *plain != '"' && *plain != '\\' &&
         static_cast<unsigned char>(*plain) >= 0x20 && static_cast<unsigned char>(*plain) < 0x7f) {
    ++plain;
  }
  out.append(text, plain);
  for (const char* c = plain; c != end;) {
    const unsigned char byte = static_cast<unsigned char>(*c);
    if (byte == '"' || byte == '\\') {
      out += '\\';
      out += *c++;
    } else if (byte < 0x20 || byte == 0x7f) {
      static const char hex[] = "0123456789abcdef";
      const char escaped[6] = {'\\', 'u', '0', '0', hex[byte >> 4], hex[byte & 15]};
      out.append(escaped, 6);
      ++c;
    } else if (byte < 0x80) {
      out += *c++;
    } else {
      std::size_t part = 1;
      const std::size_t length = utf8_character(reinterpret_cast<const unsigned char*>(c),
                                                static_cast<std::size_t>(end - c), part);
      if (length == 0) {
        out += "\xef\xbf\xbd";  // U+FFFD for the ill-formed part
        c += part;
      } else {
        out.append(c, length);
        c += length;
      }
    }
  }
}

/// The C string `text` (null: "") as a JSON string's contents (as above).
inline void append_json_string(std::string& out, const char* text) {
  if (text != nullptr) append_json_string(out, text, std::strlen(text));
}

/// `text` as a JSON string's contents (as above; a NUL in it as \\u0000).
inline void append_json_string(std::string& out, const std::string& text) {
  append_json_string(out, text.data(), text.size());
}

// The writers below format without snprintf (integers by std::to_chars): formatting is most of
// what tracing costs (about 1 us an event by snprintf, on PoCL's host). A full buffer of 4096
// events is formatted by its file's writer thread, off the transfer's thread, unless that thread
// could not be started or is 8 buffers behind: then by the thread that recorded the last event,
// inside its transfer (TraceFile::hand_over()); the rest at cleanup(), destruction and exit.

/// `value` in decimal.
inline void append_json_integer(std::string& out, long long value) {
  char text[24];
  const std::to_chars_result made = std::to_chars(text, text + sizeof(text), value);
  out.append(text, made.ptr);
}

/// `value` as a JSON number: an integer up to 2^53 exactly, else 17 significant digits; never
/// NaN or infinity, which JSON lacks (0 instead).
inline void append_json_number(std::string& out, double value) {
  if (!(value == value && value - value == 0)) value = 0;
  // The range first: a double past long long's range converted to it is undefined behaviour.
  if (value <= 9007199254740992.0 && value >= -9007199254740992.0 &&
      value == static_cast<double>(static_cast<long long>(value))) {
    append_json_integer(out, static_cast<long long>(value));
    return;
  }
  char text[32];
  std::snprintf(text, sizeof(text), "%.17g", value);
  out += text;
}

/// A time in microseconds to the nanosecond (three decimals), as a JSON number.
inline void append_json_time(std::string& out, double microseconds) {
  if (!(microseconds >= 0 && microseconds < 9e15)) {  // not from the trace's clock: as it is
    append_json_number(out, microseconds);
    return;
  }
  const long long ns = static_cast<long long>(microseconds * 1000.0 + 0.5);
  append_json_integer(out, ns / 1000);
  const char fraction[4] = {'.', static_cast<char>('0' + ns / 100 % 10),
                            static_cast<char>('0' + ns / 10 % 10),
                            static_cast<char>('0' + ns % 10)};
  out.append(fraction, 4);
}

/// The arguments of `event` as the members of a JSON object.
inline void append_trace_args(std::string& out, const TraceEvent& event) {
  for (std::size_t a = 0; a < TraceEvent::max_args && event.args[a].key != nullptr; ++a) {
    out += a == 0 ? "\"" : ",\"";
    append_json_string(out, event.args[a].key);
    out += "\":";
    if (event.args[a].text == nullptr) {
      append_json_number(out, event.args[a].number);
    } else {
      out += '"';
      append_json_string(out, event.args[a].text);
      out += '"';
    }
  }
}

/// The events of a TraceEvent as JSON objects, each followed by ",\n".
inline void append_trace_event(std::string& out, const TraceEvent& event) {
  const bool pair = event.phase == 'A';
  const char phases[2] = {pair ? 'b' : event.phase, 'e'};
  for (int half = 0; half < (pair ? 2 : 1); ++half) {
    out += "{\"ph\":\"";
    out += phases[half];
    out += "\",\"cat\":\"clbuf\",\"name\":\"";
    append_json_string(out, event.name);
    out += "\",\"pid\":";
    append_json_integer(out, event.pid);
    out += ",\"tid\":";
    append_json_integer(out, event.tid);
    out += ",\"ts\":";
    append_json_time(out, half == 0 ? event.begin : event.end);
    if (event.phase == 'X') {
      out += ",\"dur\":";
      append_json_time(out, std::max(0.0, event.end - event.begin));
    }
    if (pair || event.phase == 's' || event.phase == 'f') {
      out += ",\"id\":";
      append_json_integer(out, static_cast<long long>(event.id));
    }
    if (event.phase == 'f') out += ",\"bp\":\"e\"";
    out += ",\"args\":{";
    if (half == 0) append_trace_args(out, event);
    out += "}},\n";
  }
}

}  // namespace detail
}  // namespace clbuf

#endif  // CLBUF_DETAIL_TRACE_JSON_HPP
