#include "serve/openai_request.h"

#include <cmath>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>

#include "serve/api_error.h"

namespace lowbit::serve {
namespace {

using nlohmann::json;

const char* type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "an integer";
    case json::value_t::number_float: return "a number";
    default: return "an unsupported value";
  }
}

// The field, when present and not null.
const json* field(const json& body, const char* name) {
  const auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

std::string format_number(double x) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%g", x);
  return buffer;
}

double number(const json& v, const std::string& name, double min, double max) {
  if (!v.is_number()) throw bad_request(name, std::string("expected a number, got ") + type_name(v));
  const double x = v.get<double>();
  if (!(x >= min && x <= max)) {
    throw bad_request(name, "expected a number in [" + format_number(min) + ", " + format_number(max) + "], got " +
                                v.dump());
  }
  return x;
}

std::int64_t integer(const json& v, const std::string& name, std::int64_t min, std::int64_t max) {
  if (!v.is_number_integer()) throw bad_request(name, std::string("expected an integer, got ") + type_name(v));
  const bool too_big = v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(max);
  const std::int64_t x = too_big ? max : v.get<std::int64_t>();
  if (too_big || x < min || x > max) {
    const std::string range = max == std::numeric_limits<std::int64_t>::max()
                                  ? ">= " + std::to_string(min)
                                  : "in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
    throw bad_request(name, "expected an integer " + range + ", got " + v.dump());
  }
  return x;
}

bool boolean(const json& v, const std::string& name) {
  if (!v.is_boolean()) throw bad_request(name, std::string("expected a boolean, got ") + type_name(v));
  return v.get<bool>();
}

std::string string(const json& v, const std::string& name) {
  if (!v.is_string()) throw bad_request(name, std::string("expected a string, got ") + type_name(v));
  return v.get<std::string>();
}

std::vector<std::int32_t> token_ids(const json& v, const std::string& name) {
  std::vector<std::int32_t> ids;
  for (std::size_t i = 0; i < v.size(); ++i) {
    ids.push_back(static_cast<std::int32_t>(
        integer(v[i], name + "[" + std::to_string(i) + "]", 0, std::numeric_limits<std::int32_t>::max())));
  }
  return ids;
}

// "prompt": a string, [string], [token ids] or [[token ids]]; one prompt a request.
void parse_prompt(const json& v, ApiRequest& r) {
  if (v.is_string()) {
    r.prompt = v.get<std::string>();
    return;
  }
  if (!v.is_array() || v.empty()) {
    throw bad_request("prompt", std::string("expected a string, an array of one string or an array of token ids, got ") +
                                    (v.is_array() ? "an empty array" : type_name(v)));
  }
  if (v[0].is_number_integer()) {
    r.prompt_tokens = token_ids(v, "prompt");
    r.prompt_is_tokens = true;
    return;
  }
  if (v.size() > 1) throw bad_request("prompt", "expected one prompt a request (n = 1), got " + std::to_string(v.size()));
  if (v[0].is_string()) {
    r.prompt = v[0].get<std::string>();
  } else if (v[0].is_array() && !v[0].empty()) {
    r.prompt_tokens = token_ids(v[0], "prompt[0]");
    r.prompt_is_tokens = true;
  } else {
    throw bad_request("prompt[0]", std::string("expected a string or an array of token ids, got ") + type_name(v[0]));
  }
}

// "content": a string, or an array of {"type": "text", "text": ...} parts.
std::string message_content(const json& v, const std::string& name) {
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_array()) throw bad_request(name, std::string("expected a string or an array of text parts, got ") + type_name(v));
  std::string text;
  for (std::size_t i = 0; i < v.size(); ++i) {
    const std::string part = name + "[" + std::to_string(i) + "]";
    if (!v[i].is_object()) throw bad_request(part, std::string("expected an object, got ") + type_name(v[i]));
    const json* type = field(v[i], "type");
    if (!type || string(*type, part + ".type") != "text") {
      throw bad_request(part + ".type", "only \"text\" parts are supported");
    }
    const json* t = field(v[i], "text");
    if (!t) throw bad_request(part + ".text", "missing");
    text += string(*t, part + ".text");
  }
  return text;
}

void parse_messages(const json& body, ApiRequest& r) {
  const json* messages = field(body, "messages");
  if (!messages) throw bad_request("messages", "missing (expected an array of {role, content})");
  if (!messages->is_array() || messages->empty()) {
    throw bad_request("messages", std::string("expected a non-empty array, got ") +
                                      (messages->is_array() ? "an empty array" : type_name(*messages)));
  }
  for (std::size_t i = 0; i < messages->size(); ++i) {
    const std::string name = "messages[" + std::to_string(i) + "]";
    const json& m = (*messages)[i];
    if (!m.is_object()) throw bad_request(name, std::string("expected an object, got ") + type_name(m));
    const json* role = field(m, "role");
    if (!role) throw bad_request(name + ".role", "missing");
    std::string role_name = string(*role, name + ".role");
    if (role_name == "developer") role_name = "system";
    if (role_name != "system" && role_name != "user" && role_name != "assistant") {
      throw bad_request(name + ".role", "expected \"system\", \"developer\", \"user\" or \"assistant\", got \"" +
                                            role_name + "\"");
    }
    const json* content = field(m, "content");
    if (!content) throw bad_request(name + ".content", "missing");
    r.messages.push_back({role_name, message_content(*content, name + ".content")});
  }
}

