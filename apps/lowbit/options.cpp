#include "options.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <regex>

#include "version.h"

namespace lowbit::cli {
namespace {

bool g_verbose = false;

std::string join(const std::vector<std::string>& items, const char* separator) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) out += (i ? separator : "") + items[i];
  return out;
}

void check_choice(const std::string& name, const std::string& value, const std::vector<std::string>& choices) {
  usage_check(std::find(choices.begin(), choices.end(), value) != choices.end(), name, ": unknown value '", value,
              "' (expected one of: ", join(choices, ", "), ")");
}

std::int64_t parse_integer(const std::string& name, const std::string& v) {
  long long parsed = 0;
  std::size_t used = 0;
  try {
    parsed = std::stoll(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  usage_check(used == v.size() && used > 0, name, ": expected an integer, got '", v, "'");
  return parsed;
}

// Levenshtein distance, for "did you mean" on unknown options.
std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

}  // namespace

bool verbose() { return g_verbose; }

void check_input_file(const std::string& option, const std::string& path, const std::string& note) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  usage_check(fs::exists(status), option, ": no file at '", path, "'", note);
  usage_check(!fs::is_directory(status), option, ": '", path, "' is a directory, expected a file");
  usage_check(fs::is_regular_file(status), option, ": '", path, "' is not a regular file");
  std::ifstream in(path, std::ios::binary);
  usage_check(in.is_open(), option, ": cannot read '", path, "' (permission denied?)");
}

Options::Options(std::string command, std::string summary) : command_(std::move(command)), summary_(std::move(summary)) {
  add("-h, --help", "", "print this help", false, nullptr);
  add("--version", "", "print lowbit's version and build", false, nullptr);
  add("--verbose", "", "show where in lowbit's source an error was raised", false,
      [](const std::string&) { g_verbose = true; });
}

void Options::add(const std::string& names, std::string metavar, std::string help, bool takes_value,
                  std::function<void(const std::string&)> apply) {
  Option o{"", "", std::move(metavar), std::move(help), takes_value, std::move(apply)};
  std::size_t start = 0;
  while (start < names.size()) {
    std::size_t end = names.find(',', start);
    if (end == std::string::npos) end = names.size();
    std::string name = names.substr(start, end - start);
    name.erase(0, name.find_first_not_of(' '));
    name.erase(name.find_last_not_of(' ') + 1);
    (name.rfind("--", 0) == 0 ? o.long_name : o.short_name) = name;
    start = end + 1;
  }
  LOWBIT_CHECK(!o.long_name.empty(), "option '", names, "' has no --long name");
  LOWBIT_CHECK(!find(o.long_name) && (o.short_name.empty() || !find(o.short_name)), "option '", names,
               "' is declared twice");
  options_.push_back(std::move(o));
}

const Options::Option* Options::find(const std::string& name) const {
  for (const Option& o : options_) {
    if (o.long_name == name || (!o.short_name.empty() && o.short_name == name)) return &o;
  }
  return nullptr;
}

void Options::flag(const std::string& names, bool* target, const std::string& help) {
  add(names, "", help, false, [target](const std::string&) { *target = true; });
}

void Options::text(const std::string& names, std::string* target, const std::string& metavar,
                   const std::string& help) {
  add(names, metavar, help, true, [target](const std::string& v) { *target = v; });
}

void Options::input_file(const std::string& names, std::string* target, const std::string& help) {
  add(names, "PATH", help, true, nullptr);
  options_.back().apply = [name = options_.back().long_name, target](const std::string& v) {
    check_input_file(name, v);
    *target = v;
  };
}

void Options::choices(const std::string& names, std::vector<std::string>* target,
                      const std::vector<std::string>& choices, const std::string& help) {
  add(names, "NAME", help + " (repeatable): " + join(choices, " "), true, nullptr);
  options_.back().apply = [name = options_.back().long_name, target, choices](const std::string& v) {
    check_choice(name, v, choices);
    target->push_back(v);
  };
}

void Options::choice(const std::string& names, std::string* target, const std::vector<std::string>& choices,
                     const std::string& help) {
  add(names, join(choices, "|"), help, true, nullptr);
  options_.back().apply = [name = options_.back().long_name, target, choices](const std::string& v) {
    check_choice(name, v, choices);
    *target = v;
  };
}

void Options::integer(const std::string& names, std::int64_t* target, std::int64_t min, std::int64_t max,
                      const std::string& help) {
  add(names, "N", help, true, nullptr);
  options_.back().apply = [name = options_.back().long_name, target, min, max](const std::string& v) {
    const std::int64_t parsed = parse_integer(name, v);
    usage_check(parsed >= min && parsed <= max, name, ": expected ", min, " .. ", max, ", got ", parsed);
    *target = parsed;
  };
}

