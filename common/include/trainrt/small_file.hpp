#pragma once
// The one reader of small kernel files (procfs, sysfs) that every module shares.
#include <cstddef>
#include <optional>
#include <string>

namespace trainrt {

// Whether the last component of the path may be a symbolic link. sysfs answers through links
// (/sys/class/dmi/id, /sys/class/infiniband/<dev>), so readers of sysfs must follow them; a reader
// of a fixed /proc file has no reason to and refuses them.
enum class LastLink { follow, refuse };

// At most `max_bytes` from the start of the file, read until end of file or the cap (procfs can
// hand a file over in several reads). Opened non-blocking, so a FIFO put in a file's place cannot
// hang the caller. nullopt when the file cannot be opened or a read fails.
std::optional<std::string> read_small_file(const std::string& path, std::size_t max_bytes, LastLink link);

}  // namespace trainrt
