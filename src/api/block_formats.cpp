// Validation at the boundary, then dispatch by device to cpu/ or cuda/.
#include "lowbit/block_formats.h"

#include <cstdint>
#include <cstring>

#include "core/validate.h"
#include "cpu/block_formats.h"
#include "lowbit/error.h"

#if LOWBIT_WITH_CUDA
#include "cuda/block_formats/block_formats_cuda.h"
#include "cuda/quant/quant_cuda.h"  // check_device_pointer
#endif

namespace lowbit {

const char* block_format_name(BlockFormat format) {
  switch (format) {
    case BlockFormat::nf4: return "nf4";
    case BlockFormat::mxfp4: return "mxfp4";
    case BlockFormat::nvfp4: return "nvfp4";
  }
  return "unknown";
}

BlockFormat parse_block_format(const char* name) {
  for (BlockFormat f : {BlockFormat::nf4, BlockFormat::mxfp4, BlockFormat::nvfp4}) {
    if (name && std::strcmp(name, block_format_name(f)) == 0) return f;
  }
  LOWBIT_FAIL("format: expected nf4, mxfp4 or nvfp4, got '", name ? name : "(null)", "'");
}

namespace {

void check_format(BlockFormat format) {
  LOWBIT_CHECK(static_cast<int>(format) <= static_cast<int>(BlockFormat::nvfp4), "format: unknown value ",
               static_cast<int>(format));
}

// rows and columns index the GPU status word as 32-bit halves.
constexpr std::int64_t kMaxExtent = 0x7fffffff;

void check_extents(BlockFormat format, std::int64_t rows, std::int64_t cols, const char* what) {
  LOWBIT_CHECK(rows >= 1 && cols >= 1, what, ": expected a non-empty shape, got [", rows, ", ", cols, "]");
  LOWBIT_CHECK(rows <= kMaxExtent && cols <= kMaxExtent, what, ": rows and columns must be < 2^31, got [", rows,
               ", ", cols, "]");
  const std::int64_t block = block_size(format);
  LOWBIT_CHECK(cols % block == 0, what, ": ", cols, " columns is not a multiple of the ", block_format_name(format),
               " block size ", block, " (blocks run along a row; pad the rows to a multiple of ", block, ")");
}

// Elements at their natural alignment (GPU loads and stores of f32/f16 need it).
void check_aligned(const TensorView& view, const char* what) {
  LOWBIT_CHECK(reinterpret_cast<std::uintptr_t>(view.data) % dtype_size(view.dtype) == 0, what,
               ": data pointer ", view.data, " is not aligned to its ", dtype_size(view.dtype), "-byte elements");
}

// A contiguous vector of `count` elements of `dtype`.
void check_vector(const TensorView& view, const char* what, DType dtype, std::int64_t count) {
  LOWBIT_CHECK(view.data != nullptr, what, ": data pointer is null");
  api::check_dtype(view, what, dtype);
  LOWBIT_CHECK(view.numel() == count, what, ": expected ", count, " elements, got ", view.numel(), " (",
               view.describe(), ")");
  LOWBIT_CHECK(view.is_contiguous(), what, ": expected a contiguous tensor, got ", view.describe());
  check_aligned(view, what);
}

// The encoded form of a rows x cols tensor on `device`.
void check_encoded(const BlockQuantizedView& q, BlockFormat format, std::int64_t rows, std::int64_t cols,
                   Device device) {
  const BlockLayout layout = block_layout(format, rows, cols);
  api::check_matrix(q.codes, "codes", rows, layout.code_cols);
  api::check_dtype(q.codes, "codes", DType::u8);
  api::check_same_device(device, q.codes, "codes");
  check_vector(q.scales, "scales", layout.scale_dtype, layout.scale_count);
  api::check_same_device(device, q.scales, "scales");
  api::check_no_overlap(q.codes, "codes", q.scales, "scales");
  if (layout.has_global_scale) {
    check_vector(q.global_scale, "global_scale", DType::f32, 1);
    api::check_same_device(device, q.global_scale, "global_scale");
    api::check_no_overlap(q.codes, "codes", q.global_scale, "global_scale");
    api::check_no_overlap(q.scales, "scales", q.global_scale, "global_scale");
  } else {
    LOWBIT_CHECK(q.global_scale.data == nullptr, "global_scale: ", block_format_name(format),
                 " has no global scale; pass an empty view");
  }
}

void check_dense(const TensorView& t, const char* what) {
  LOWBIT_CHECK(t.rank == 2, what, ": expected a rank-2 tensor [rows, cols], got rank ", t.rank);
  LOWBIT_CHECK(api::is_float_dtype(t.dtype), what, ": expected dtype f32, f16 or bf16, got ", dtype_name(t.dtype));
}

#if LOWBIT_WITH_CUDA
void check_device_pointers(const TensorView& dense, const char* dense_name, const BlockQuantizedView& q) {
  cuda::check_device_pointer(dense.data, dense_name);
  cuda::check_device_pointer(q.codes.data, "codes");
  cuda::check_device_pointer(q.scales.data, "scales");
  if (q.global_scale.data) cuda::check_device_pointer(q.global_scale.data, "global_scale");
}

void throw_on_status(const cuda::BlockStatus& status) {
  if (!status.non_finite) return;
  LOWBIT_FAIL("x: contains NaN or Inf at row ", status.row, ", column ", status.col,
              "; block_encode needs finite values");
}

void check_workspace(const Workspace& workspace) {
  LOWBIT_CHECK(workspace.data != nullptr, "workspace: data pointer is null (block_encode on cuda needs ",
               cuda::kBlockEncodeWorkspaceBytes, " bytes; see block_encode_workspace_bytes)");
  LOWBIT_CHECK(workspace.bytes >= cuda::kBlockEncodeWorkspaceBytes, "workspace: expected at least ",
               cuda::kBlockEncodeWorkspaceBytes, " bytes, got ", workspace.bytes, " (see block_encode_workspace_bytes)");
  LOWBIT_CHECK(reinterpret_cast<std::uintptr_t>(workspace.data) % 8 == 0,
               "workspace: expected an 8-byte aligned pointer, got ", workspace.data);
  cuda::check_device_pointer(workspace.data, "workspace");
}
#endif

}  // namespace

std::int64_t block_size(BlockFormat format) {
  switch (format) {
    case BlockFormat::nf4: return 64;
    case BlockFormat::mxfp4: return 32;
    case BlockFormat::nvfp4: return 16;
  }
  LOWBIT_FAIL("format: unknown value ", static_cast<int>(format));
}

std::size_t BlockLayout::code_bytes() const { return static_cast<std::size_t>(rows * code_cols); }

std::size_t BlockLayout::total_bytes() const {
  return code_bytes() + static_cast<std::size_t>(scale_count) * scale_bytes + (has_global_scale ? sizeof(float) : 0);
}

BlockLayout block_layout(BlockFormat format, std::int64_t rows, std::int64_t cols) {
  check_format(format);
  LOWBIT_CHECK(rows >= 1, "rows: expected >= 1, got ", rows);
  LOWBIT_CHECK(cols >= 1, "cols: expected >= 1, got ", cols);
  const std::int64_t block = block_size(format);
  LOWBIT_CHECK(cols % block == 0, "cols: ", cols, " is not a multiple of the ", block_format_name(format),
               " block size ", block);
  BlockLayout layout;
  layout.rows = rows;
  layout.block_size = block;
  layout.code_cols = cols / 2;
  layout.blocks_per_row = cols / block;
  layout.scale_count = rows * layout.blocks_per_row;
  layout.scale_dtype = format == BlockFormat::nf4 ? DType::f32 : DType::u8;
  layout.scale_bytes = format == BlockFormat::nf4 ? 4 : 1;
  layout.has_global_scale = format == BlockFormat::nvfp4;
  return layout;
}

std::size_t block_memory_bytes(BlockFormat format, std::int64_t rows, std::int64_t cols) {
  return block_layout(format, rows, cols).total_bytes();
}

std::size_t block_encode_workspace_bytes(BlockFormat format, std::int64_t rows, std::int64_t cols) {
  (void)block_layout(format, rows, cols);
#if LOWBIT_WITH_CUDA
  return cuda::kBlockEncodeWorkspaceBytes;
#else
  return 0;
#endif
}

void block_encode(const TensorView& x, BlockFormat format, const BlockQuantizedView& out,
                  const Workspace& workspace, cuda_stream_t stream, NonFiniteCheck check) {
  check_format(format);
  check_dense(x, "x");
  check_extents(format, x.shape[0], x.shape[1], "x");
  api::check_matrix(x, "x", x.shape[0], x.shape[1]);
  check_aligned(x, "x");
  check_encoded(out, format, x.rows(), x.cols(), x.device);
  api::check_no_overlap(x, "x", out.codes, "codes");
  api::check_no_overlap(x, "x", out.scales, "scales");
  if (out.global_scale.data) api::check_no_overlap(x, "x", out.global_scale, "global_scale");
  if (x.device == Device::cpu) return cpu::block_encode(x, format, out);
#if LOWBIT_WITH_CUDA
  check_workspace(workspace);
  check_device_pointers(x, "x", out);
  cuda::block_encode(x, format, out, workspace, stream);
  if (check == NonFiniteCheck::sync_and_throw) throw_on_status(cuda::read_block_status(workspace, stream));
#else
  (void)workspace, (void)stream, (void)check;
  api::fail_no_cuda("block_encode");
#endif
}

void block_decode(const BlockQuantizedView& in, BlockFormat format, const TensorView& out, cuda_stream_t stream) {
  check_format(format);
  check_dense(out, "out");
  check_extents(format, out.shape[0], out.shape[1], "out");
  api::check_matrix(out, "out", out.shape[0], out.shape[1]);
  check_aligned(out, "out");
  check_encoded(in, format, out.rows(), out.cols(), out.device);
  api::check_no_overlap(in.codes, "codes", out, "out");
  api::check_no_overlap(in.scales, "scales", out, "out");
  if (in.global_scale.data) api::check_no_overlap(in.global_scale, "global_scale", out, "out");
  if (out.device == Device::cpu) return cpu::block_decode(in, format, out);
#if LOWBIT_WITH_CUDA
  check_device_pointers(out, "out", in);
  cuda::block_decode(in, format, out, stream);
#else
  (void)stream;
  api::fail_no_cuda("block_decode");
#endif
}

void check_block_encode_status(const Workspace& workspace, cuda_stream_t stream) {
#if LOWBIT_WITH_CUDA
  LOWBIT_CHECK(workspace.data != nullptr, "workspace: data pointer is null");
  throw_on_status(cuda::read_block_status(workspace, stream));
#else
  (void)workspace, (void)stream;
  LOWBIT_FAIL("check_block_encode_status: this build of lowbit has no CUDA support (LOWBIT_CUDA=OFF)");
#endif
}

}  // namespace lowbit
