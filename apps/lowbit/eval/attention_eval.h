// `lowbit eval attention`: the cases, the host-side problem (weights encoded on the
// CPU from f32), the counted memory traffic of each variant, and the GPU driver.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "formats/float16.h"
#include "lowbit/quantized_attention.h"

namespace lowbit::cli {

struct EncodedWeight {
  std::int64_t rows = 0, cols = 0;
  std::vector<std::uint8_t> codes, scales;
  std::vector<float> global = {0.0f};
  BlockQuantizedView view(BlockFormat format);  // host views
};

EncodedWeight encode_weight(BlockFormat format, const std::vector<float>& w, std::int64_t rows, std::int64_t cols);

struct AttentionProblem {
  std::string name;
  AttentionConfig config;
  std::vector<formats::Half> x;
  EncodedWeight wq, wk, wv;
  std::vector<formats::Half> bq, bk, bv;  // empty: no bias
  TensorView x_view();
  AttentionWeights weights();
};

struct VariantResult {
  AttentionVariant variant = AttentionVariant::fused_two_kernel;
  // The row's name: the variant's, or the peer's (kPredequantizedPeer).
  std::string name;
  bool ran = false;
  std::string skipped;  // why not, when !ran
  double ms = 0.0;
  double attention_ms = 0.0;  // tiled_fused and ours: the attention kernel alone (0: not timed)
  double qkv_ms = 0.0;        // ours and the peer: kernel 1 (Q|K|V) alone (0: not timed)
  std::string qkv_kernel;     // which kernel 1 that was: "wgmma", "mma", "cuBLAS"
  double max_abs_error = -1.0, max_rel_error = -1.0;  // over the reference rows; < 0: not checked
  std::size_t bytes_moved = 0, peak_bytes = 0;
};

// Bytes the variant's kernels read and write in global memory, counted from their
// load and store instructions (re-reads that caches may serve included).
// kernel1_rows: the activation rows a block of ours' kernel 1 takes (128 for the mma.sync
// kernel, 256 for the wgmma one: its weights are re-read L / kernel1_rows times).
std::size_t counted_bytes(const AttentionConfig& c, AttentionVariant v, int kernel1_rows = 128);

struct GpuEvalOptions {
  std::int64_t max_naive_l = 2048, max_sequential_l = 4096;
  std::int64_t ref_rows = 0;  // query rows checked against the FP64 reference (0: none)
};

// The peer a PyTorch user has: the weights dequantized to f16 once and kept, then per call
// one cuBLAS GEMM X [Wq | Wk | Wv]^T into Q|K|V and ours' tensor-core flash kernel.
inline constexpr const char* kPredequantizedPeer = "f16 weights + cuBLAS + flash";

// Ours with the mma.sync kernel 1 forced (a row only where automatic picks wgmma).
inline constexpr const char* kOursMma = "ours, mma.sync kernel 1";

#if LOWBIT_WITH_CUDA
// Runs and times the four variants (ours with its automatic kernel 1, and where that is
// the wgmma one, once more with the mma.sync one: kOursMma), then the predequantized peer;
// the first ref_rows output rows of each are compared with `reference` ([ref_rows x H hd]).
std::vector<VariantResult> run_gpu_variants(AttentionProblem& p, const std::vector<double>& reference,
                                            const GpuEvalOptions& options);
#endif

}  // namespace lowbit::cli
