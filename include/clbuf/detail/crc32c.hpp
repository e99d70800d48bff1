// SPDX-License-Identifier: MIT
// CRC32C (Castagnoli, the polynomial 0x1EDC6F41, reflected 0x82F63B78; iSCSI, ext4, Btrfs), in
// software, eight bytes a step (slice-by-8: eight tables of 256 entries, made once). Checkpoints
// (checkpoint.hpp) checksum each file as its chunks pass between the device and the file.
// crc32c("123456789") == 0xE3069283, the standard check value (tests/files_test.cpp).
#ifndef CLBUF_DETAIL_CRC32C_HPP
#define CLBUF_DETAIL_CRC32C_HPP

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace clbuf {
namespace detail {

class Crc32c {
 public:
  /// Adds `bytes` of `data` to the checksum.
  void update(const void* data, std::size_t bytes) noexcept {
    const Tables& t = tables();
    const unsigned char* p = static_cast<const unsigned char*>(data);
    std::uint32_t crc = ~state_;
    while (bytes >= 8) {
      std::uint32_t low = 0;
      std::uint32_t high = 0;
      std::memcpy(&low, p, 4);  // little-endian hosts (x86-64, AArch64)
      std::memcpy(&high, p + 4, 4);
      low ^= crc;
      crc = t[7][low & 0xFF] ^ t[6][(low >> 8) & 0xFF] ^ t[5][(low >> 16) & 0xFF] ^
            t[4][low >> 24] ^ t[3][high & 0xFF] ^ t[2][(high >> 8) & 0xFF] ^
            t[1][(high >> 16) & 0xFF] ^ t[0][high >> 24];
      p += 8;
      bytes -= 8;
    }
    while (bytes-- > 0) crc = t[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
    state_ = ~crc;
  }

  /// The checksum of everything added so far.
  std::uint32_t value() const noexcept { return state_; }

  /// The checksum of `bytes` of `data` alone.
  static std::uint32_t of(const void* data, std::size_t bytes) noexcept {
    Crc32c crc;
    crc.update(data, bytes);
    return crc.value();
  }

 private:
  using Tables = std::array<std::array<std::uint32_t, 256>, 8>;

  static Tables make_tables() noexcept {
    Tables t{};
    for (std::uint32_t i = 0; i < 256; ++i) {
      std::uint32_t crc = i;
      for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ (0x82F63B78U & (0U - (crc & 1U)));
      t[0][i] = crc;
    }
    for (std::uint32_t i = 0; i < 256; ++i) {
      for (std::size_t k = 1; k < 8; ++k) t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xFF];
    }
    return t;
  }
  static const Tables& tables() noexcept {
    static const Tables made = make_tables();
    return made;
  }

  std::uint32_t state_ = 0;
};

}  // namespace detail
}  // namespace clbuf

#endif  // CLBUF_DETAIL_CRC32C_HPP
