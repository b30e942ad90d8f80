// LD_PRELOAD library that records the start and end of every kernel a CUDA program runs
// (CUPTI's concurrent-kernel activity records, which include the kernels of CUDA graph
// launches) and writes them as CSV at exit: the timeline Nsight Systems would show, for
// a machine that has no Nsight Systems. Off unless LOWBIT_KERNEL_TRACE names the output.
//   LOWBIT_KERNEL_TRACE=/tmp/t.csv LD_PRELOAD=build-gpu/lib/liblowbit_kernel_trace.so PROGRAM ...
// LOWBIT_KERNEL_TRACE_MAX=N keeps the first N records (default 2,000,000) and counts the
// rest as dropped. A CUPTI failure prints one line and turns tracing off; it never stops
// the program. scripts/kernel_trace_summary.py reads the CSV.

#include <cupti.h>
#include <cxxabi.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace {

constexpr std::size_t kBufferBytes = std::size_t{8} << 20;
constexpr std::size_t kBufferAlignment = 8;  // CUPTI's ACTIVITY_RECORD_ALIGNMENT
constexpr std::size_t kDefaultMaxRecords = 2'000'000;

// The newest kernel record of CUDA 13's cupti_activity.h; CUPTI fills the layout of the
// headers it was built against, so a newer toolkit may need the next version here.
using KernelRecord = CUpti_ActivityKernel10;

struct Kernel {
  std::uint64_t start, end, graph_node_id;
  std::uint32_t stream, graph_id, name;  // name: index into State::names
  std::int32_t grid[3], block[3], dynamic_smem;
  std::uint16_t registers;
};

// Leaked on purpose: CUPTI's worker thread may deliver a buffer while static
// destructors run, so nothing here is ever destroyed.
struct State {
  std::string path;
  std::size_t max_records = kDefaultMaxRecords;
  std::mutex mutex;  // the buffer callback runs on CUPTI's thread
  bool failed = false;
  std::vector<Kernel> kernels;
  std::vector<std::string> names;
  std::map<std::string, std::uint32_t, std::less<>> name_index;  // names are shared by many records
  std::uint64_t dropped = 0;        // past max_records
  std::uint64_t lost_by_cupti = 0;  // records CUPTI had no buffer space for
};

State* state = nullptr;

// One line naming the call, then tracing is off. Returns whether the call succeeded.
bool cupti_ok(CUptiResult result, const char* call) {
  if (result == CUPTI_SUCCESS) return true;
  const char* text = nullptr;
  if (cuptiGetResultString(result, &text) != CUPTI_SUCCESS || text == nullptr) text = "unknown CUPTI error";
  std::fprintf(stderr, "lowbit_kernel_trace: %s failed: %s (%d); kernel tracing off\n", call, text,
               static_cast<int>(result));
  if (state != nullptr) state->failed = true;
  return false;
}

void CUPTIAPI buffer_requested(std::uint8_t** buffer, std::size_t* size, std::size_t* max_records) {
  // A null buffer makes CUPTI drop records (counted in lost_by_cupti), not fail.
  *buffer = static_cast<std::uint8_t*>(std::aligned_alloc(kBufferAlignment, kBufferBytes));
  *size = *buffer != nullptr ? kBufferBytes : 0;
  *max_records = 0;
}

std::uint32_t intern(State& s, std::string_view name) {
  const auto it = s.name_index.find(name);
  if (it != s.name_index.end()) return it->second;
  const auto index = static_cast<std::uint32_t>(s.names.size());
  s.names.emplace_back(name);
  s.name_index.emplace(std::string(name), index);
  return index;
}

void CUPTIAPI buffer_completed(CUcontext context, std::uint32_t stream_id, std::uint8_t* buffer, std::size_t,
                               std::size_t valid_size) {
  State& s = *state;
  {
    const std::lock_guard lock(s.mutex);
    CUpti_Activity* record = nullptr;
    while (!s.failed) {
      const CUptiResult result = cuptiActivityGetNextRecord(buffer, valid_size, &record);
      if (result == CUPTI_ERROR_MAX_LIMIT_REACHED) break;  // the end of the buffer
      if (!cupti_ok(result, "cuptiActivityGetNextRecord")) break;
      if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) continue;
      if (s.kernels.size() >= s.max_records) {
        ++s.dropped;
        continue;
      }
      const auto& k = *reinterpret_cast<const KernelRecord*>(record);
      s.kernels.push_back(Kernel{k.start, k.end, k.graphNodeId, k.streamId, k.graphId,
                                 intern(s, k.name != nullptr ? k.name : "?"),
                                 {k.gridX, k.gridY, k.gridZ}, {k.blockX, k.blockY, k.blockZ},
                                 k.dynamicSharedMemory, k.registersPerThread});
    }
    std::size_t lost = 0;
    if (!s.failed && cupti_ok(cuptiActivityGetNumDroppedRecords(context, stream_id, &lost),
                              "cuptiActivityGetNumDroppedRecords"))
      s.lost_by_cupti += lost;
  }
  std::free(buffer);
}

