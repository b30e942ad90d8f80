// When the CPU library's OpenMP regions start a thread team (issue 6). A parallel
// region costs a fork and a join of the team whatever its size (3-5 us a region seen
// from Python on the 2-core development VM), so a call on a small tensor, whose work
// takes well under a microsecond, paid several microseconds for threads it did not
// need. Each region is written as
//
//   parallel_region(parallel_worth(rows, ns_per_row), [&] {
//     ...per-thread scratch...
//   #pragma omp for schedule(static)
//     for (std::int64_t r = 0; r < rows; ++r) ...
//   });
//
// and gets a team only when its estimated serial time (loop items times a cost per
// item measured single-threaded) is worth one. Otherwise the body runs on the calling
// thread as a plain call: its orphaned `omp for` then covers the whole range on that
// thread. The loops split independent rows (or merge per-thread partial results with
// max / min, which do not depend on the order), so both ways give the same bits.
#pragma once

#include <omp.h>

#include <cstdint>
#include <utility>

namespace lowbit::cpu {

// Estimated serial nanoseconds below which a region runs on the calling thread. A team
// of P threads saves at most t * (1 - 1/P) of a region's serial time t and costs a fork
// and a join; on the 2-core development VM the measured crossovers (quantize,
// dequantize, int8 GEMM called from Python with OMP_NUM_THREADS 1 and 2) lie at about
// 10 us of serial work. bench/NOTES.md ("Issue 6, CPU floors") has the numbers.
inline constexpr double kParallelMinNs = 10000.0;

// Whether `items` loop iterations of about `ns_each` nanoseconds each (on one core)
// are worth a thread team.
inline bool parallel_worth(std::int64_t items, double ns_each) {
  return static_cast<double>(items) * ns_each >= kParallelMinNs;
}

// Runs `region` (a callable whose loops are orphaned `#pragma omp for` constructs) in
// an OpenMP parallel region when `parallel`, else as a plain call. `#pragma omp
// parallel if (false)` would also run it on one thread, but still makes a team of one
// (~0.45 us a region, measured); a plain call costs nothing. Inside an enclosing
// parallel region the orphaned loops would bind to that region's team, so there the
// region is always its own (nested, as before this helper) team.
template <class Region>
void parallel_region(bool parallel, Region&& region) {
  if (parallel || omp_in_parallel()) {
#pragma omp parallel if (parallel)
    region();
  } else {
    std::forward<Region>(region)();
  }
}

}  // namespace lowbit::cpu
