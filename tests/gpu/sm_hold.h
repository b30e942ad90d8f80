// Holds a GPU's multiprocessors but `free_sms` of them, as another stream's or process's
// persistent kernel does (NCCL's, an MPS client's): one spinning block an SM, each taking
// the largest shared memory a block may, so no other block fits beside it. For tests of
// kernels that must finish on whatever SMs they are left.
#pragma once

#include <cuda_runtime.h>

namespace lowbit::test {

class SmHold {
 public:
  // Launches the holding grid on its own stream and waits until all its blocks run
  // (holding() false if they did not within a few seconds).
  explicit SmHold(int free_sms);
  ~SmHold();
  SmHold(const SmHold&) = delete;
  SmHold& operator=(const SmHold&) = delete;

  bool holding() const { return holding_; }
  // Lets the blocks end and waits for them (also done by the destructor).
  void release();

 private:
  cudaStream_t stream_ = nullptr;
  int* flags_ = nullptr;  // mapped host memory: [0] release, [1] blocks started
  bool holding_ = false;
  bool released_ = false;
};

}  // namespace lowbit::test
