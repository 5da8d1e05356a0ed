// ckpt_xxh3: XXH3-64 of stdin as 16 hex digits, the hash trainrt pins shard headers with. The
// hostile-input suite uses it to craft shards whose manifest agrees with them, as an attacker
// who can write the directory would.
#include <xxhash.h>

#include <cstdio>
#include <vector>

int main() {
  std::vector<char> all;
  char buf[65536];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, stdin)) > 0) all.insert(all.end(), buf, buf + n);
  std::printf("%016llx\n", static_cast<unsigned long long>(XXH3_64bits(all.data(), all.size())));
  return 0;
}
