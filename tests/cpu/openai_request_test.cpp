// lowbit serve's request parsing (apps/lowbit/serve/openai_request.h) and response
// shapes, without a server: every field's type and range checks name the field; the
// sampling defaults are kept where a request says nothing; the chat template of the
// default model (skipped without it) writes multi-turn conversations.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/gguf/reader.h"
#include "engine/tokenizer/tokenizer.h"
#include "lowbit/error.h"
#include "serve/api_error.h"
#include "serve/openai_request.h"
#include "serve/openai_response.h"

namespace lowbit::test {
namespace {

using serve::ApiError;
using serve::Endpoint;
using serve::parse_request;

engine::SamplingParams defaults() {
  engine::SamplingParams d;
  d.temperature = 0.8f;
  d.top_k = 40;
  return d;
}

// The ApiError's status and whether its message contains `needle`.
::testing::AssertionResult refused(const std::string& body, Endpoint endpoint, int status, const std::string& needle) {
  try {
    parse_request(body, endpoint, defaults());
  } catch (const ApiError& e) {
    if (e.status == status && std::string(e.what()).find(needle) != std::string::npos) {
      return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure() << "ApiError " << e.status << " \"" << e.what() << "\"";
  }
  return ::testing::AssertionFailure() << "accepted " << body;
}

TEST(OpenAiRequest, CompletionFields) {
  const serve::ApiRequest r = parse_request(
      R"({"model": "m", "prompt": "Hello", "max_tokens": 7, "temperature": 0.2, "top_p": 0.5, "seed": -3,
          "stop": ["\n", "END"], "stream": true, "stream_options": {"include_usage": true}, "logprobs": 2,
          "presence_penalty": 0.5, "frequency_penalty": -1, "top_k": 5, "min_p": 0.1, "repeat_penalty": 1.1,
          "repeat_last_n": -1, "ignore_eos": true, "user": "u", "logit_bias": {}})",
      Endpoint::completions, defaults());
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(r.prompt, "Hello");
  EXPECT_EQ(*r.max_tokens, 7);
  EXPECT_FLOAT_EQ(r.sampling.temperature, 0.2f);
  EXPECT_FLOAT_EQ(r.sampling.top_p, 0.5f);
  EXPECT_EQ(r.sampling.seed, static_cast<std::uint64_t>(-3));
  EXPECT_TRUE(r.seed_given);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"\n", "END"}));
  EXPECT_TRUE(r.stream && r.include_usage && r.ignore_eos);
  EXPECT_EQ(r.logprobs, 2);
  EXPECT_EQ(r.sampling.top_k, 5);
  EXPECT_EQ(r.sampling.penalty_last_n, -1);
  EXPECT_FLOAT_EQ(r.sampling.frequency_penalty, -1.0f);
}

TEST(OpenAiRequest, DefaultsStayWhereTheRequestIsSilent) {
  const serve::ApiRequest r = parse_request(R"({"prompt": [1, 2, 3], "temperature": null})", Endpoint::completions,
                                            defaults());
  EXPECT_TRUE(r.prompt_is_tokens);
  EXPECT_EQ(r.prompt_tokens, (std::vector<std::int32_t>{1, 2, 3}));
  EXPECT_FALSE(r.max_tokens.has_value());
  EXPECT_FLOAT_EQ(r.sampling.temperature, 0.8f);
  EXPECT_EQ(r.sampling.top_k, 40);
  EXPECT_FALSE(r.seed_given);
  EXPECT_EQ(r.logprobs, -1);
  EXPECT_EQ(parse_request(R"({"prompt": ["one"]})", Endpoint::completions, defaults()).prompt, "one");
  EXPECT_EQ(parse_request(R"({"prompt": [[4, 5]]})", Endpoint::completions, defaults()).prompt_tokens.size(), 2u);
}

TEST(OpenAiRequest, ChatFields) {
  const serve::ApiRequest r = parse_request(
      R"({"messages": [{"role": "developer", "content": "Be brief."},
                       {"role": "user", "content": [{"type": "text", "text": "Hi "}, {"type": "text", "text": "there"}]},
                       {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "Again"}],
          "max_completion_tokens": 9, "logprobs": true, "top_logprobs": 4})",
      Endpoint::chat, defaults());
  ASSERT_EQ(r.messages.size(), 4u);
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[1].content, "Hi there");
  EXPECT_EQ(*r.max_tokens, 9);
  EXPECT_EQ(r.logprobs, 4);
  EXPECT_EQ(parse_request(R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true})", Endpoint::chat,
                          defaults())
                .logprobs,
            0);
}

