// Manager: registration and the synchronous half of save() (the copy into staging). The commit
// protocol lives in commit.cpp, restore in restore.cpp, the on-disk format in shard_format.hpp.
#include "trainrt/checkpoint/manager.hpp"

#include <fmt/format.h>

#include <cstdlib>

#include <limits>

#include "geometry.hpp"
#include "manager_impl.hpp"
#include "trainrt/error.hpp"
#include "trainrt/kernels/cpu.hpp"

namespace trainrt::checkpoint {
namespace {

void check_name(const std::string& name, const std::vector<Entry>& entries) {
  if (name.empty() || name.size() > format::kMaxNameBytes || !format::valid_utf8(name))
    throw UsageError(fmt::format("an entry name must be 1 to {} bytes of UTF-8", format::kMaxNameBytes), "checkpoint");
  for (const auto& e : entries)
    if (e.name == name) throw UsageError(fmt::format("'{}' is registered twice", name), "checkpoint");
}

}  // namespace

Manager::Impl::Impl(bootstrap::Session& s, Options o) : session(s), opts(std::move(o)) {}

Manager::Manager(bootstrap::Session& session, Options options)
    : impl_(std::make_unique<Impl>(session, std::move(options))) {
  if (impl_->opts.directory.empty()) throw UsageError("no checkpoint directory given", "checkpoint");
  // Opened once, without following a symlink; every later access goes through this descriptor.
  impl_->root = Dir::open_or_create(impl_->opts.directory);
  impl_->open_tier();
  if (const char* restarts = std::getenv("SLURM_RESTART_COUNT"))
    impl_->log(fmt::format("checkpoint: SLURM_RESTART_COUNT={} (rank {})", restarts, session.rank()));
}

Manager::~Manager() { impl_->join(); }

void Manager::register_buffer(const std::string& name, void* data, std::size_t bytes, DType dtype,
                              std::vector<std::int64_t> shape, Sharding sharding, Location where, void* stream) {
  if (sharding == Sharding::Sharded)
    throw UsageError(fmt::format("'{}': a sharded buffer is registered with its Shard (global shape and offsets)", name),
                     "checkpoint");
  impl_->add_buffer(name, data, bytes, dtype, std::move(shape), sharding, where, stream, std::nullopt);
}

void Manager::register_buffer(const std::string& name, void* data, std::size_t bytes, DType dtype,
                              std::vector<std::int64_t> shape, const Shard& shard, Location where, void* stream) {
  const geometry::Box box{shard.offsets, shape};
  if (std::string why = geometry::check_inside(box, shard.global_shape); !why.empty())
    throw UsageError(fmt::format("'{}': {}", name, why), "checkpoint");
  if (shard.global_shape.size() > format::kMaxDims)
    throw UsageError(fmt::format("'{}' has {} dimensions, more than {}", name, shard.global_shape.size(), format::kMaxDims),
                     "checkpoint");
  const std::uint64_t elements = *geometry::volume(shape);
  if (elements > std::numeric_limits<std::size_t>::max() / size_of(dtype) || bytes != elements * size_of(dtype))
    throw UsageError(fmt::format("'{}' is {} bytes; its chunk of shape {} holds {} elements of {}", name, bytes,
                                 geometry::to_string(shape), elements, to_string(dtype)),
                     "checkpoint");
  impl_->add_buffer(name, data, bytes, dtype, std::move(shape), Sharding::Sharded, where, stream,
                    format::Sharded{shard.global_shape, shard.offsets});
}

void Manager::Impl::add_buffer(const std::string& name, void* data, std::size_t bytes, DType dtype,
                               std::vector<std::int64_t> shape, Sharding sharding, Location where, void* stream,
                               std::optional<format::Sharded> shard) {
  check_name(name, entries);
  if (bytes > 0 && !data) throw UsageError(fmt::format("'{}': a null buffer of {} bytes", name, bytes), "checkpoint");
  if (bytes > opts.staging_cap_bytes - std::min(staged_bytes, opts.staging_cap_bytes))
    throw UsageError(fmt::format("registering '{}' ({} bytes) exceeds the staging cap of {} bytes", name, bytes,
                                 opts.staging_cap_bytes),
                     "checkpoint");
  if (bytes % size_of(dtype) != 0)
    throw UsageError(fmt::format("'{}' is {} bytes, not a whole number of {} elements", name, bytes, to_string(dtype)),
                     "checkpoint");
  if (shape.size() > format::kMaxDims)
    throw UsageError(fmt::format("'{}' has {} dimensions, more than {}", name, shape.size(), format::kMaxDims), "checkpoint");
  join();
  Entry e{name, data, nullptr, bytes, dtype, std::move(shape), sharding, 0, nullptr, stream, std::move(shard)};
  staged_bytes += bytes;
  if (where == Location::Device) {
    e.pinned = pinned_alloc(bytes);
  } else {
    e.staging_offset = align_up(staging_end, 64);
    staging_end = e.staging_offset + bytes;
    staging.resize(align_up(staging_end, kPage));
  }
  entries.push_back(std::move(e));
  ++registrations;
}

void Manager::register_blob(const std::string& name, std::vector<std::uint8_t>* blob, Sharding sharding) {
  check_name(name, impl_->entries);
  if (sharding == Sharding::Sharded)
    throw UsageError(fmt::format("'{}': a blob cannot be sharded (register a buffer with a Shard)", name), "checkpoint");
  if (!blob) throw UsageError(fmt::format("'{}': a null blob", name), "checkpoint");
  impl_->join();
  Entry e;
  e.name = name;
  e.blob = blob;
  e.dtype = DType::I32;
  e.sharding = sharding;
  impl_->entries.push_back(std::move(e));
  ++impl_->registrations;
}

std::shared_future<SaveResult> Manager::save(std::uint64_t step, Metadata metadata) {
  return impl_->start_save(step, std::move(metadata), true);
}

std::shared_future<SaveResult> Manager::snapshot(std::uint64_t step, Metadata metadata) {
  if (!impl_->opts.memory_tier.enabled)
    throw UsageError("snapshot() keeps state in the memory tier, which is not enabled (Options::memory_tier)", "checkpoint");
  return impl_->start_save(step, std::move(metadata), false);
}

std::shared_future<SaveResult> Manager::Impl::start_save(std::uint64_t step, Metadata metadata, bool to_disk) {
  const auto t0 = Clock::now();
  // Refused here, before anything is staged: what readers would refuse must not be written.
  if (step > format::kMaxStep)
    throw UsageError(fmt::format("step {} is above the largest step {}", step, format::kMaxStep), "checkpoint");
  if (std::string why = format::check_metadata(metadata); !why.empty()) throw UsageError(why, "checkpoint");
  for (const auto& e : entries)
    if (e.blob && e.blob->size() > format::kMaxBlobBytes)
      throw UsageError(fmt::format("blob '{}' is {} bytes, more than the {}-byte limit", e.name, e.blob->size(),
                                   format::kMaxBlobBytes),
                       "checkpoint");
  join();  // one save in flight at a time; waiting for it counts as stall
  prepare_tier_staging();  // renames and, once, maps: the copy below then lands in the tier file
  // The stall: copy registered state into the reused staging buffers.
  blob_staging.clear();
  for (const auto& e : entries) {
    if (e.pinned) {
      copy_device_to_host(e.pinned, e.data, e.bytes, e.stream);
    } else if (!e.blob) {
      // The bucket-pack kernel's CPU twin: staging is one flat bucket of every registered buffer.
      kernels::ConstTensorRef ref{e.data, e.bytes / size_of(e.dtype)};
      kernels::cpu::pack(&ref, 1, e.dtype, staging.data() + e.staging_offset);
    } else {
      blob_staging.push_back(*e.blob);
    }
  }
  const double stall = std::chrono::duration<double>(Clock::now() - t0).count();
  auto promise = std::make_shared<std::promise<SaveResult>>();
  last = promise->get_future().share();
  writer = std::thread([this, step, stall, promise, t0, to_disk, metadata = std::move(metadata)] {
    persist(step, stall, t0, metadata, promise, to_disk);
  });
  return last;
}

const std::string& Manager::directory() const { return impl_->opts.directory; }
bootstrap::Session& Manager::session() const { return impl_->session; }
void Manager::wait_idle() { impl_->join(); }
const Metadata& Manager::restored_metadata() const { return impl_->restored_metadata; }
const RestoreReport& Manager::last_restore() const { return impl_->report; }
const std::string& Manager::memory_tier_off() const {
  impl_->join();  // the background mapping after a restore may still turn the tier off
  return impl_->tier.off;
}

}  // namespace trainrt::checkpoint
