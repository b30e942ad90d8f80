// Validation at the boundary, then dispatch by device to cpu/ or cuda/.
#include "lowbit/block_formats.h"

#include <cstdint>
#include <cstring>

#include "core/layout.h"
#include "core/validate.h"
#include "cpu/block_formats.h"
#include "lowbit/error.h"

#if LOWBIT_WITH_CUDA
#include "cuda/block_formats/block_formats_cuda.h"
#endif

namespace lowbit {


namespace {

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

// The encoded form of a rows x cols tensor on `device`.
void check_encoded(const BlockQuantizedView& q, BlockFormat format, std::int64_t rows, std::int64_t cols,
                   Device device) {
  const BlockLayout layout = block_layout(format, rows, cols);
  core::check_matrix(q.codes, "codes", rows, layout.code_cols);
  core::check_dtype(q.codes, "codes", DType::u8);
  core::check_same_device(device, q.codes, "codes");
  core::check_vector(q.scales, "scales", layout.scale_dtype, layout.scale_count);
  core::check_same_device(device, q.scales, "scales");
  if (layout.has_global_scale) {
    core::check_vector(q.global_scale, "global_scale", DType::f32, 1);
    core::check_same_device(device, q.global_scale, "global_scale");
  } else {
    LOWBIT_CHECK(q.global_scale.data == nullptr, "global_scale: ", block_format_name(format),
                 " has no global scale; pass an empty view");
  }
}

void check_dense(const TensorView& t, const char* what) {
  LOWBIT_CHECK(t.rank == 2, what, ": expected a rank-2 tensor [rows, cols], got rank ", t.rank);
  LOWBIT_CHECK(core::is_float_dtype(t.dtype), what, ": expected dtype f32, f16 or bf16, got ", dtype_name(t.dtype));
}

#if LOWBIT_WITH_CUDA
void check_device_pointers(const TensorView& dense, const char* dense_name, const BlockQuantizedView& q) {
  core::check_device_data(dense, dense_name);
  core::check_device_data(q.codes, "codes");
  core::check_device_data(q.scales, "scales");
  core::check_device_data(q.global_scale, "global_scale");
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
  core::check_device_data(workspace.data, "workspace");
}
#endif

}  // namespace


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
  core::check_block_format(format);
  check_dense(x, "x");
  check_extents(format, x.shape[0], x.shape[1], "x");
  core::check_matrix(x, "x", x.shape[0], x.shape[1]);
  check_aligned(x, "x");
  check_encoded(out, format, x.rows(), x.cols(), x.device);
  const TensorView ws = x.device == Device::cuda ? core::byte_view(workspace.data, workspace.bytes) : TensorView{};
  core::check_no_aliasing(
      {{out.scales, "scales"}, {out.global_scale, "global_scale"}, {out.codes, "codes"}, {ws, "workspace"}},
      {{x, "x"}});
  if (x.device == Device::cpu) return cpu::block_encode(x, format, out);
#if LOWBIT_WITH_CUDA
  check_workspace(workspace);
  check_device_pointers(x, "x", out);
  cuda::block_encode(x, format, out, workspace, stream);
  if (check == NonFiniteCheck::sync_and_throw) throw_on_status(cuda::read_block_status(workspace, stream));
#else
  (void)workspace, (void)stream, (void)check;
  core::fail_no_cuda("block_encode");
#endif
}

void block_decode(const BlockQuantizedView& in, BlockFormat format, const TensorView& out, cuda_stream_t stream) {
  core::check_block_format(format);
  check_dense(out, "out");
  check_extents(format, out.shape[0], out.shape[1], "out");
  core::check_matrix(out, "out", out.shape[0], out.shape[1]);
  check_aligned(out, "out");
  check_encoded(in, format, out.rows(), out.cols(), out.device);
  core::check_no_aliasing({{out, "out"}},
                          {{in.codes, "codes"}, {in.scales, "scales"}, {in.global_scale, "global_scale"}});
  if (out.device == Device::cpu) return cpu::block_decode(in, format, out);
#if LOWBIT_WITH_CUDA
  check_device_pointers(out, "out", in);
  cuda::block_decode(in, format, out, stream);
#else
  (void)stream;
  core::fail_no_cuda("block_decode");
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
