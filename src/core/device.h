// Small facts about the current device, read once and cached per device.
#pragma once

namespace lowbit::cuda {

int current_device();
int multiprocessor_count();  // of the current device

}  // namespace lowbit::cuda
