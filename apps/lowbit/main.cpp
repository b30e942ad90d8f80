// lowbit: quantized LLM inference toolkit, command line.
#include <iostream>

#include "commands.h"
#include "lowbit/error.h"

namespace {

void usage(std::ostream& out) {
  out << "usage: lowbit <command> [options]\n\n"
         "commands:\n"
         "  bench kvquant   KV-cache quantization benchmark (seed 000): CPU baseline, the seed's four\n"
         "                  GPU kernels and lowbit's production path over the seed's ten T x D cases\n"
         "  bench gemm      quantized GEMMs (INT8, INT4, fused epilogue, W4A16/W8A16) against cuBLASLt and\n"
         "                  cuBLAS in the same run (seeds 001, 003)\n"
         "  bench batch     offline batched generation throughput at B = 1, 8, 16, ... (like llama-batched-bench)\n"
         "  bench serve     a load generator against a running lowbit serve (requests/s, tokens/s, latencies)\n"
         "  generate        generation, greedy or sampled, with a KV-cache policy (full, window, selective, int8, int4)\n"
         "  serve           an OpenAI-compatible HTTP server with continuous batching\n"
         "  perplexity      perplexity of a text file (default WikiText-2) under a KV-cache policy\n"
         "  eval kvcache    the seed-002 table: perplexity, ROUGE-L, tokens/s and KV memory per policy, and\n"
         "                  the memory-vs-tokens plot (PNG)\n"
         "  eval attention  the seed-004 table: four quantized-attention pipelines (NF4/MXFP4/NVFP4 weights)\n"
         "                  timed and checked against an FP64 reference, formats' round trip and memory\n"
         "  model synth     writes a GGUF model of a real shape (Llama 3 1B-8B, ...) with random weights\n"
         "  model dequant   decodes one tensor of a GGUF file to raw f32, as the CPU engine does\n"
         "  model tokenize  a text's token ids under a model's tokenizer\n\n"
         "Run `lowbit <command> --help` for its options.\n";
}

}  // namespace

int main(int argc, char** argv) {
  const lowbit::cli::Args args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    usage(args.empty() ? std::cerr : std::cout);
    return args.empty() ? 2 : 0;
  }
  try {
    const lowbit::cli::Args rest(args.begin() + 1, args.end());
    if (args[0] == "bench") return lowbit::cli::cmd_bench(rest);
    if (args[0] == "generate") return lowbit::cli::cmd_generate(rest);
    if (args[0] == "serve") return lowbit::cli::cmd_serve(rest);
    if (args[0] == "perplexity") return lowbit::cli::cmd_perplexity(rest);
    if (args[0] == "eval") return lowbit::cli::cmd_eval(rest);
    if (args[0] == "model") return lowbit::cli::cmd_model(rest);
    std::cerr << "lowbit: unknown command '" << args[0] << "'\n\n";
    usage(std::cerr);
    return 2;
  } catch (const lowbit::Error& e) {
    std::cerr << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "lowbit: " << e.what() << "\n";
    return 1;
  }
}
