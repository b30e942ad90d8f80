// `lowbit bench batch`: option parsing in front of bench_batch.h.
#include <iostream>

#include "bench_batch.h"
#include "commands.h"
#include "engine_session.h"
#include "list_options.h"
#include "lowbit/error.h"
#include "options.h"

namespace lowbit::cli {

int cmd_bench_batch(const Args& args) {
  std::string model_path, device = "cpu", npp = "128", ntg = "32", npl = "1,8,16";
  std::vector<std::string> policies;
  bool no_graphs = false, no_pdl = false;
  KvCacheFlags kv;
  BatchBenchOptions options;
  Options cli("lowbit bench batch",
              "Offline batched generation, as llama-batched-bench measures it: for each KV-cache policy, prompt\n"
              "length PP, generation length TG and batch size B, B sequences of random prompts prefill in one\n"
              "step, then TG decode steps of B rows (greedy); prompt and generation throughput (t/s) and the KV\n"
              "bytes held, min / median / max over --repeat runs. Runs on the BatchEngine interface (the CPU or\n"
              "the GPU batch engine).");
  cli.text("--model", &model_path, "PATH", "a llama-family GGUF file (default: the cached SmolLM2-135M-Instruct)");
  cli.choice("--device", &device, {"auto", "cpu", "gpu"},
             "the batch engine: the CPU's, the GPU's, or auto (the GPU when present; default cpu)");
  cli.choices("--kv-cache", &policies, {"full", "window", "selective8", "selective4", "int8", "int4"},
              "a policy to measure (default: full, selective8, selective4)");
  kv.declare(cli, /*with_policy=*/false);
  cli.text("--npp", &npp, "LIST", "prompt lengths PP, comma-separated (default 128)");
  cli.text("--ntg", &ntg, "LIST", "generation lengths TG (default 32)");
  cli.text("--npl", &npl, "LIST", "batch sizes B (default 1,8,16)");
  cli.integer("--long", &options.long_prompt, 1, 1 << 24,
              "a skewed batch: one sequence of each B prefills N prompt tokens (in a step of its own first), the "
              "other B - 1 PP; decode then attends over one long row among short ones");
  cli.integer("--repeat", &options.repeats, 1, 1000, "runs of each case (default 3)");
  cli.flag("--no-cuda-graphs", &no_graphs, "GPU decode steps launch kernel by kernel (for comparison)");
  cli.flag("--no-pdl", &no_pdl, "GPU kernels launch without programmatic dependent launch (for comparison)");
  cli.flag("--profile", &options.profile,
           "one more run of each case timing its decode steps' parts (GPU engine), printed after the table");
  cli.text("--json", &options.json_path, "FILE", "also write the results as JSON");
  if (const auto status = cli.parse(args)) return *status;
  usage_check(!options.profile || device != "cpu",
              "--profile: only the GPU batch engine times its steps (--device gpu)");
  options.prompt_tokens = parse_positive_integers(npp, "--npp", 1 << 24);
  options.generated_tokens = parse_positive_integers(ntg, "--ntg", 1 << 24);
  options.batch_sizes = parse_positive_integers(npl, "--npl", 1 << 16);
  if (policies.empty()) policies = {"full", "selective8", "selective4"};
  for (const std::string& p : policies) {
    const KvPolicyBits choice = parse_kv_policy_bits(p.c_str());
    options.policies.push_back({p, kv.options_for(choice.policy, choice.bits)});
  }
  const auto loaded = load_model(resolve_model_path(model_path));
  const std::int64_t trained = loaded->model.config().context_length;
  for (const std::int64_t pp : options.prompt_tokens) {
    for (const std::int64_t tg : options.generated_tokens) {
      LOWBIT_CHECK(trained == 0 || pp + tg <= trained, "--npp ", pp, " + --ntg ", tg,
                   " exceeds the model's context length ", trained);
      LOWBIT_CHECK(trained == 0 || options.long_prompt + tg <= trained, "--long ", options.long_prompt, " + --ntg ",
                   tg, " exceeds the model's context length ", trained);
    }
  }
  set_programmatic_launch(!no_pdl);
  options.programmatic_launch = !no_pdl;
  SessionMaker maker(*loaded, device, !no_graphs);
  LOWBIT_CHECK(!options.profile || maker.gpu(), "--profile: only the GPU batch engine times its steps, and this run "
               "uses the CPU's (", maker.describe(), ")");
  std::cout << "lowbit bench batch: " << loaded->model.config().describe() << ", " << maker.describe()
            << (!maker.gpu() ? "" : maker.cuda_graphs() ? ", decode steps as CUDA graphs" : ", decode kernel by kernel")
            << (maker.gpu() && no_pdl ? ", no programmatic dependent launch" : "") << "\n\n";
  run_bench_batch(*loaded, maker, options);
  return 0;
}

}  // namespace lowbit::cli
