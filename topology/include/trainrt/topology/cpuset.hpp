#pragma once
// A set of logical processor (PU) OS indexes, the unit Slurm, hwloc and sched_setaffinity share.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace trainrt::topo {

class CpuSet {
 public:
  CpuSet() = default;
  static CpuSet range(unsigned first, unsigned last);  // inclusive
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
  void trim();
  std::vector<std::uint64_t> words_;  // no trailing zero words, so == compares sets
};

}  // namespace trainrt::topo
