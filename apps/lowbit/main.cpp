// lowbit: quantized LLM inference toolkit, command line.
#include <iostream>

#include "commands.h"
#include "dispatch.h"
#include "lowbit/error.h"
#include "options.h"
#include "threads.h"
#include "version.h"

namespace {

using lowbit::cli::Args;

int help(const Args& args);
int version(const Args&) {
  std::cout << lowbit::cli::version_line() << "\n";
  return 0;
}

const std::vector<lowbit::cli::Subcommand>& commands() {
  static const std::vector<lowbit::cli::Subcommand> table = {
      {"generate", "generate text from a prompt, greedy or sampled, with a KV-cache policy (full, window,\n"
                   "selective, int8, int4)",
       lowbit::cli::cmd_generate},
      {"serve", "an OpenAI-compatible HTTP server with continuous batching", lowbit::cli::cmd_serve},
      {"perplexity", "perplexity of a text file (default WikiText-2) under a KV-cache policy, with its +/-",
       lowbit::cli::cmd_perplexity},
      {"eval", "kvcache: the KV-cache policies compared (perplexity, ROUGE-L, tokens/s, memory, plot)\n"
               "attention: quantized-weight attention (NF4 / MXFP4 / NVFP4) pipelines timed and checked",
       lowbit::cli::cmd_eval},
      {"bench", "kvquant: KV-cache quantization kernels (GB/s against a copy, exactness)\n"
                "gemm: quantized GEMMs (INT8, INT4, W4A16 / W8A16) against cuBLAS in the same run\n"
                "speed, decode, kv-attention, batch, serve: the engine's tokens/s and its attention's GB/s",
       lowbit::cli::cmd_bench},
      {"model", "synth: a GGUF model of a real shape with random weights; dequant: one tensor to f32;\n"
                "tokenize: a text's token ids",
       lowbit::cli::cmd_model},
      {"help", "help COMMAND [SUBCOMMAND]: that command's options", help},
      {"version", "lowbit's version and build (also --version)", version},
  };
  return table;
}

// `lowbit help CMD [SUB]` is `lowbit CMD [SUB] --help`.
int help(const Args& args) {
  if (args.empty()) {
    lowbit::cli::print_subcommands(std::cout, "lowbit", commands());
    return 0;
  }
  Args asked = args;
  asked.push_back("--help");
  return lowbit::cli::run_subcommand("lowbit", commands(), asked);
}

}  // namespace

int main(int argc, char** argv) {
  lowbit::cli::prefer_passive_openmp(argv);
  const Args args(argv + 1, argv + argc);
  try {
    if (!args.empty() && args[0] == "--version") return version(args);
    return lowbit::cli::run_subcommand("lowbit", commands(), args);
  } catch (const lowbit::cli::UsageError& e) {
    const std::string command = e.command().empty() ? "lowbit" : e.command();
    std::cerr << command << ": " << e.what() << "\nRun `" << command << " --help` for its options.\n";
    return 2;
  } catch (const std::exception& e) {
    const std::string message = lowbit::cli::user_message(e);
    std::cerr << (message.rfind("lowbit", 0) == 0 ? "" : "lowbit: ") << message << "\n";
    return 1;
  }
}
