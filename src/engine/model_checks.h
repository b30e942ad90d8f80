// Checks across a model and its tokenizer, and of a run against the model: what one
// file's parts must agree on before anything runs.
#pragma once

#include <cstdint>
#include <string_view>

#include "engine/model.h"
#include "engine/tokenizer/tokenizer.h"

namespace lowbit::engine {

// The tokenizer has as many tokens as the token embedding (and the output head, which
// model_tensor checks against it) has rows, as llama.cpp requires: a token without a
// row cannot be embedded, a row without a token cannot be decoded.
void check_tokenizer_fits_model(const Tokenizer& tokenizer, const ModelConfig& config);

// `tokens` positions fit the context length the model was trained for (refused, not
// warned: positions past it are untrained; context_length 0, unknown, allows any).
// `what` names the request in the message ("--context 9000").
void check_within_context_length(std::int64_t tokens, const ModelConfig& config, std::string_view what);

}  // namespace lowbit::engine
