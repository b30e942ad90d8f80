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

// Where the weight-only GEMVs let their successor launch under programmatic launch: at
// their first instruction (the default), or, on, after their main loop (the benchmarks'
// --pdl-late: at most one grid then waits ahead of a GEMV). Process-wide, as above.
void set_pdl_late_trigger(bool on);
bool pdl_late_trigger();

}  // namespace lowbit::core
