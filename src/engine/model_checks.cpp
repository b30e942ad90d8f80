#include "engine/model_checks.h"

#include "lowbit/error.h"

namespace lowbit::engine {

void check_tokenizer_fits_model(const Tokenizer& tokenizer, const ModelConfig& config) {
  LOWBIT_CHECK(tokenizer.vocab_size() == config.vocab, "tokenizer.ggml.tokens: ", tokenizer.vocab_size(),
               " tokens, but tensor 'token_embd.weight' has ", config.vocab,
               " rows (vocab); the tokenizer and the model must have the same vocabulary");
}

void check_within_context_length(std::int64_t tokens, const ModelConfig& config, std::string_view what) {
  LOWBIT_CHECK(config.context_length == 0 || tokens <= config.context_length, what, " (", tokens,
               " tokens) exceeds the model's context length ", config.context_length, " (",
               config.architecture, ".context_length)");
}

}  // namespace lowbit::engine
