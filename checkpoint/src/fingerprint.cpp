#include "fingerprint.hpp"

#include <cstring>

#include "xxh3.hpp"

namespace trainrt::checkpoint::fingerprint {
namespace {

using u64 = std::uint64_t;
__extension__ typedef unsigned __int128 u128;  // GCC and Clang; -Wpedantic knows it only by this spelling

// To below 2^61 + 8 (congruent mod p): small enough that the next product fits 128 bits.
inline u64 partial(u128 x) {
  const u64 t = (static_cast<u64>(x) & kPrime) + static_cast<u64>(x >> 61);
  return (t & kPrime) + (t >> 61);
}
inline u64 partial64(u64 x) { return (x & kPrime) + (x >> 61); }
inline u64 full(u64 x) {
  x = partial64(x);
  return x >= kPrime ? x - kPrime : x;
}
inline u64 load(const unsigned char* p) {
  u64 w;
  std::memcpy(&w, p, 8);  // data of any alignment
  return w;
}

// sum over k < n of word(k) * r^k for n whole words, by Horner's rule on four interleaved lanes
// (lane l holds the words k = 4j + l and steps by r^4), so four multiplications are in flight.
u64 words(const Powers& pw, const unsigned char* bytes, u64 n) {
  const u64 r = pw.r(), r2 = mul(r, r), r3 = mul(r2, r), r4 = mul(r2, r2);
  const u64 blocks = n / 4;
  u64 a0 = 0, a1 = 0, a2 = 0, a3 = 0;  // each < 2^62 between steps
  for (u64 j = blocks; j-- > 0;) {
    const unsigned char* p = bytes + 32 * j;
    a0 = partial(static_cast<u128>(a0) * r4) + partial64(load(p));
    a1 = partial(static_cast<u128>(a1) * r4) + partial64(load(p + 8));
    a2 = partial(static_cast<u128>(a2) * r4) + partial64(load(p + 16));
    a3 = partial(static_cast<u128>(a3) * r4) + partial64(load(p + 24));
  }
  u64 sum = add(add(full(a0), mul(r, full(a1))), add(mul(r2, full(a2)), mul(r3, full(a3))));
  u64 power = pw.pow(4 * blocks);
  for (u64 k = 4 * blocks; k < n; ++k) {
    sum = add(sum, mul(full(load(bytes + 8 * k)), power));
    power = mul(power, r);
  }
  return sum;
}

// The bytes [from, from + n) of word m (0 < n, from + n <= 8), the others zero, times r^m.
u64 part_word(const Powers& pw, const unsigned char* data, unsigned from, unsigned n, u64 m) {
  unsigned char w[8] = {};
  std::memcpy(w + from, data, n);
  return mul(full(load(w)), pw.pow(m));
}

}  // namespace

u64 add(u64 a, u64 b) {
  const u64 s = a + b;  // < 2^62
  return s >= kPrime ? s - kPrime : s;
}
u64 mul(u64 a, u64 b) { return full(partial(static_cast<u128>(a) * b)); }

u64 point_for(std::string_view tensor_name) {
  // A fixed seed: the fingerprint is a function of the name and the content alone, so any
  // program, world size or tool recomputes it.
  constexpr u64 kSeed = 0x74726e7274667031ull;  // "trnrtfp1"
  return XXH3_64bits_withSeed(tensor_name.data(), tensor_name.size(), kSeed) % (kPrime - 2) + 2;
}

Powers::Powers(u64 r) {
  squares_[0] = r;
  for (int i = 1; i < 64; ++i) squares_[i] = mul(squares_[i - 1], squares_[i - 1]);
}

u64 Powers::pow(u64 e) const {
  u64 result = 1;
  for (int i = 0; e; ++i, e >>= 1)
    if (e & 1) result = mul(result, squares_[i]);
  return result;
}

u64 run(const Powers& powers, const void* data, u64 bytes, u64 first_byte) {
  const auto* p = static_cast<const unsigned char*>(data);
  u64 sum = 0, at = first_byte;
  if (const unsigned head = static_cast<unsigned>(at % 8); head != 0 && bytes > 0) {
    const unsigned n = static_cast<unsigned>(std::min<u64>(8 - head, bytes));
    sum = part_word(powers, p, head, n, at / 8);
    p += n, at += n, bytes -= n;
  }
  if (const u64 whole = bytes / 8; whole > 0) {
    sum = add(sum, mul(words(powers, p, whole), powers.pow(at / 8)));
    p += 8 * whole, at += 8 * whole, bytes -= 8 * whole;
  }
  if (bytes > 0) sum = add(sum, part_word(powers, p, 0, static_cast<unsigned>(bytes), at / 8));
  return sum;
}

}  // namespace trainrt::checkpoint::fingerprint