void Options::integer_of(const std::string& names, std::int64_t* target, const std::vector<std::int64_t>& allowed,
                         const std::string& help) {
  std::vector<std::string> spelled;
  for (std::int64_t a : allowed) spelled.push_back(std::to_string(a));
  add(names, join(spelled, "|"), help, true, nullptr);
  options_.back().apply = [name = options_.back().long_name, target, allowed, spelled](const std::string& v) {
    const std::int64_t parsed = parse_integer(name, v);
    usage_check(std::find(allowed.begin(), allowed.end(), parsed) != allowed.end(), name, ": expected ",
                join(spelled, " or "), ", got ", parsed);
    *target = parsed;
  };
}

void Options::number(const std::string& names, double* target, double min, double max, const std::string& help) {
  add(names, "X", help, true, nullptr);
  options_.back().apply = [name = options_.back().long_name, target, min, max](const std::string& v) {
    double parsed = 0;
    std::size_t used = 0;
    try {
      parsed = std::stod(v, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    usage_check(used == v.size() && used > 0 && std::isfinite(parsed), name, ": expected a number, got '", v, "'");
    usage_check(parsed >= min && parsed <= max, name, ": expected ", min, " .. ", max, ", got ", parsed);
    *target = parsed;
  };
}

std::optional<int> Options::parse(const Args& args) {
  // The value checks of --name=VALUE and --name VALUE run in order; --help and
  // --version win over any error in the same command line.
  for (const std::string& arg : args) {
    if (arg == "--help" || arg == "-h") {
      print_usage(std::cout);
      return 0;
    }
    if (arg == "--version") {
      std::cout << version_line() << "\n";
      return 0;
    }
  }
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string name = args[i], value;
    bool inline_value = false;
    if (const std::size_t eq = name.find('='); name.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      inline_value = true;
    }
    const Option* o = find(name);
    if (!o) {
      usage_check(!name.empty() && name[0] == '-', "unexpected argument '", name,
                  "' (every value follows its option, e.g. --prompt \"...\")");
      std::string hint;
      std::size_t best = 3;
      for (const Option& candidate : options_) {
        const std::size_t d = edit_distance(name, candidate.long_name);
        if (d < best) best = d, hint = candidate.long_name;
      }
      throw UsageError("unknown option '" + name + "'" + (hint.empty() ? "" : " (did you mean " + hint + "?)"));
    }
    given_.insert(o->long_name);
    if (!o->takes_value) {
      usage_check(!inline_value, o->long_name, ": takes no value, got '", value, "'");
      if (o->apply) o->apply("");
      continue;
    }
    if (!inline_value) {
      usage_check(i + 1 < args.size(), o->long_name, ": expected a value after it");
      value = args[++i];
    }
    usage_check(!value.empty(), o->long_name, ": expected a non-empty value");
    o->apply(value);
  }
  return std::nullopt;
}

bool Options::given(const std::string& long_name) const { return given_.count(long_name) != 0; }

void Options::warn_ignored(const std::vector<std::string>& long_names, const std::string& why) const {
  for (const std::string& name : long_names) {
    if (given(name)) std::cerr << command_ << ": warning: " << name << " is ignored " << why << "\n";
  }
}

void Options::print_usage(std::ostream& out) const {
  // Help text starts in one column; an option whose names are wider than it gets its
  // help on the next line.
  constexpr std::size_t kMaxColumn = 30;
  out << "usage: " << command_ << " [options]\n\n" << summary_ << "\n\noptions:\n";
  std::vector<std::string> heads;
  std::size_t width = 0;
  for (const Option& o : options_) {
    const std::string names = (o.short_name.empty() ? "    " : o.short_name + ", ") + o.long_name;
    heads.push_back(names + (o.metavar.empty() ? "" : " " + o.metavar));
    if (heads.back().size() <= kMaxColumn) width = std::max(width, heads.back().size());
  }
  for (std::size_t i = 0; i < options_.size(); ++i) {
    out << "  " << heads[i];
    if (heads[i].size() > width) {
      out << "\n" << std::string(width + 4, ' ');
    } else {
      out << std::string(width + 2 - heads[i].size(), ' ');
    }
    out << options_[i].help << "\n";
  }
}

std::string user_message(const std::exception& e) {
  const std::string message = e.what();
  if (verbose()) return message;
  static const std::regex location(R"( \[[A-Za-z0-9_.+-]+:[0-9]+\]$)");
  return std::regex_replace(message, location, "");
}

}  // namespace lowbit::cli
