// When the CPU library's OpenMP regions start a thread team. A parallel
// region costs a fork and a join of the team whatever its size (3-5 us a region seen
// from Python on the 2-core development VM; more with more threads), so a call on a
// small tensor, whose work takes well under a microsecond, paid several microseconds
// for threads it did not need. Every region of src/cpu carries
//
//   #pragma omp parallel if (parallel_worth(rows, ns_per_row))
//
// and gets a team only when its estimated serial time (loop items times a cost per item
// measured single-threaded) is worth one; otherwise it runs on the calling thread (a
// team of one: 0.45 us a region in a C++ loop, ~1 us seen from Python). The loops split
// independent rows (or merge per-thread partial results with max / min, which do not
// depend on the order), so both ways give the same bits.
//
// A plain call of the region's body instead of a team of one (a lambda holding orphaned
// `omp for` loops) was tried and dropped: its captured-by-reference variables made GCC
// reload them after every byte store and stop vectorizing (per-channel quantize of
// 262144 values 4x slower single-threaded). A plain call would need each region's body
// in a function of its own (bench/notes/python_overhead.md, "CPU floors").
#pragma once

#include <cstdint>

namespace lowbit::cpu {

// Estimated serial nanoseconds below which a region runs on the calling thread. A team
// of P threads saves at most t * (1 - 1/P) of a region's serial time t and costs a fork
// and a join; on the 2-core development VM the measured crossovers (quantize,
// dequantize, int8 GEMM called from Python with OMP_NUM_THREADS 1 and 2) lie at about
// 10 us of serial work. bench/notes/python_overhead.md ("CPU floors") has the numbers.
inline constexpr double kParallelMinNs = 10000.0;

// Whether `items` loop iterations of about `ns_each` nanoseconds each (on one core)
// are worth a thread team.
inline bool parallel_worth(std::int64_t items, double ns_each) {
  return static_cast<double>(items) * ns_each >= kParallelMinNs;
}

}  // namespace lowbit::cpu
