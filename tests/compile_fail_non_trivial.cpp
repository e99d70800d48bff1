// SPDX-License-Identifier: MIT
// Must NOT compile: a DeviceBuffer element has to be copyable byte for byte. The CTest test
// CompileFail.NonTriviallyCopyableElementIsRejected builds this file and expects the library's
// static_assert to reject it.
#include <clbuf/clbuf.hpp>
#include <string>

namespace {
struct HoldsAString {
  std::string text;
};
}  // namespace

int main() {
  clbuf::DeviceBuffer<HoldsAString> buffer;
  return static_cast<int>(buffer.size());
}
