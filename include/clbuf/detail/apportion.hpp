// SPDX-License-Identifier: MIT
// Splits a count of units in proportion to weights (Partition::weighted) by largest remainders,
// in exact integer arithmetic: every finite weight >= 0 is an integer times a power of two, so
// the shares units * w_i / sum(w) are compared and rounded exactly, whatever the weights' range
// (1e308 beside 1e-308 and denormals) and whatever the count (up to the largest std::size_t).
#ifndef CLBUF_DETAIL_APPORTION_HPP
#define CLBUF_DETAIL_APPORTION_HPP

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <vector>

namespace clbuf {
namespace detail {

/// A natural number of any size in 32-bit limbs, lowest first, without high zero limbs: only
/// the operations apportion() needs. Pure arithmetic.
class Natural {
 public:
  Natural() = default;

  /// `mantissa` * 2^`shift`.
  static Natural shifted(std::uint64_t mantissa, std::size_t shift) {
    Natural out;
    out.limbs_.reserve(shift / 32 + 3);
    out.limbs_.assign(shift / 32, 0);
    const unsigned bits = static_cast<unsigned>(shift % 32);
    std::uint64_t carry = 0;
    for (int i = 0; i < 3; ++i) {
      const std::uint64_t low = (mantissa & 0xffffffffu) << bits;
      out.limbs_.push_back(static_cast<std::uint32_t>(low + carry));
      carry = (low + carry) >> 32;
      mantissa >>= 32;
    }
    out.trim();
    return out;
  }

  void add(const Natural& other) {
    if (limbs_.size() < other.limbs_.size()) limbs_.resize(other.limbs_.size(), 0);
    std::uint64_t carry = 0;
    for (std::size_t i = 0; i < limbs_.size(); ++i) {
      carry += limbs_[i];
      if (i < other.limbs_.size()) carry += other.limbs_[i];
      limbs_[i] = static_cast<std::uint32_t>(carry);
      carry >>= 32;
    }
    if (carry != 0) limbs_.push_back(static_cast<std::uint32_t>(carry));
  }

  /// This times `factor`.
  Natural times(std::uint64_t factor) const {
    Natural out;
    out.limbs_.assign(limbs_.size() + 2, 0);
    const std::uint64_t halves[2] = {factor & 0xffffffffu, factor >> 32};
    for (std::size_t h = 0; h < 2; ++h) {
      std::uint64_t carry = 0;
      for (std::size_t i = 0; i < limbs_.size(); ++i) {
        carry += out.limbs_[i + h] + halves[h] * limbs_[i];  // < 2^64: (2^32-1)^2 + 2 (2^32-1)
        out.limbs_[i + h] = static_cast<std::uint32_t>(carry);
        carry >>= 32;
      }
      for (std::size_t i = limbs_.size() + h; carry != 0; ++i) {
        carry += out.limbs_[i];
        out.limbs_[i] = static_cast<std::uint32_t>(carry);
        carry >>= 32;
      }
    }
    out.trim();
    return out;
  }

  /// -1, 0 or 1 as this is below, equal to or above `other` * 2^`shift`.
  int compare(const Natural& other, std::size_t shift = 0) const {
    const std::size_t top = std::max(limbs_.size(), other.limbs_.size() + shift / 32 + 1);
    for (std::size_t i = top; i-- > 0;) {
      const std::uint32_t mine = limb(i);
      const std::uint32_t theirs = other.shifted_limb(i, shift);
      if (mine != theirs) return mine < theirs ? -1 : 1;
    }
    return 0;
  }

  /// Subtracts `other` * 2^`shift`, which is not above this.
  void subtract(const Natural& other, std::size_t shift = 0) {
    std::int64_t borrow = 0;
    for (std::size_t i = 0; i < limbs_.size(); ++i) {
      std::int64_t value = static_cast<std::int64_t>(limbs_[i]) -
                           static_cast<std::int64_t>(other.shifted_limb(i, shift)) - borrow;
      borrow = value < 0 ? 1 : 0;
      if (value < 0) value += std::int64_t{1} << 32;
      limbs_[i] = static_cast<std::uint32_t>(value);
    }
    trim();
  }

  /// Divides by `divisor` (not 0) when the quotient is below 2^64: returns the quotient and
  /// leaves the remainder in this.
  std::uint64_t divide(const Natural& divisor) {
    std::uint64_t quotient = 0;
    if (bits() < divisor.bits()) return 0;
    // divisor * 2^bit has more bits than this above that: those quotient bits are 0
    for (std::size_t bit = std::min<std::size_t>(63, bits() - divisor.bits()) + 1; bit-- > 0;) {
      if (compare(divisor, bit) >= 0) {
        subtract(divisor, bit);
        quotient |= std::uint64_t{1} << bit;
      }
    }
    return quotient;
  }

