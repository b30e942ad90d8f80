#include "engine/cpu_matmul.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <type_traits>
#include <vector>

#include "cpu/thread_pool.h"
#include "engine/cpu_kernels.h"
#include "lowbit/error.h"

namespace lowbit::engine {
namespace {

// Rows per task: a multiple of 4 (the tiles), at most ~2M multiply-adds (~0.2 ms on
// one core, what a descheduled thread can hold back) and at most 256 rows, and
// enough tasks for every thread to take several (the shares even out when a thread
// runs slower than the others).
std::int64_t rows_per_task(std::int64_t total_rows, std::int64_t n, std::int64_t k, int threads) {
  std::int64_t rows = std::min<std::int64_t>(256, std::max<std::int64_t>(4, (std::int64_t{1} << 21) / (n * k)));
  rows = std::min(rows, std::max<std::int64_t>(4, total_rows / (4 * threads)));
  return (rows + 3) / 4 * 4;
}

// Rows [r0, r0 + rows) of a block matrix times a batch of n >= kBatchTokens: each group
// of 8 rows decoded to f32 (the values the f32 form holds) and multiplied by the FP32
// tiles, so a batch computes exactly what the FP32 reference computes.
void block_rows_as_f32(const WeightMatrix& w, std::int64_t r0, std::int64_t rows, const float* x, std::int64_t n,
                       float* y, std::int64_t ldy) {
  constexpr std::int64_t kGroup = 8;
  thread_local std::vector<float> decoded;
  decoded.resize(static_cast<std::size_t>(kGroup * w.cols()));
  for (std::int64_t g = 0; g < rows; g += kGroup) {
    const std::int64_t count = std::min(kGroup, rows - g);
    for (std::int64_t i = 0; i < count; ++i) {
      w.decode_row(r0 + g + i, decoded.data() + i * w.cols());
    }
    cpu_kernels::matmul_nt(x, n, w.cols(), decoded.data(), count, y + r0 + g, ldy);
  }
}

// A decode matmul as a backed job of the pool (ThreadPool::run_backed): everything a
// task reads travels by value (the quantized input after the header) but the weights,
// so a thread that the OS descheduled in a task and that finishes it late reads no
// buffer the session has reused since; its result goes to its own buffer and only the
// first thread to finish a task copies it into y.
struct BackedMatmul {
  struct Target {
    cpu::WeightBlockType type;
    const std::uint8_t* w;  // row 0's blocks
    std::int64_t row_bytes, rows, first_task;
    float* y;
  };
  Target targets[3];
  std::int64_t count, chunk, n, k;
  // then q (n * k bytes, rounded up to 8), d and dsum (n * k / 32 floats each)