TEST(OpenAiRequest, EveryBadFieldIsNamed) {
  const Endpoint c = Endpoint::completions, chat = Endpoint::chat;
  EXPECT_TRUE(refused("{oops", c, 400, "the body is not valid JSON"));
  EXPECT_TRUE(refused("", c, 400, "the body is not valid JSON"));
  EXPECT_TRUE(refused("\"text\"", c, 400, "the body must be a JSON object, got a string"));
  EXPECT_TRUE(refused(R"({"max_tokens": 3})", c, 400, "prompt: missing"));
  EXPECT_TRUE(refused(R"({"prompt": {}})", c, 400, "prompt: expected a string"));
  EXPECT_TRUE(refused(R"({"prompt": []})", c, 400, "got an empty array"));
  EXPECT_TRUE(refused(R"({"prompt": ["a", "b"]})", c, 400, "one prompt a request"));
  EXPECT_TRUE(refused(R"({"prompt": [1, -2]})", c, 400, "prompt[1]: expected an integer in [0, "));
  EXPECT_TRUE(refused(R"({"prompt": "x", "max_tokens": 0})", c, 400, "max_tokens: expected an integer >= 1, got 0"));
  EXPECT_TRUE(refused(R"({"prompt": "x", "max_tokens": 2.5})", c, 400, "max_tokens: expected an integer, got a number"));
  EXPECT_TRUE(refused(R"({"prompt": "x", "max_tokens": 99999999999999999999})", c, 400, "max_tokens"));
  EXPECT_TRUE(refused(R"({"prompt": "x", "temperature": -0.1})", c, 400, "temperature: expected a number in [0, 2]"));
  EXPECT_TRUE(refused(R"({"prompt": "x", "temperature": true})", c, 400, "temperature: expected a number, got a boolean"));
  EXPECT_TRUE(refused(R"({"prompt": "x", "top_p": 1.5})", c, 400, "top_p"));
  EXPECT_TRUE(refused(R"({"prompt": "x", "top_k": -1})", c, 400, "top_k"));
  EXPECT_TRUE(refused(R"({"prompt": "x", "presence_penalty": 2.5})", c, 400, "presence_penalty"));
  EXPECT_TRUE(refused(R"({"prompt": "x", "repeat_penalty": 0})", c, 400, "repeat_penalty: expected a number > 0"));
  EXPECT_TRUE(refused(R"({"prompt": "x", "seed": "7"})", c, 400, "seed: expected an integer, got a string"));
  EXPECT_TRUE(refused(R"({"prompt": "x", "n": 3})", c, 400, "n: only 1 is supported"));
  EXPECT_TRUE(refused(R"({"prompt": "x", "best_of": 2})", c, 400, "best_of: only 1"));
  EXPECT_TRUE(refused(R"({"prompt": "x", "echo": true})", c, 400, "echo: not supported"));
  EXPECT_TRUE(refused(R"({"prompt": "x", "logprobs": 6})", c, 400, "logprobs: expected an integer in [0, 5]"));
  EXPECT_TRUE(refused(R"({"prompt": "x", "stop": 5})", c, 400, "stop: expected a string or an array"));
  EXPECT_TRUE(refused(R"({"prompt": "x", "stop": ["a", ""]})", c, 400, "stop[1]: expected a non-empty string"));
  EXPECT_TRUE(refused(R"({"prompt": "x", "stream_options": 1})", c, 400, "stream_options: expected an object"));
  EXPECT_TRUE(refused(R"({"prompt": "x", "logit_bias": {"5": 1}})", c, 400, "logit_bias: not supported"));
  EXPECT_TRUE(refused(R"({"prompt": "x", "model": 5})", c, 400, "model: expected a string"));
  EXPECT_TRUE(refused(R"({})", chat, 400, "messages: missing"));
  EXPECT_TRUE(refused(R"({"messages": [5]})", chat, 400, "messages[0]: expected an object"));
  EXPECT_TRUE(refused(R"({"messages": [{"content": "x"}]})", chat, 400, "messages[0].role: missing"));
  EXPECT_TRUE(refused(R"({"messages": [{"role": "tool", "content": "x"}]})", chat, 400, "messages[0].role: expected"));
  EXPECT_TRUE(refused(R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", chat, 400,
                      "messages[0].content[0].type: only \"text\" parts"));
  EXPECT_TRUE(refused(R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 21, "logprobs": true})",
                      chat, 400, "top_logprobs: expected an integer in [0, 20]"));
}

TEST(OpenAiResponse, Shapes) {
  const serve::ResponseHead head{Endpoint::chat, "chatcmpl-1", 1700000000, "m"};
  const nlohmann::json error = serve::error_json(ApiError(400, "x: bad", "x"));
  EXPECT_EQ(error["error"]["message"], "x: bad");
  EXPECT_EQ(error["error"]["param"], "x");
  EXPECT_TRUE(error["error"]["code"].is_null());
  EXPECT_EQ(serve::usage_json({5, 3})["total_tokens"], 8);
  // Invalid UTF-8 (a token cut inside a character) becomes U+FFFD, not an exception.
  EXPECT_EQ(serve::dump(nlohmann::json("a\xe2\x82")), "\"a\xef\xbf\xbd\"");
  EXPECT_EQ(serve::finish_reason(engine::FinishReason::length), std::string("length"));
  EXPECT_EQ(serve::finish_reason(engine::FinishReason::stop), std::string("stop"));
}

std::string real_model_path() {
  if (const char* env = std::getenv("LOWBIT_MODEL")) return env;
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "") + "/.cache/lowbit/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

TEST(ChatTemplate, MultiTurnConversationsOnTheDefaultModel) {
  if (!std::filesystem::exists(real_model_path())) {
    GTEST_SKIP() << "no model at " << real_model_path() << " (run scripts/fetch-model.sh or set LOWBIT_MODEL)";
  }
  const engine::GgufFile file = engine::GgufFile::open(real_model_path());
  const engine::Tokenizer tok = engine::Tokenizer::from_gguf(file);
  const std::string system = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
                             "Face<|im_end|>\n";
  const std::vector<engine::ChatMessage> turns{{"user", "Hi"}, {"assistant", "Hello!"}, {"user", "Bye"}};
  EXPECT_EQ(tok.apply_chat_template(turns), system +
                                                "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n"
                                                "<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n");
  // The template writes its default system message only when the conversation has none.
  const std::vector<engine::ChatMessage> with_system{{"system", "Be terse."}, {"user", "Hi"}};
  EXPECT_EQ(tok.apply_chat_template(with_system),
            "<|im_start|>system\nBe terse.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(tok.apply_chat_template("Hi"), tok.apply_chat_template(std::vector<engine::ChatMessage>{{"user", "Hi"}}));
  EXPECT_THROW(tok.apply_chat_template(std::vector<engine::ChatMessage>{}), lowbit::Error);
}

}  // namespace
}  // namespace lowbit::test
