// Bindings of include/lowbit/block_formats.h (NF4, MXFP4, NVFP4). As in bind_quant.cpp,
// the Python layer allocates every output and the GPU workspace; these functions
// only convert views, release the GIL and call the library.
#include <cstdint>

#include "lowbit/block_formats.h"
#include "views.h"

namespace lowbit::python {
namespace {

BlockQuantizedView block_view(const TensorView& codes, const TensorView& scales, const TensorView& global_scale) {
  return BlockQuantizedView{codes, scales, global_scale};
}

void block_encode(const In& x, const Out& codes, const Out& scales, const OptOut& global_scale, const char* format,
                  const OptOut& workspace, std::uintptr_t stream, bool deferred) {
  const BlockFormat f = parse_block_format(format);
  const TensorView xv = view_of(x, "x");
  const BlockQuantizedView q =
      block_view(view_of(codes, "codes"), view_of(scales, "scales"), view_of(global_scale, "global_scale"));
  const TensorView ws = view_of(workspace, "workspace");
  const Workspace w{ws.data, ws.span_bytes()};
  const NonFiniteCheck check = deferred ? NonFiniteCheck::deferred : NonFiniteCheck::sync_and_throw;
  DeviceGuard guard(xv, x.device_id());
  nb::gil_scoped_release release;
  lowbit::block_encode(xv, f, q, w, stream_of(stream), check);
}

void block_decode(const In& codes, const In& scales, const OptIn& global_scale, const char* format, const Out& out,
                  std::uintptr_t stream) {
  const BlockFormat f = parse_block_format(format);
  const BlockQuantizedView q =
      block_view(view_of(codes, "codes"), view_of(scales, "scales"), view_of(global_scale, "global_scale"));
  const TensorView ov = view_of(out, "out");
  DeviceGuard guard(ov, out.device_id());
  nb::gil_scoped_release release;
  lowbit::block_decode(q, f, ov, stream_of(stream));
}

void check_status(const Out& workspace, std::uintptr_t stream) {
  const TensorView ws = view_of(workspace, "workspace");
  DeviceGuard guard(ws, workspace.device_id());
  nb::gil_scoped_release release;
  lowbit::check_block_encode_status(Workspace{ws.data, ws.span_bytes()}, stream_of(stream));
}

// What the Python side needs to allocate the encoded form.
nb::tuple layout(const char* format, std::int64_t rows, std::int64_t cols) {
  const BlockLayout l = block_layout(parse_block_format(format), rows, cols);
  return nb::make_tuple(l.code_cols, l.scale_count, dtype_name(l.scale_dtype), l.has_global_scale, l.block_size);
}

}  // namespace

void bind_block_formats(nb::module_& m) {
  using namespace nb::literals;
  m.def("block_encode", &block_encode, "x"_a, "codes"_a, "scales"_a, "global_scale"_a.none(), "format"_a,
        "workspace"_a.none(), "stream"_a, "deferred"_a, "Encodes x in a block format into the given arrays.");
  m.def("block_decode", &block_decode, "codes"_a, "scales"_a, "global_scale"_a.none(), "format"_a, "out"_a,
        "stream"_a, "Decodes a block-format tensor into out.");
  m.def("check_block_encode_status", &check_status, "workspace"_a, "stream"_a,
        "Synchronizes the stream; raises if a deferred block_encode with this workspace saw NaN or Inf.");
  m.def("block_layout", &layout, "format"_a, "rows"_a, "cols"_a,
        "(code_cols, scale_count, scale dtype name, has_global_scale, block_size) of a rows x cols tensor.");
  m.def(
      "block_encode_workspace_bytes",
      [](const char* format, std::int64_t rows, std::int64_t cols) {
        return lowbit::block_encode_workspace_bytes(parse_block_format(format), rows, cols);
      },
      "format"_a, "rows"_a, "cols"_a, "GPU workspace bytes of block_encode().");
}

}  // namespace lowbit::python
