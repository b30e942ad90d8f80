// The quantization configurations the suites sweep, and their names.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "lowbit/quant.h"

namespace lowbit::test {

inline bool is_int4(const QuantSpec& spec) { return spec.scheme == QuantScheme::int4_asymmetric; }
inline DType code_dtype(const QuantSpec& spec) { return is_int4(spec) ? DType::u8 : DType::i8; }

// Both schemes x per_tensor, per_channel, per_token and per_group with G in `groups`.
inline std::vector<QuantSpec> specs_with_groups(std::initializer_list<std::int64_t> groups) {
  std::vector<QuantSpec> specs;
  for (QuantScheme scheme : {QuantScheme::int8_symmetric, QuantScheme::int4_asymmetric}) {
    for (Granularity g : {Granularity::per_tensor, Granularity::per_channel, Granularity::per_token}) {
      specs.push_back({scheme, g, 0});
    }
    for (std::int64_t group : groups) specs.push_back({scheme, Granularity::per_group, group});
  }
  return specs;
}

// G = 48 and 1024 (and per_token past 512 columns) take the GPU's one-block-per-row kernel.
inline std::vector<QuantSpec> all_specs() { return specs_with_groups({16, 32, 48, 64, 128, 1024}); }

// "int8_channel", "int4_group64": usable as a test name.
inline std::string spec_name(const QuantSpec& spec) {
  std::string name = std::string(scheme_name(spec.scheme)) + "_" + granularity_name(spec.granularity);
  if (spec.granularity == Granularity::per_group) name += std::to_string(spec.group_size);
  return name;
}

}  // namespace lowbit::test

namespace lowbit {
// gtest prints parameters with this (found by ADL) instead of a byte dump.
inline void PrintTo(const QuantSpec& spec, std::ostream* os) { *os << ::lowbit::test::spec_name(spec); }
}  // namespace lowbit
