#pragma once
// Which physical GPU Slurm means. Slurm names a GPU by the number in its gres.conf device file
// (/dev/nvidia3 -> 3, in SLURM_STEP_GPUS, and in CUDA_VISIBLE_DEVICES unless devices are
// constrained); that is the driver's device minor number, which need not follow PCI bus order
// (gres.conf written by hand lists files by minor number). The NVIDIA driver publishes each GPU's
// minor number, PCI bus id and UUID under /proc/driver/nvidia/gpus: reading it identifies the GPU
// without initialising the driver or talking to any process.
#include <string>
#include <string_view>
#include <vector>

namespace trainrt::spank {

struct DriverGpu {
  int minor = -1;
  std::string busid;  // dddd:bb:dd.f, lowercase
  std::string uuid;   // GPU-xxxxxxxx-...
};

// One GPU's `information` file (the folder name is its bus id). Throws trainrt::Error on a file
// without a Device Minor line.
DriverGpu parse_driver_information(std::string_view folder_busid, std::string_view text);
// Every GPU under <proc_root>/driver/nvidia/gpus (at most 256, each file at most 16 KiB); empty when
// the folder does not exist (no NVIDIA driver, or a cached topology of another machine).
std::vector<DriverGpu> read_driver_gpus(const std::string& proc_root = "/proc");

}  // namespace trainrt::spank
