// The quantization configurations the suites sweep, and their names.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "lowbit/quant.h"

namespace lowbit::test {

inline bool has_mins(const QuantSpec& spec) { return scheme_has_mins(spec.scheme); }
inline bool is_4bit(const QuantSpec& spec) { return scheme_bits(spec.scheme) == 4; }
inline DType code_dtype(const QuantSpec& spec) { return scheme_code_dtype(spec.scheme); }

constexpr QuantScheme kAllSchemes[] = {QuantScheme::int8_symmetric, QuantScheme::int4_asymmetric,
                                       QuantScheme::int8_asymmetric, QuantScheme::int4_symmetric};

// `schemes` x per_tensor, per_channel, per_token and per_group with G in `groups`.
inline std::vector<QuantSpec> specs_with_groups(const std::vector<QuantScheme>& schemes,
                                                std::initializer_list<std::int64_t> groups) {
  std::vector<QuantSpec> specs;
  for (QuantScheme scheme : schemes) {
    for (Granularity g : {Granularity::per_tensor, Granularity::per_channel, Granularity::per_token}) {
      specs.push_back({scheme, g, 0});
    }
    for (std::int64_t group : groups) specs.push_back({scheme, Granularity::per_group, group});
  }
  return specs;
}

// G = 48 and 1024 (and per_token past 512 columns) take the GPU's one-block-per-row kernel.
// The KV-cache schemes (int8, int4) sweep every group size; int8_asym and int4_sym share
// their kernels' code paths and sweep one group size of each kernel.
inline std::vector<QuantSpec> all_specs() {
  std::vector<QuantSpec> specs =
      specs_with_groups({QuantScheme::int8_symmetric, QuantScheme::int4_asymmetric}, {16, 32, 48, 64, 128, 1024});
  for (const QuantSpec& spec :
       specs_with_groups({QuantScheme::int8_asymmetric, QuantScheme::int4_symmetric}, {32, 48})) {
    specs.push_back(spec);
  }
  return specs;
}

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
