#pragma once
// A set of logical processor (PU) OS indexes, the unit Slurm, hwloc and sched_setaffinity share.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace trainrt::topo {

class CpuSet {
 public:
  // The largest supported PU index is kMaxCpus - 1: twice Linux's largest CONFIG_NR_CPUS (8192,
  // x86-64 MAXSMP). Every way into a set (set, range, the parsers) throws trainrt::Error beyond
  // it, so no text or file can make one set allocate more than kMaxCpus / 8 bytes (2 KiB), nor a
  // file of kMaxCpus one-PU cores more than about 16 MiB (a set is dense from CPU 0).
  static constexpr unsigned kMaxCpus = 1u << 14;
  // Longest text parse_list accepts: all kMaxCpus listed singly take about 90 KB.
  static constexpr std::size_t kMaxListText = 256u << 10;
  // Most 32-bit words parse_hex_mask accepts (kMaxCpus bits).
  static constexpr std::size_t kMaxMaskWords = kMaxCpus / 32;

  CpuSet() = default;
  static CpuSet range(unsigned first, unsigned last);  // inclusive; throws when last >= kMaxCpus
  // "0-5,48-53,96": the list syntax of Slurm, taskset -c and Cpus_allowed_list. Throws on bad text.
  static CpuSet parse_list(std::string_view text);
  // Comma-separated 32-bit hex words, most significant first, with or without "0x" and with empty
  // words meaning zero: the form of NCCL topology `affinity=` and of hwloc XML cpusets.
  static CpuSet parse_hex_mask(std::string_view text);

  void set(unsigned cpu);
  void reset(unsigned cpu);
  bool test(unsigned cpu) const;
  bool empty() const;
  unsigned count() const;
  std::vector<unsigned> members() const;  // ascending
  int first() const;                      // -1 when empty
  int last() const;                       // -1 when empty

  bool intersects(const CpuSet& other) const;
  bool is_subset_of(const CpuSet& other) const;
  CpuSet operator&(const CpuSet& other) const;
  CpuSet operator|(const CpuSet& other) const;
  CpuSet operator-(const CpuSet& other) const;
  CpuSet& operator|=(const CpuSet& other);
  bool operator==(const CpuSet& other) const;

  std::string to_list() const;  // "" when empty
  std::string to_hex_mask() const;  // "0x..." like Slurm's --cpu-bind=mask_cpu

 private:
  void set_range(unsigned first, unsigned last);  // inclusive, word at a time
  void trim();
  std::vector<std::uint64_t> words_;  // no trailing zero words, so == compares sets
};

}  // namespace trainrt::topo
