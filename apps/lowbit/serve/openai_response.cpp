#include "serve/openai_response.h"

namespace lowbit::serve {
namespace {

using nlohmann::json;

json bytes_json(const std::string& s) {
  json out = json::array();
  for (const char c : s) out.push_back(static_cast<unsigned char>(c));
  return out;
}

// Completions' legacy form: parallel arrays of tokens, their logprobs, the top
// alternatives as {token: logprob}, and each token's offset in the text.
json completion_logprobs(const std::vector<Piece>& pieces, const engine::Tokenizer& tok, std::size_t offset) {
  json tokens = json::array(), token_logprobs = json::array(), top = json::array(), offsets = json::array();
  for (const Piece& p : pieces) {
    if (p.token < 0 || !p.logprobs) continue;
    const std::string text = tok.token_bytes(p.token);
    tokens.push_back(text);
    token_logprobs.push_back(p.logprobs->chosen.logprob);
    json alternatives = json::object();
    for (const engine::TokenLogprob& t : p.logprobs->top) alternatives[tok.token_bytes(t.id)] = t.logprob;
    top.push_back(alternatives);
    offsets.push_back(offset);
    offset += text.size();
  }
  return {{"tokens", tokens}, {"token_logprobs", token_logprobs}, {"top_logprobs", top}, {"text_offset", offsets}};
}

// Chat's form: a list of {token, logprob, bytes, top_logprobs}.
json chat_logprobs(const std::vector<Piece>& pieces, const engine::Tokenizer& tok) {
  json content = json::array();
  for (const Piece& p : pieces) {
    if (p.token < 0 || !p.logprobs) continue;
    json top = json::array();
    for (const engine::TokenLogprob& t : p.logprobs->top) {
      const std::string text = tok.token_bytes(t.id);
      top.push_back({{"token", text}, {"logprob", t.logprob}, {"bytes", bytes_json(text)}});
    }
    const std::string text = tok.token_bytes(p.token);
    content.push_back(
        {{"token", text}, {"logprob", p.logprobs->chosen.logprob}, {"bytes", bytes_json(text)}, {"top_logprobs", top}});
  }
  return {{"content", content}};
}

json choice_logprobs(const ResponseHead& head, const std::vector<Piece>& pieces, const engine::Tokenizer& tok,
                     bool logprobs, std::size_t offset) {
  if (!logprobs) return nullptr;
  return head.endpoint == Endpoint::chat ? chat_logprobs(pieces, tok) : completion_logprobs(pieces, tok, offset);
}

json head_json(const ResponseHead& head, bool chunk) {
  const char* object = head.endpoint == Endpoint::chat ? (chunk ? "chat.completion.chunk" : "chat.completion")
                                                        : "text_completion";
  return {{"id", head.id}, {"object", object}, {"created", head.created}, {"model", head.model},
          {"system_fingerprint", "lowbit"}};
}

}  // namespace

std::string dump(const json& value) { return value.dump(-1, ' ', false, json::error_handler_t::replace); }

json error_json(const ApiError& e) {
  return {{"error",
           {{"message", e.what()},
            {"type", e.type},
            {"param", e.param.empty() ? json(nullptr) : json(e.param)},
            {"code", e.code.empty() ? json(nullptr) : json(e.code)}}}};
}

json usage_json(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}

const char* finish_reason(engine::FinishReason reason) {
  return reason == engine::FinishReason::length ? "length" : "stop";
}

json completion_json(const ResponseHead& head, const std::string& text, const std::vector<Piece>& pieces,
                     const engine::Tokenizer& tokenizer, bool logprobs, const char* finish, const Usage& usage) {
  json out = head_json(head, false);
  json choice = {{"index", 0}, {"logprobs", choice_logprobs(head, pieces, tokenizer, logprobs, 0)},
                 {"finish_reason", finish}};
  if (head.endpoint == Endpoint::chat) {
    choice["message"] = {{"role", "assistant"}, {"content", text}};
  } else {
    choice["text"] = text;
  }
  out["choices"] = json::array({choice});
  out["usage"] = usage_json(usage);
  return out;
}

json chunk_json(const ResponseHead& head, const std::string& text, const std::vector<Piece>& pieces,
                const engine::Tokenizer& tokenizer, bool logprobs, const char* finish, bool first,
                std::size_t text_offset) {
  json out = head_json(head, true);
  json choice = {{"index", 0}, {"logprobs", choice_logprobs(head, pieces, tokenizer, logprobs, text_offset)},
                 {"finish_reason", finish ? json(finish) : json(nullptr)}};
  if (head.endpoint == Endpoint::chat) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (!finish || !text.empty()) delta["content"] = text;
    choice["delta"] = delta;
  } else {
    choice["text"] = text;
  }
  out["choices"] = json::array({choice});
  return out;
}

json usage_chunk_json(const ResponseHead& head, const Usage& usage) {
  json out = head_json(head, true);
  out["choices"] = json::array();
  out["usage"] = usage_json(usage);
  return out;
}

json models_json(const std::string& model, std::int64_t created) {
  return {{"object", "list"},
          {"data", json::array({{{"id", model}, {"object", "model"}, {"created", created}, {"owned_by", "lowbit"}}})}};
}

}  // namespace lowbit::serve
