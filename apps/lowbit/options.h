// Declarative command-line options for the `lowbit` subcommands: each option is
// declared once with its names (a long one, and a short one where llama.cpp's tools
// have it: "-m, --model"), its target variable and its help line; the parser and the
// usage text both come from that list. `--name VALUE` and `--name=VALUE` are accepted.
// A bad command line throws UsageError naming the option and what it expects, before
// the command does any work; main() turns it into exit status 2.
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "commands.h"
#include "lowbit/error.h"

namespace lowbit::cli {

// A command line that cannot be run as given (exit status 2), as opposed to work that
// failed (lowbit::Error and the rest, exit status 1).
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
  // The command the error belongs to ("lowbit bench gemm"), set by the dispatcher
  // that ran it; empty until then.
  const std::string& command() const { return command_; }
  UsageError in_command(std::string command) const {
    UsageError e(*this);
    e.command_ = std::move(command);
    return e;
  }

 private:
  std::string command_;
};

template <class... Parts>
void usage_check(bool ok, const Parts&... parts) {
  if (!ok) throw UsageError(lowbit::detail::concat(parts...));
}

// Whether the command line asked for --verbose (source locations in error messages).
bool verbose();

// Throws UsageError naming `option` unless `path` is a regular file this process can
// read (a directory, a missing file and an unreadable one each get their message).
// `note` follows the message of a missing file (e.g. where a default came from).
void check_input_file(const std::string& option, const std::string& path, const std::string& note = "");

class Options {
 public:
  // `command`: as typed ("lowbit bench gemm"); `summary`: the paragraph under the usage line.
  Options(std::string command, std::string summary);

  // `names` is "--name" or "-x, --name". Messages use the long name.
  // --name (no value): sets *target to true.
  void flag(const std::string& names, bool* target, const std::string& help);
  // --name VALUE, non-empty.
  void text(const std::string& names, std::string* target, const std::string& metavar, const std::string& help);
  // --name PATH: a regular file that can be read, checked when parsed.
  void input_file(const std::string& names, std::string* target, const std::string& help);
  // --name VALUE, one of `choices`; repeatable: each use appends.
  void choices(const std::string& names, std::vector<std::string>* target, const std::vector<std::string>& choices,
               const std::string& help);
  void choice(const std::string& names, std::string* target, const std::vector<std::string>& choices,
              const std::string& help);
  // --name N: an integer in [min, max].
  void integer(const std::string& names, std::int64_t* target, std::int64_t min, std::int64_t max,
               const std::string& help);
  // --name N: one of `allowed`.
  void integer_of(const std::string& names, std::int64_t* target, const std::vector<std::int64_t>& allowed,
                  const std::string& help);
  // --name X: a finite number in [min, max].
  void number(const std::string& names, double* target, double min, double max, const std::string& help);

  // Parses args. Returns an exit status when the command should stop here (0 after
  // --help or --version), nothing otherwise. Throws UsageError for an unknown option,
  // a missing or bad value.
  std::optional<int> parse(const Args& args);
  // Whether the user gave the option (by its long name) on the command line.
  bool given(const std::string& long_name) const;
  // A warning on stderr for each of `long_names` the user gave: "--sink is ignored <why>".
  void warn_ignored(const std::vector<std::string>& long_names, const std::string& why) const;
  void print_usage(std::ostream& out) const;
  const std::string& command() const { return command_; }

 private:
  struct Option {
    std::string short_name, long_name, metavar, help;
    bool takes_value = true;
    std::function<void(const std::string&)> apply;
  };
  void add(const std::string& names, std::string metavar, std::string help, bool takes_value,
           std::function<void(const std::string&)> apply);
  const Option* find(const std::string& name) const;
  std::string command_, summary_;
  std::vector<Option> options_;
  std::set<std::string> given_;
};

// The message of an exception as the user should see it: lowbit::Error messages end
// in the source location "[file.cpp:123]", which is kept only with --verbose.
std::string user_message(const std::exception& e);

}  // namespace lowbit::cli
