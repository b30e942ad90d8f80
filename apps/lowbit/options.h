// Declarative command-line options for the `lowbit` subcommands: each option is
// declared once with its target variable and help line, and the parser and the
// usage text both come from that list. Bad values throw lowbit::Error naming the
// option and what it expects.
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "commands.h"

namespace lowbit::cli {

class Options {
 public:
  // `command`: as typed ("lowbit bench gemm"); `summary`: the paragraph under the usage line.
  Options(std::string command, std::string summary);

  // --name (no value): sets *target to true.
  void flag(const std::string& name, bool* target, const std::string& help);
  // --name VALUE
  void text(const std::string& name, std::string* target, const std::string& metavar, const std::string& help);
  // --name VALUE, one of `choices`; repeatable: each use appends.
  void choices(const std::string& name, std::vector<std::string>* target, const std::vector<std::string>& choices,
               const std::string& help);
  void choice(const std::string& name, std::string* target, const std::vector<std::string>& choices,
              const std::string& help);
  // --name N: an integer in [min, max].
  void integer(const std::string& name, std::int64_t* target, std::int64_t min, std::int64_t max,
               const std::string& help);
  // --name X: a finite number in [min, max].
  void number(const std::string& name, double* target, double min, double max, const std::string& help);

  // Parses args. Returns an exit status when the command should stop here (0 after
  // --help, 2 after an unknown option, with the usage on stderr), nothing otherwise.
  std::optional<int> parse(const Args& args) const;
  void print_usage(std::ostream& out) const;

 private:
  struct Option {
    std::string name, metavar, help;
    bool takes_value = true;
    std::function<void(const std::string&)> apply;
  };
  void add(Option option);
  std::string command_, summary_;
  std::vector<Option> options_;
};

}  // namespace lowbit::cli