 private:
  /// How many bits this has (0 for 0).
  std::size_t bits() const {
    if (limbs_.empty()) return 0;
    std::size_t count = 32 * (limbs_.size() - 1);
    for (std::uint32_t top = limbs_.back(); top != 0; top >>= 1) ++count;
    return count;
  }

  std::uint32_t limb(std::size_t i) const { return i < limbs_.size() ? limbs_[i] : 0; }

  /// Limb i of this * 2^shift.
  std::uint32_t shifted_limb(std::size_t i, std::size_t shift) const {
    const std::size_t whole = shift / 32;
    const unsigned bits = static_cast<unsigned>(shift % 32);
    if (i < whole) return 0;
    const std::uint32_t high = limb(i - whole);
    if (bits == 0) return high;
    const std::uint32_t low = i > whole ? limb(i - whole - 1) : 0;
    return static_cast<std::uint32_t>((high << bits) | (low >> (32 - bits)));
  }

  void trim() {
    while (!limbs_.empty() && limbs_.back() == 0) limbs_.pop_back();
  }

  std::vector<std::uint32_t> limbs_;
};

/// Exact integers in proportion to `weights` (finite, >= 0, one > 0): weight i is
/// mantissa_i * 2^(exponent_i - lowest), lowest the least exponent of a weight > 0.
inline std::vector<Natural> exact_weights(const std::vector<double>& weights) {
  constexpr int digits = 64;  // mantissas as 64-bit integers: exact for every double
  int lowest = 0;
  bool any = false;
  std::vector<int> exponents(weights.size(), 0);
  std::vector<std::uint64_t> mantissas(weights.size(), 0);
  for (std::size_t i = 0; i < weights.size(); ++i) {
    if (!(weights[i] > 0)) continue;
    const double fraction = std::frexp(weights[i], &exponents[i]);  // in [0.5, 1)
    mantissas[i] = static_cast<std::uint64_t>(std::ldexp(fraction, digits));
    // odd mantissas: small weights such as {2, 1} become the integers {2, 1}, not 65-bit ones
    for (; (mantissas[i] & 1) == 0; mantissas[i] >>= 1) ++exponents[i];
    lowest = any ? std::min(lowest, exponents[i]) : exponents[i];
    any = true;
  }
  std::vector<Natural> out(weights.size());
  for (std::size_t i = 0; i < weights.size(); ++i) {
    if (mantissas[i] != 0) {
      out[i] = Natural::shifted(mantissas[i], static_cast<std::size_t>(exponents[i] - lowest));
    }
  }
  return out;
}

/// `units` split in proportion to `weights` (finite, >= 0, one > 0): part i is the whole part
/// of its exact share units * w_i / sum(w), and the units those leave (fewer than the weights)
/// go one each to the largest exact remainders, the lower index first on a tie. So the parts
/// sum to `units`, each is its share rounded down or up, a weight of 0 gets 0, equal weights
/// get parts at most 1 apart and a larger weight never gets a smaller part.
inline std::vector<std::size_t> apportion(std::size_t units, const std::vector<double>& weights) {
  const std::vector<Natural> exact = exact_weights(weights);
  Natural total;
  for (const Natural& weight : exact) total.add(weight);
  std::vector<std::size_t> parts(weights.size(), 0);
  std::vector<Natural> rests(weights.size());
  std::size_t given = 0;
  for (std::size_t i = 0; i < weights.size(); ++i) {
    if (!(weights[i] > 0)) continue;
    rests[i] = exact[i].times(units);
    parts[i] = static_cast<std::size_t>(rests[i].divide(total));  // <= units: w_i <= sum(w)
    given += parts[i];
  }
  std::vector<std::size_t> order(weights.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&rests](std::size_t a, std::size_t b) {
    return rests[a].compare(rests[b]) > 0;
  });
  // The remainders sum to (units - given) * sum(w), each below sum(w): so fewer than the
  // weights are left, and each goes to a weight > 0 (a weight of 0 has remainder 0).
  for (std::size_t k = 0; given < units; ++k, ++given) ++parts[order[k]];
  return parts;
}

}  // namespace detail
}  // namespace clbuf

#endif  // CLBUF_DETAIL_APPORTION_HPP
