// Facts about the current CUDA device, read once and cached per device, and the one
// check that a pointer a view calls device memory is device memory. CUDA builds only.
#pragma once

namespace lowbit::core {

int current_device();
int multiprocessor_count();  // of the current device

// Throws lowbit::Error naming `what` unless ptr is device (or managed) memory that the
// current device can address.
void check_device_pointer(const void* ptr, const char* what);

}  // namespace lowbit::core
