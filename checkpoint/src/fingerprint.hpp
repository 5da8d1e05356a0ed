#pragma once
// The content fingerprint of a global tensor, the same whichever ranks hold which chunks: a
// polynomial over the prime field p = 2^61 - 1,
//
//   F = sum over m of (c_m mod p) * r^m  (mod p),
//
// where c_m is the little-endian 64-bit word at bytes [8m, 8m + 8) of the tensor's bytes in
// global row-major order (the last word zero-padded) and r is derived from the tensor's name
// (2 <= r < p). F is linear in every byte, so a chunk contributes the terms of the bytes it holds
// (a word cut by a chunk boundary contributes each side's bytes at their place in the word), the
// partial sums of any split add up (mod p) to the same F, and each rank computes its part for one
// small exchange to combine.
//
// What it detects (docs/checkpoint.md "Content fingerprint"): restored content that differs from
// the saved content in one element of up to 4 bytes, or by one flipped bit anywhere, is detected
// with certainty (the difference d * 2^k * r^m is not 0 mod p: |d| < 2^32 < p and r != 0); any
// other difference (chunks at wrong offsets, a dropped chunk, many corrupted words) goes
// undetected only when r is a root of the difference polynomial: at most n of the p - 2 possible
// r for a tensor of n words, so with probability <= n / 2^61 for an error that does not depend on
// r (<= 2^-32 for 4 GiB).
#include <cstdint>
#include <string_view>


namespace trainrt::checkpoint::fingerprint {

constexpr std::uint64_t kPrime = (std::uint64_t{1} << 61) - 1;

// r for a tensor of this name.
std::uint64_t point_for(std::string_view tensor_name);

// Powers of r by repeated squaring, for the start of each run.
class Powers {
 public:
  // Words summed as a block against r^0..r^(kBlockWords - 1), no chain between them (run()).
  static constexpr unsigned kBlockWords = 32;
  explicit Powers(std::uint64_t r);
  std::uint64_t r() const { return squares_[0]; }
  std::uint64_t pow(std::uint64_t e) const;               // r^e mod p
  const std::uint64_t* block() const { return block_; }   // r^i, i < kBlockWords
  std::uint64_t block_step() const { return block_step_; }  // r^kBlockWords

 private:
  std::uint64_t squares_[64];  // r^(2^i)
  std::uint64_t block_[kBlockWords];
  std::uint64_t block_step_;
};

// The terms of `bytes` bytes at `data` that sit at global byte offset `first_byte` of the tensor.
// Result < p.
std::uint64_t run(const Powers& powers, const void* data, std::uint64_t bytes, std::uint64_t first_byte);

std::uint64_t add(std::uint64_t a, std::uint64_t b);  // (a + b) mod p, for a, b < p
std::uint64_t mul(std::uint64_t a, std::uint64_t b);  // (a * b) mod p, for a, b < p

}  // namespace trainrt::checkpoint::fingerprint
