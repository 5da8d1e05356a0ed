#pragma once
// XXH3 from libxxhash. Debian's x86-64 build also exports the runtime-dispatched (AVX2/AVX-512)
// entry points; with them hashing a shard costs a quarter of reading it instead of most of it.
// Both compute the same XXH3 values, so files stay readable by either build.
#include <xxhash.h>
#if defined(TRAINRT_XXH3_DISPATCH)
#include <xxh_x86dispatch.h>  // maps XXH3_64bits* onto the *_dispatch symbols
#endif
