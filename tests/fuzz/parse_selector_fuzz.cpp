// SPDX-License-Identifier: MIT
// detail::parse_selector(text) against an independent reading of DESIGN.md's grammar:
// surrounding white space ignored, case-insensitive; "" -> automatic; "gpu" / "cpu" /
// "accelerator" -> that type; "P:D" -> platform P, device D (decimal indices; as parse_index
// documents, 1-19 digits, so every accepted index fits in size_t); anything else -> a name,
// lower-cased and trimmed.
#include <string>

#include <clbuf/clbuf.hpp>

#include "fuzz_support.hpp"

namespace {

using Kind = clbuf::detail::Selector::Kind;

struct Expected {
  Kind kind = Kind::automatic;
  clbuf::DeviceType type = clbuf::DeviceType::other;
  std::size_t platform = 0, device = 0;
  std::string name;
};

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/// Decimal digits only, 1 to 19 of them.
bool index_of(const std::string& text, std::size_t& out) {
  if (text.empty() || text.size() > 19) return false;
  clbuf_fuzz::u128 value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    value = value * 10 + static_cast<unsigned>(c - '0');
  }
  if (value > clbuf_fuzz::u128{clbuf_fuzz::size_max}) return false;
  out = static_cast<std::size_t>(value);
  return true;
}

Expected reference(const std::string& text) {
  std::size_t begin = 0, end = text.size();
  while (begin < end && is_space(text[begin])) ++begin;
  while (end > begin && is_space(text[end - 1])) --end;
  std::string key;
  for (std::size_t i = begin; i < end; ++i) {
    const char c = text[i];
    key += (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
  }
  Expected e;
  if (key.empty()) return e;
  if (key == "gpu" || key == "cpu" || key == "accelerator") {
    e.kind = Kind::type;
    e.type = key[0] == 'g'   ? clbuf::DeviceType::gpu
             : key[0] == 'c' ? clbuf::DeviceType::cpu
                             : clbuf::DeviceType::accelerator;
    return e;
  }
  const std::size_t colon = key.find(':');
  if (colon != std::string::npos && index_of(key.substr(0, colon), e.platform) &&
      index_of(key.substr(colon + 1), e.device)) {
    e.kind = Kind::index;
    return e;
  }
  e = Expected();
  e.kind = Kind::name;
  e.name = key;
  return e;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* bytes, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(bytes), size);
  const Expected e = reference(text);
  const clbuf::detail::Selector s = clbuf::detail::parse_selector(text);
  bool same = s.kind == e.kind;
  if (same && e.kind == Kind::type) same = s.type == e.type;
  if (same && e.kind == Kind::index) {
    same = s.platform_index == e.platform && s.device_index == e.device;
  }
  if (same && e.kind == Kind::name) same = s.name == e.name;
  if (!same) {
    std::fprintf(stderr, "MISMATCH parse_selector(\"%s\"): kind %d, expected %d\n", text.c_str(),
                 static_cast<int>(s.kind), static_cast<int>(e.kind));
    std::abort();
  }
  return 0;
}
