// Block-wise 4-bit weight formats: NF4 (QLoRA), MXFP4 (OCP Microscaling) and NVFP4.
// A rows x cols tensor is cut into blocks of block_size(format) consecutive values
// of a row (cols must be a multiple of it); each block stores its 4-bit codes and
// one scale, and NVFP4 adds one fp32 scale for the whole tensor. The exact
// arithmetic of each format is in src/formats/nf4.h, mxfp4.h, nvfp4.h (elements and
// scales in minifloat.h). INT4 group-wise lives in quant.h (QuantScheme::int4_*,
// Granularity::per_group).
//
// Every function dispatches on the tensors' device: all CPU views run the CPU
// reference (OpenMP over rows), all CUDA views run the kernels on `stream`; the GPU
// encoder writes the same bytes as the CPU encoder and the decoders the same bits.
// Arguments are validated first; a bad one throws lowbit::Error naming it.
//
// Storage of the encoded form (`BlockQuantizedView`):
//   codes         u8 [rows, cols / 2]: two codes per byte, low nibble first (column
//                 2j in bits 0..3, 2j + 1 in bits 4..7); row stride >= cols / 2.
//   scales        contiguous [rows * cols / block_size] (row-major over [rows, blocks]):
//                 nf4 f32 absmax; mxfp4 u8 raw E8M0; nvfp4 u8 raw E4M3 (FN).
//   global_scale  nvfp4: f32 [1]; the other formats take an empty view.
#pragma once

#include <cstddef>
#include <cstdint>

#include "lowbit/quant.h"  // NonFiniteCheck
#include "lowbit/tensor.h"

namespace lowbit {

enum class BlockFormat : std::uint8_t {
  nf4,    // 64 values per block, fp32 absmax, 16 NormalFloat levels      4.5 bits / value
  mxfp4,  // 32 values per block, E2M1 elements, E8M0 power-of-two scale 4.25 bits / value
  nvfp4,  // 16 values per block, E2M1 elements, E4M3 scale, fp32 tensor scale  4.5 bits + 32 per tensor
};

const char* block_format_name(BlockFormat format);      // "nf4" | "mxfp4" | "nvfp4"
BlockFormat parse_block_format(const char* name);       // throws on anything else
std::int64_t block_size(BlockFormat format);            // 64, 32, 16

// Shapes and bytes of the encoded form of a rows x cols tensor.
struct BlockLayout {
  std::int64_t rows = 0;
  std::int64_t block_size = 0;    // values per block
  std::int64_t code_cols = 0;     // bytes of codes per row: cols / 2
  std::int64_t blocks_per_row = 0;
  std::int64_t scale_count = 0;   // rows * blocks_per_row
  DType scale_dtype = DType::f32; // f32 (nf4) or u8 (mxfp4, nvfp4)
  std::size_t scale_bytes = 0;    // bytes of one scale: 4 or 1
  bool has_global_scale = false;  // nvfp4: one f32 per tensor

  std::size_t code_bytes() const;   // rows * code_cols
  std::size_t total_bytes() const;  // codes + scales + global scale
};

// Throws lowbit::Error unless rows >= 1, cols >= 1 and cols is a multiple of the block size.
BlockLayout block_layout(BlockFormat format, std::int64_t rows, std::int64_t cols);

// Bytes of the encoded tensor, metadata included (= block_layout(...).total_bytes()).
std::size_t block_memory_bytes(BlockFormat format, std::int64_t rows, std::int64_t cols);

struct BlockQuantizedView {
  TensorView codes;         // u8 [rows, cols / 2]
  TensorView scales;        // f32 or u8 [rows * cols / block_size], contiguous
  TensorView global_scale;  // nvfp4: f32 [1]; empty otherwise
};

// Device scratch for a GPU block_encode(): the NaN/Inf status and (nvfp4) the
// tensor's absmax. 16 bytes for every format and shape; 0 in a CPU-only build.
std::size_t block_encode_workspace_bytes(BlockFormat format, std::int64_t rows, std::int64_t cols);

// Encodes x (f32, f16 or bf16 [rows, cols], any row stride >= cols) into `out`.
// NaN or Inf in x is an error, as in quantize(): the CPU path throws naming the first
// such element (row-major order); the GPU path records it in `workspace` and, with
// NonFiniteCheck::sync_and_throw (the default), synchronizes `stream` and throws;
// with NonFiniteCheck::deferred it returns at once and check_block_encode_status()
// reports later. After such an error the contents of `out` are unspecified.
// GPU: nvfp4 runs two kernels (tensor absmax, then encode), the others one; the
// workspace is initialized on `stream` by the call itself and must not be shared by
// calls in flight on other streams.
void block_encode(const TensorView& x, BlockFormat format, const BlockQuantizedView& out,
                  const Workspace& workspace, cuda_stream_t stream,
                  NonFiniteCheck check = NonFiniteCheck::sync_and_throw);

// out (f32, f16 or bf16 [rows, cols]) = the decoded values of `in`, rounded once to
// out's dtype. Never synchronizes.
void block_decode(const BlockQuantizedView& in, BlockFormat format, const TensorView& out,
                  cuda_stream_t stream);

// For NonFiniteCheck::deferred: synchronizes `stream`, throws if the last GPU
// block_encode() that used this workspace saw NaN or Inf (naming row and column).
void check_block_encode_status(const Workspace& workspace, cuda_stream_t stream);

}  // namespace lowbit
