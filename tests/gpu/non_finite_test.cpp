// NaN and Inf in x on the GPU: found by the pass that computes the scales, reported
// as lowbit::Error naming where (row and column for row-local domains, the column for
// per_channel), at once or, with NonFiniteCheck::deferred, by check_quantize_status.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "common/expect_error.h"
#include "common/gpu.h"
#include "common/gpu_quant.h"
#include "common/inputs.h"
#include "common/random.h"
#include "common/specs.h"
#include "common/storage.h"
#include "lowbit/quant.h"

namespace lowbit::test {
namespace {

class NonFinite : public GpuTest {};

struct Planted {
  std::int64_t rows, cols, row, col;
};

std::string expected_location(const QuantSpec& spec, const Planted& p) {
  switch (spec.granularity) {
    case Granularity::per_tensor: return "x: contains NaN or Inf";
    case Granularity::per_channel: return "x: contains NaN or Inf in column " + std::to_string(p.col);
    default: return "x: contains NaN or Inf at row " + std::to_string(p.row) + ", column " + std::to_string(p.col);
  }
}

TEST_F(NonFinite, ReportedWithTheirLocation) {
  LOWBIT_TEST_RNG(rng);
  const float bads[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                        -std::numeric_limits<float>::infinity()};
  // 700 columns: per_token takes the one-block-per-row kernel; 300: the tiled one.
  const Planted planted[] = {{300, 700, 211, 517}, {40, 300, 17, 250}, {5, 33, 4, 32}};
  for (const Planted& p : planted) {
    const std::vector<float> clean = normal_matrix(rng, p.rows, p.cols, p.cols, Fill::constant);
    for (const DType dtype : kFloatDTypes) {
      for (const QuantSpec& spec : specs_with_groups({std::begin(kAllSchemes), std::end(kAllSchemes)}, {32, 48})) {
        const std::vector<std::uint8_t> clean_storage = to_storage(clean, dtype);
        DeviceQuantized g(clean_storage, dtype, spec, p.rows, p.cols);
        for (const float bad : bads) {
          SCOPED_TRACE(spec_name(spec) + " " + dtype_name(dtype) + " [" + std::to_string(p.rows) + "x" +
                       std::to_string(p.cols) + "] " + std::to_string(bad));
          std::vector<float> dirty = clean;
          dirty[static_cast<std::size_t>(p.row * p.cols + p.col)] = bad;
          g.set_x(to_storage(dirty, dtype));
          const std::string where = expected_location(spec, p);
          EXPECT_LOWBIT_ERROR(quantize(g.xv, spec, g.q, g.ws, nullptr), where);
          EXPECT_LOWBIT_ERROR(compute_scales(g.xv, spec, g.q, g.ws, nullptr), where);
          // Deferred: no throw (and no synchronization) at the call; the status says it.
          EXPECT_NO_THROW(quantize(g.xv, spec, g.q, g.ws, nullptr, NonFiniteCheck::deferred));
          EXPECT_LOWBIT_ERROR(check_quantize_status(g.ws, nullptr), where);
          EXPECT_NO_THROW(compute_scales(g.xv, spec, g.q, g.ws, nullptr, NonFiniteCheck::deferred));
          EXPECT_LOWBIT_ERROR(check_quantize_status(g.ws, nullptr), where);
          // A clean input afterwards resets the status.
          g.set_x(clean_storage);
          EXPECT_NO_THROW(quantize(g.xv, spec, g.q, g.ws, nullptr));
          EXPECT_NO_THROW(quantize(g.xv, spec, g.q, g.ws, nullptr, NonFiniteCheck::deferred));
          EXPECT_NO_THROW(check_quantize_status(g.ws, nullptr));
          if (HasFailure()) return;
        }
      }
    }
  }
}

}  // namespace
}  // namespace lowbit::test
