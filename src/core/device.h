// Facts about the current CUDA device, read once and cached per device, and the one
// check that a pointer a view calls device memory is device memory. CUDA builds only.
#pragma once

namespace lowbit::core {

int current_device();
int multiprocessor_count();  // of the current device

// Throws lowbit::Error naming `what` unless ptr is device (or managed) memory that the
// current device can address.
void check_device_pointer(const void* ptr, const char* what);

// Programmatic dependent launch (core/pdl.cuh) for the launches that take it: on by
// default; off, they are launched in plain stream order (the benchmarks' --no-pdl, to
// measure what it buys). Process-wide; set it before the launches it should govern.
void set_programmatic_launch(bool on);
bool programmatic_launch();

}  // namespace lowbit::core