void parse_stop(const json& v, ApiRequest& r) {
  if (v.is_string()) {
    if (!v.get<std::string>().empty()) r.stop.push_back(v.get<std::string>());
    return;
  }
  if (!v.is_array()) throw bad_request("stop", std::string("expected a string or an array of strings, got ") + type_name(v));
  if (v.size() > 4) throw bad_request("stop", "expected at most 4 stop strings, got " + std::to_string(v.size()));
  for (std::size_t i = 0; i < v.size(); ++i) {
    const std::string s = string(v[i], "stop[" + std::to_string(i) + "]");
    if (s.empty()) throw bad_request("stop[" + std::to_string(i) + "]", "expected a non-empty string");
    r.stop.push_back(s);
  }
}

void parse_sampling(const json& body, ApiRequest& r) {
  engine::SamplingParams& s = r.sampling;
  if (const json* v = field(body, "temperature")) s.temperature = static_cast<float>(number(*v, "temperature", 0, 2));
  if (const json* v = field(body, "top_p")) {
    s.top_p = static_cast<float>(number(*v, "top_p", 0, 1));
    if (!(s.top_p > 0.0f)) throw bad_request("top_p", "expected a number in (0, 1], got " + v->dump());
  }
  if (const json* v = field(body, "top_k")) {
    s.top_k = static_cast<std::int32_t>(integer(*v, "top_k", 0, std::numeric_limits<std::int32_t>::max()));
  }
  if (const json* v = field(body, "min_p")) s.min_p = static_cast<float>(number(*v, "min_p", 0, 1));
  if (const json* v = field(body, "presence_penalty")) {
    s.presence_penalty = static_cast<float>(number(*v, "presence_penalty", -2, 2));
  }
  if (const json* v = field(body, "frequency_penalty")) {
    s.frequency_penalty = static_cast<float>(number(*v, "frequency_penalty", -2, 2));
  }
  if (const json* v = field(body, "repeat_penalty")) {
    s.repeat_penalty = static_cast<float>(number(*v, "repeat_penalty", 0, 1e6));
    if (!(s.repeat_penalty > 0.0f)) throw bad_request("repeat_penalty", "expected a number > 0, got " + v->dump());
  }
  if (const json* v = field(body, "repeat_last_n")) {
    s.penalty_last_n =
        static_cast<std::int32_t>(integer(*v, "repeat_last_n", -1, std::numeric_limits<std::int32_t>::max()));
  }
  if (const json* v = field(body, "seed")) {
    s.seed = static_cast<std::uint64_t>(
        integer(*v, "seed", std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max()));
    r.seed_given = true;
  }
}

}  // namespace

ApiRequest parse_request(const std::string& body, Endpoint endpoint, const engine::SamplingParams& defaults) {
  json j;
  try {
    j = json::parse(body);
  } catch (const json::parse_error& e) {
    throw bad_request("", std::string("the body is not valid JSON: ") + e.what());
  }
  if (!j.is_object()) throw bad_request("", std::string("the body must be a JSON object, got ") + type_name(j));
  ApiRequest r;
  r.endpoint = endpoint;
  r.sampling = defaults;
  if (const json* v = field(j, "model")) r.model = string(*v, "model");
  if (endpoint == Endpoint::completions) {
    const json* prompt = field(j, "prompt");
    if (!prompt) throw bad_request("prompt", "missing");
    parse_prompt(*prompt, r);
    if (const json* v = field(j, "echo"); v && boolean(*v, "echo")) throw bad_request("echo", "not supported");
    if (const json* v = field(j, "suffix"); v && !string(*v, "suffix").empty()) {
      throw bad_request("suffix", "not supported");
    }
    if (const json* v = field(j, "best_of"); v && integer(*v, "best_of", 1, 1 << 20) != 1) {
      throw bad_request("best_of", "only 1 is supported");
    }
    if (const json* v = field(j, "logprobs")) r.logprobs = static_cast<int>(integer(*v, "logprobs", 0, 5));
  } else {
    parse_messages(j, r);
    const bool want = field(j, "logprobs") && boolean(*field(j, "logprobs"), "logprobs");
    if (const json* v = field(j, "top_logprobs")) {
      const int top = static_cast<int>(integer(*v, "top_logprobs", 0, 20));
      if (!want) throw bad_request("top_logprobs", "needs \"logprobs\": true");
      r.logprobs = top;
    } else if (want) {
      r.logprobs = 0;
    }
  }
  // max_tokens (max_completion_tokens in newer chat clients).
  for (const char* name : {"max_tokens", "max_completion_tokens"}) {
    if (const json* v = field(j, name)) {
      r.max_tokens = integer(*v, name, 1, std::numeric_limits<std::int64_t>::max());
    }
  }
  if (const json* v = field(j, "n"); v && integer(*v, "n", 1, 1 << 20) != 1) {
    throw bad_request("n", "only 1 is supported");
  }
  if (const json* v = field(j, "stream")) r.stream = boolean(*v, "stream");
  if (const json* v = field(j, "stream_options")) {
    if (!v->is_object()) throw bad_request("stream_options", std::string("expected an object, got ") + type_name(*v));
    if (const json* u = field(*v, "include_usage")) r.include_usage = boolean(*u, "stream_options.include_usage");
  }
  if (const json* v = field(j, "stop")) parse_stop(*v, r);
  if (const json* v = field(j, "ignore_eos")) r.ignore_eos = boolean(*v, "ignore_eos");
  if (const json* v = field(j, "logit_bias"); v && !(v->is_object() && v->empty())) {
    throw bad_request("logit_bias", "not supported");
  }
  if (const json* v = field(j, "user")) string(*v, "user");
  parse_sampling(j, r);
  return r;
}

}  // namespace lowbit::serve
