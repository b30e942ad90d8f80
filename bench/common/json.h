// A minimal JSON writer for benchmark results: objects keep insertion order,
// non-finite numbers become null.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace lowbit::bench {

class Json {
 public:
  using Object = std::vector<std::pair<std::string, Json>>;
  using Array = std::vector<Json>;

  Json() : value_(nullptr) {}
  Json(std::nullptr_t) : value_(nullptr) {}
  Json(bool b) : value_(b) {}
  Json(double d) : value_(d) {}
  Json(int i) : value_(static_cast<double>(i)) {}
  Json(std::int64_t i) : value_(static_cast<double>(i)) {}
  Json(const char* s) : value_(std::string(s)) {}
  Json(std::string s) : value_(std::move(s)) {}
  template <class T>
  Json(const std::optional<T>& o) : Json(o ? Json(*o) : Json()) {}

  static Json object() { Json j; j.value_ = Object{}; return j; }
  static Json array() { Json j; j.value_ = Array{}; return j; }

  Json& set(const std::string& key, Json value);  // on objects
  Json& push(Json value);                         // on arrays

  std::string dump(int indent = 2) const;
  // dump() and a newline into `path`, complete or not at all (write_file_atomically).
  void write_file(const std::string& path) const;

 private:
  void dump_to(std::string& out, int indent, int depth) const;
  std::variant<std::nullptr_t, bool, double, std::string, Object, Array> value_;
};

}  // namespace lowbit::bench
