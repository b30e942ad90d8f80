// quant_layout: the shapes of codes and parameters for every scheme and granularity.
#include <gtest/gtest.h>

#include "lowbit/quant.h"

namespace lowbit {
namespace {

TEST(QuantLayout, ShapesOfCodesAndParameters) {
  const std::int64_t T = 7, D = 37;
  struct Expected {
    QuantSpec spec;
    std::int64_t code_cols, scale_rows, scale_cols;
  };
  const Expected cases[] = {
      {{QuantScheme::int8_symmetric, Granularity::per_tensor, 0}, 37, 1, 1},
      {{QuantScheme::int8_symmetric, Granularity::per_channel, 0}, 37, 1, 37},
      {{QuantScheme::int8_symmetric, Granularity::per_token, 0}, 37, 7, 1},
      {{QuantScheme::int8_symmetric, Granularity::per_group, 16}, 37, 7, 3},
      {{QuantScheme::int4_asymmetric, Granularity::per_tensor, 0}, 19, 1, 1},
      {{QuantScheme::int4_asymmetric, Granularity::per_channel, 0}, 19, 1, 37},
      {{QuantScheme::int4_asymmetric, Granularity::per_token, 0}, 19, 7, 1},
      {{QuantScheme::int4_asymmetric, Granularity::per_group, 32}, 19, 7, 2},
      {{QuantScheme::int4_asymmetric, Granularity::per_group, 64}, 19, 7, 1},
  };
  for (const Expected& e : cases) {
    const QuantLayout layout = quant_layout(e.spec, T, D);
    SCOPED_TRACE(std::string(scheme_name(e.spec.scheme)) + " " + granularity_name(e.spec.granularity));
    EXPECT_EQ(layout.code_cols, e.code_cols);
    EXPECT_EQ(layout.scale_rows, e.scale_rows);
    EXPECT_EQ(layout.scale_cols, e.scale_cols);
    EXPECT_EQ(layout.scale_count(), e.scale_rows * e.scale_cols);
  }
  EXPECT_EQ(quant_layout({QuantScheme::int4_asymmetric, Granularity::per_token, 0}, 3, 1).code_cols, 1);
  EXPECT_EQ(quant_layout({QuantScheme::int4_asymmetric, Granularity::per_token, 0}, 3, 2).code_cols, 1);
}

}  // namespace
}  // namespace lowbit
