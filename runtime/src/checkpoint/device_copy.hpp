#pragma once
// Pinned host staging and copies for device buffers; every call throws trainrt::Error in a build
// without CUDA.
#include <cstddef>

namespace trainrt::checkpoint {

void* pinned_alloc(std::size_t bytes);
void pinned_free(void* p) noexcept;
void copy_device_to_host(void* host, const void* device, std::size_t bytes);
void copy_host_to_device(void* device, const void* host, std::size_t bytes);

}  // namespace trainrt::checkpoint
