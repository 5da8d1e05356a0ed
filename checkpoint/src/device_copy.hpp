#pragma once
// Pinned host staging and copies for device buffers; every call throws trainrt::Error in a build
// without CUDA.
//
// Stream ordering: a copy orders after the work enqueued so far on `stream` (the user's stream
// that writes and reads the buffer; an event is recorded there and a private non-blocking copy
// stream waits for it), and returns once the copy is done, so any later work on any stream sees
// it. With `stream` == nullptr the copy waits for the whole device (cudaDeviceSynchronize): the
// safe choice when the writers' streams are unknown, never a legacy-default-stream copy that
// would race writers on non-blocking streams. The copy runs on the device that holds the buffer,
// whichever device the calling thread has current.
#include <cstddef>

namespace trainrt::checkpoint {

void* pinned_alloc(std::size_t bytes);
void pinned_free(void* p) noexcept;
void copy_device_to_host(void* host, const void* device, std::size_t bytes, void* stream = nullptr);
void copy_host_to_device(void* device, const void* host, std::size_t bytes, void* stream = nullptr);

}  // namespace trainrt::checkpoint