std::string demangled(const std::string& mangled) {
  int status = 0;
  char* text = abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status);
  std::string name = status == 0 && text != nullptr ? std::string(text) : mangled;
  std::free(text);
  return name;
}

// A CSV field in double quotes, its quotes doubled.
std::string quoted(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

// The whole CSV into a temporary file beside the target, then renamed over it: the
// target is whole or untouched. Returns an error text, empty on success.
std::string write_csv(const State& s) {
  std::vector<std::string> names;
  names.reserve(s.names.size());
  for (const std::string& name : s.names) names.push_back(quoted(demangled(name)));

  const std::string temporary = s.path + ".tmp." + std::to_string(::getpid());
  std::FILE* file = std::fopen(temporary.c_str(), "w");
  if (file == nullptr) return "cannot open " + temporary + ": " + std::strerror(errno);
  std::fputs("start_ns,end_ns,duration_ns,stream,graph_id,graph_node_id,grid_x,grid_y,grid_z,"
             "block_x,block_y,block_z,dynamic_smem,registers,name\n",
             file);
  for (const Kernel& k : s.kernels) {
    // A record left incomplete by the exit can end before it starts: duration 0 then.
    const std::uint64_t duration = k.end > k.start ? k.end - k.start : 0;
    std::fprintf(file, "%llu,%llu,%llu,%u,%u,%llu,%d,%d,%d,%d,%d,%d,%d,%u,%s\n",
                 static_cast<unsigned long long>(k.start), static_cast<unsigned long long>(k.end),
                 static_cast<unsigned long long>(duration), k.stream, k.graph_id,
                 static_cast<unsigned long long>(k.graph_node_id), k.grid[0], k.grid[1], k.grid[2], k.block[0],
                 k.block[1], k.block[2], k.dynamic_smem, static_cast<unsigned>(k.registers), names[k.name].c_str());
  }
  const bool written = std::ferror(file) == 0;
  const int saved = errno;
  const bool closed = std::fclose(file) == 0;
  if (!written || !closed) {
    std::remove(temporary.c_str());
    return "writing " + temporary + " failed: " + std::strerror(written ? errno : saved);
  }
  if (std::rename(temporary.c_str(), s.path.c_str()) != 0) {
    const std::string error = std::strerror(errno);
    std::remove(temporary.c_str());
    return "cannot rename " + temporary + " to " + s.path + ": " + error;
  }
  return {};
}

void at_exit() {
  State& s = *state;
  if (s.failed) return;  // the failure was reported when it happened
  // Forced: also the buffers whose last records are incomplete. The host program
  // synchronizes before it exits, or its last kernels have no end time.
  cupti_ok(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");
  const std::lock_guard lock(s.mutex);
  if (s.failed) {
    std::fprintf(stderr, "lowbit_kernel_trace: nothing written to %s\n", s.path.c_str());
    return;
  }
  // Every process that inherits LD_PRELOAD loads this library (a wrapper such as
  // timeout, the programs the traced one starts): only one that ran kernels writes, so
  // they never write over the traced program's file.
  if (s.kernels.empty() && s.dropped == 0) return;
  const std::string error = write_csv(s);
  if (!error.empty()) {
    std::fprintf(stderr, "lowbit_kernel_trace: %s; nothing written\n", error.c_str());
    return;
  }
  std::fprintf(stderr,
               "lowbit_kernel_trace: %zu kernel records written to %s, %llu dropped past "
               "LOWBIT_KERNEL_TRACE_MAX=%zu, %llu lost by CUPTI\n",
               s.kernels.size(), s.path.c_str(), static_cast<unsigned long long>(s.dropped), s.max_records,
               static_cast<unsigned long long>(s.lost_by_cupti));
}

__attribute__((constructor)) void start_trace() {
  const char* path = std::getenv("LOWBIT_KERNEL_TRACE");
  if (path == nullptr || *path == '\0') return;
  state = new State;
  // Absolute, so that a program that changes directory still writes where it was asked.
  std::error_code ec;
  const std::filesystem::path absolute = std::filesystem::absolute(path, ec);
  state->path = ec ? std::string(path) : absolute.string();
  if (const char* max = std::getenv("LOWBIT_KERNEL_TRACE_MAX"); max != nullptr && *max != '\0') {
    char* end = nullptr;
    const unsigned long long n = std::strtoull(max, &end, 10);
    if (*end != '\0' || max[0] == '-') {
      std::fprintf(stderr, "lowbit_kernel_trace: LOWBIT_KERNEL_TRACE_MAX='%s' is not a count; kernel tracing off\n",
                   max);
      return;
    }
    state->max_records = static_cast<std::size_t>(n);
  }
  state->kernels.reserve(std::min<std::size_t>(state->max_records, 1 << 16));
  if (!cupti_ok(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed), "cuptiActivityRegisterCallbacks"))
    return;
  if (!cupti_ok(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL),
                "cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)"))
    return;
  // Registered before the program's own handlers, so it runs after them (after its last
  // synchronization), and before the libraries are unloaded.
  std::atexit(at_exit);
}

}  // namespace
