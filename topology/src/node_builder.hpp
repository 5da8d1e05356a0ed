#pragma once
// Helpers both loaders share to turn raw device lists into a consistent Node.
#include <cstdint>
#include <string>

#include "trainrt/topology/node.hpp"

namespace trainrt::topo {

std::string format_busid(unsigned domain, unsigned bus, unsigned dev, unsigned func);
// Lower-cases and pads "0:3:0.0"-like text to dddd:bb:dd.f; returns "" when it is not a bus id.
std::string normalize_busid(const std::string& text);

bool is_gpu_pci(std::uint16_t vendor, std::uint16_t class_id);
bool is_network_pci(std::uint16_t class_id);

// Sorts NUMA nodes, cores, GPUs and NICs into their documented orders and numbers GPUs and NICs.
void finalize_node(Node& node);

}  // namespace trainrt::topo
