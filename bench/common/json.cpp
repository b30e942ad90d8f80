#include "json.h"

#include <cmath>
#include <cstdio>

#include "core/file_io.h"
#include "lowbit/error.h"

namespace lowbit::bench {

Json& Json::set(const std::string& key, Json value) {
  auto* object = std::get_if<Object>(&value_);
  LOWBIT_CHECK(object != nullptr, "Json::set: not an object");
  for (auto& entry : *object) {
    if (entry.first == key) {
      entry.second = std::move(value);
      return *this;
    }
  }
  object->emplace_back(key, std::move(value));
  return *this;
}

Json& Json::push(Json value) {
  auto* array = std::get_if<Array>(&value_);
  LOWBIT_CHECK(array != nullptr, "Json::push: not an array");
  array->push_back(std::move(value));
  return *this;
}

namespace {

void escape_to(std::string& out, const std::string& s) {
  out += '"';
  for (const char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buffer[8];
          std::snprintf(buffer, sizeof buffer, "\\u%04x", c);
          out += buffer;
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

}  // namespace

void Json::dump_to(std::string& out, int indent, int depth) const {
  const std::string pad(static_cast<std::size_t>(indent * (depth + 1)), ' ');
  const std::string close_pad(static_cast<std::size_t>(indent * depth), ' ');
  const char* newline = indent ? "\n" : "";
  if (std::holds_alternative<std::nullptr_t>(value_)) {
    out += "null";
  } else if (const bool* b = std::get_if<bool>(&value_)) {
    out += *b ? "true" : "false";
  } else if (const double* d = std::get_if<double>(&value_)) {
    if (!std::isfinite(*d)) {
      out += "null";
    } else {
      char buffer[32];
      std::snprintf(buffer, sizeof buffer, "%.10g", *d);
      out += buffer;
    }
  } else if (const std::string* s = std::get_if<std::string>(&value_)) {
    escape_to(out, *s);
  } else if (const Object* object = std::get_if<Object>(&value_)) {
    out += '{';
    bool first = true;
    for (const auto& [key, value] : *object) {
      out += first ? "" : ",";
      out += newline + pad;
      escape_to(out, key);
      out += indent ? ": " : ":";
      value.dump_to(out, indent, depth + 1);
      first = false;
    }
    if (!object->empty()) out += newline + close_pad;
    out += '}';
  } else if (const Array* array = std::get_if<Array>(&value_)) {
    out += '[';
    bool first = true;
    for (const Json& value : *array) {
      out += first ? "" : ",";
      out += newline + pad;
      value.dump_to(out, indent, depth + 1);
      first = false;
    }
    if (!array->empty()) out += newline + close_pad;
    out += ']';
  }
}

std::string Json::dump(int indent) const {
  std::string out;
  dump_to(out, indent, 0);
  out += '\n';
  return out;
}

void Json::write_file(const std::string& path) const { write_file_atomically(path, dump() + "\n"); }

}  // namespace lowbit::bench