  static std::size_t bytes_for(std::int64_t n, std::int64_t k) {
    return sizeof(BackedMatmul) + static_cast<std::size_t>((n * k + 7) / 8 * 8) +
           2 * sizeof(float) * static_cast<std::size_t>(n * k / 32);
  }
  const Target& target_of(std::int64_t task, std::int64_t& r0, std::int64_t& rows) const {
    std::int64_t s = count - 1;
    while (targets[s].first_task > task) --s;
    r0 = (task - targets[s].first_task) * chunk;
    rows = std::min(chunk, targets[s].rows - r0);
    return targets[s];
  }
  static void compute(const void* job, std::int64_t task, float* out) {
    const auto& m = *static_cast<const BackedMatmul*>(job);
    // This thread's activations, filled from the job's copy.
    thread_local cpu::QuantizedActivations x;
    x.resize(m.n, m.k);
    const auto* bytes = reinterpret_cast<const std::uint8_t*>(&m + 1);
    const auto blocks = static_cast<std::size_t>(m.n * m.k / 32);
    std::memcpy(x.q.data(), bytes, static_cast<std::size_t>(m.n * m.k));
    bytes += (m.n * m.k + 7) / 8 * 8;
    std::memcpy(x.d.data(), bytes, blocks * sizeof(float));
    std::memcpy(x.dsum.data(), bytes + blocks * sizeof(float), blocks * sizeof(float));
    std::int64_t r0 = 0, rows = 0;
    const Target& t = m.target_of(task, r0, rows);
    cpu::block_matmul(t.type, t.w + r0 * t.row_bytes, t.row_bytes, rows, x, out, rows);
  }
  static void commit(const void* job, std::int64_t task, const float* out) {
    const auto& m = *static_cast<const BackedMatmul*>(job);
    std::int64_t r0 = 0, rows = 0;
    const Target& t = m.target_of(task, r0, rows);
    for (std::int64_t i = 0; i < m.n; ++i) {
      std::memcpy(t.y + i * t.rows + r0, out + i * rows, static_cast<std::size_t>(rows) * sizeof(float));
    }
  }
};
static_assert(std::is_trivially_copyable_v<BackedMatmul>);

}  // namespace

void matmul(const float* x, std::int64_t n, std::int64_t k, std::initializer_list<MatmulTarget> targets,
            cpu::QuantizedActivations& scratch) {
  LOWBIT_CHECK(n > 0 && k > 0, "matmul: n = ", n, ", k = ", k);
  cpu::ThreadPool& pool = cpu::engine_pool();
  bool any_blocks = false;
  std::int64_t total_rows = 0;
  for (const MatmulTarget& t : targets) {
    LOWBIT_CHECK(t.w->cols() == k, "matmul: a matrix of ", t.w->cols(), " columns for inputs of ", k);
    any_blocks = any_blocks || t.w->holds_blocks();
    total_rows += t.w->rows();
  }
  // Decode and short batches: 8-bit activations and integer dot products. Long batches
  // are bound by arithmetic, where one FMA does 16 multiply-adds and the integer route
  // needs ~4 instructions (product, conversion, scale, sum) per 32: there the rows are
  // decoded to f32 once per batch instead (1.3x the 8-bit route's rate at 64 tokens).
  const bool as_f32 = n >= kBatchTokens;
  if (any_blocks && !as_f32) {
    scratch.resize(n, k);
    const std::int64_t rows_each = std::max<std::int64_t>(1, 4096 / k);
    pool.run((n + rows_each - 1) / rows_each, [&](std::int64_t i) {
      const std::int64_t first = i * rows_each;
      cpu::quantize_activation_rows(x, first, std::min(rows_each, n - first), scratch);
    });
  }
  const std::int64_t chunk = rows_per_task(total_rows, n, k, pool.threads());
  struct Span {
    const MatmulTarget* target;
    std::int64_t first_task;
  };
  std::vector<Span> spans;
  std::int64_t tasks = 0;
  for (const MatmulTarget& t : targets) {
    spans.push_back({&t, tasks});
    tasks += (t.w->rows() + chunk - 1) / chunk;
  }
  const std::size_t job_bytes = BackedMatmul::bytes_for(n, k);
  const bool all_blocks = std::all_of(targets.begin(), targets.end(),
                                      [](const MatmulTarget& t) { return t.w->holds_blocks(); });
  if (all_blocks && !as_f32 && targets.size() <= 3 && pool.threads() > 1 &&
      cpu::ThreadPool::backed_fits(tasks, job_bytes)) {
    thread_local std::vector<std::uint64_t> words;
    words.resize((job_bytes + 7) / 8);
    auto* job = new (words.data()) BackedMatmul{};
    job->count = static_cast<std::int64_t>(spans.size());
    job->chunk = chunk;
    job->n = n;
    job->k = k;
    for (std::size_t s = 0; s < spans.size(); ++s) {
      const WeightMatrix& w = *spans[s].target->w;
      job->targets[s] = {w.block_type(), w.row_blocks(0), w.row_bytes(), w.rows(), spans[s].first_task,
                         spans[s].target->y};
    }
    auto* bytes = reinterpret_cast<std::uint8_t*>(job + 1);
    const auto blocks = static_cast<std::size_t>(n * k / 32);
    std::memcpy(bytes, scratch.q.data(), static_cast<std::size_t>(n * k));
    bytes += (n * k + 7) / 8 * 8;
    std::memcpy(bytes, scratch.d.data(), blocks * sizeof(float));
    std::memcpy(bytes + blocks * sizeof(float), scratch.dsum.data(), blocks * sizeof(float));
    pool.run_backed(tasks, job, job_bytes, n * chunk, &BackedMatmul::compute, &BackedMatmul::commit);
    return;
  }
  pool.run(tasks, [&](std::int64_t task) {
    std::size_t s = spans.size() - 1;
    while (spans[s].first_task > task) --s;
    const MatmulTarget& t = *spans[s].target;
    const std::int64_t r0 = (task - spans[s].first_task) * chunk;
    const std::int64_t rows = std::min(chunk, t.w->rows() - r0);
    const std::int64_t ldy = t.w->rows();
    if (t.w->holds_blocks() && as_f32) {
      block_rows_as_f32(*t.w, r0, rows, x, n, t.y, ldy);
    } else if (t.w->holds_blocks()) {
      cpu::block_matmul(t.w->block_type(), t.w->row_blocks(r0), t.w->row_bytes(), rows, scratch, t.y + r0, ldy);
    } else {
      cpu_kernels::matmul_nt(x, n, k, t.w->f32().data() + r0 * k, rows, t.y + r0, ldy);
    }
  });
}

}  // namespace lowbit::engine
