#pragma once
// Where a buffer lives, for every API that takes one: the gradient bucketer's buckets, the
// checkpoint manager's registered buffers. One idea, one enum.
namespace trainrt {

enum class Memory { Host, Device };

}  // namespace trainrt
