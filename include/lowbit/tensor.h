// A non-owning view of a strided tensor in host or device memory, plus the two
// things every GPU entry point takes explicitly: a stream and a workspace.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

// cudaStream_t is `struct CUstream_st*`; naming it here keeps this header free of
// CUDA includes, so the CPU-only build (-DLOWBIT_CUDA=OFF) compiles it too.
struct CUstream_st;

namespace lowbit {

enum class DType : std::uint8_t {
  f32,
  f16,
  bf16,
  i8,
  u8,  // also: packed INT4, two codes a byte, low nibble first
  i32,
};

enum class Device : std::uint8_t { cpu, cuda };

std::size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);
const char* device_name(Device device);

constexpr int kMaxRank = 4;

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::f32;
  Device device = Device::cpu;
  int rank = 0;
  std::array<std::int64_t, kMaxRank> shape{};
  std::array<std::int64_t, kMaxRank> strides{};  // in elements, not bytes

  // A rows x cols matrix; row_stride defaults to cols (contiguous rows).
  static TensorView matrix(void* data, DType dtype, Device device, std::int64_t rows,
                           std::int64_t cols, std::int64_t row_stride = -1);
  static TensorView vector(void* data, DType dtype, Device device, std::int64_t length);

  std::int64_t rows() const { return shape[0]; }
  std::int64_t cols() const { return shape[1]; }
  std::int64_t row_stride() const { return strides[0]; }
  std::int64_t numel() const;
  bool empty() const { return numel() == 0; }
  bool is_contiguous() const;

  // Bytes from data to one past the last addressable element.
  std::size_t span_bytes() const;

  template <class T>
  T* ptr() const {
    return static_cast<T*>(data);
  }

  std::string describe() const;  // "f32[131072x4096] stride 4096 on cuda"
};

// The stream every GPU entry point is launched on. nullptr is the legacy default
// stream; pass your own for overlap.
using cuda_stream_t = CUstream_st*;

// Scratch memory the caller owns (device memory for GPU calls). Entry points never
// allocate; each op family has a *_workspace_bytes() function that says how much.
struct Workspace {
  void* data = nullptr;
  std::size_t bytes = 0;
};

}  // namespace lowbit
