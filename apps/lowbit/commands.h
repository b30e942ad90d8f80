// The `lowbit` CLI's subcommands. Each takes the arguments after its name and
// returns the process exit status.
#pragma once

#include <string>
#include <vector>

namespace lowbit::cli {

using Args = std::vector<std::string>;

int cmd_bench(const Args& args);
int bench_speed(const Args& args);
int cmd_bench_batch(const Args& args);
int cmd_bench_serve(const Args& args);
int cmd_generate(const Args& args);
int cmd_serve(const Args& args);
int cmd_perplexity(const Args& args);
int cmd_eval(const Args& args);
int cmd_eval_kvcache(const Args& args);
int cmd_eval_attention(const Args& args);
int cmd_model(const Args& args);

}  // namespace lowbit::cli
