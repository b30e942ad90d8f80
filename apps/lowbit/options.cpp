#include "options.h"

#include <algorithm>
#include <cmath>
#include <iostream>
#include <sstream>

#include "lowbit/error.h"

namespace lowbit::cli {
namespace {

std::string join(const std::vector<std::string>& items, const char* separator) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) out += (i ? separator : "") + items[i];
  return out;
}

void check_choice(const std::string& name, const std::string& value, const std::vector<std::string>& choices) {
  LOWBIT_CHECK(std::find(choices.begin(), choices.end(), value) != choices.end(), name, ": unknown value '", value,
               "' (expected one of: ", join(choices, ", "), ")");
}

}  // namespace

Options::Options(std::string command, std::string summary) : command_(std::move(command)), summary_(std::move(summary)) {
  add({"--help", "", "print this help", false, nullptr});
}

void Options::add(Option option) { options_.push_back(std::move(option)); }

void Options::flag(const std::string& name, bool* target, const std::string& help) {
  add({name, "", help, false, [target](const std::string&) { *target = true; }});
}

void Options::text(const std::string& name, std::string* target, const std::string& metavar,
                   const std::string& help) {
  add({name, metavar, help, true, [name, target](const std::string& v) {
         LOWBIT_CHECK(!v.empty(), name, ": expected a non-empty value");
         *target = v;
       }});
}

void Options::choices(const std::string& name, std::vector<std::string>* target,
                      const std::vector<std::string>& choices, const std::string& help) {
  add({name, "NAME", help + " (repeatable): " + join(choices, " "), true,
       [name, target, choices](const std::string& v) {
         check_choice(name, v, choices);
         target->push_back(v);
       }});
}

void Options::choice(const std::string& name, std::string* target, const std::vector<std::string>& choices,
                     const std::string& help) {
  add({name, join(choices, "|"), help, true, [name, target, choices](const std::string& v) {
         check_choice(name, v, choices);
         *target = v;
       }});
}

void Options::integer(const std::string& name, std::int64_t* target, std::int64_t min, std::int64_t max,
                      const std::string& help) {
  add({name, "N", help, true, [name, target, min, max](const std::string& v) {
         long long parsed = 0;
         std::size_t used = 0;
         try {
           parsed = std::stoll(v, &used);
         } catch (const std::exception&) {
           used = 0;
         }
         LOWBIT_CHECK(used == v.size() && used > 0, name, ": expected an integer, got '", v, "'");
         LOWBIT_CHECK(parsed >= min && parsed <= max, name, ": expected ", min, " .. ", max, ", got ", parsed);
         *target = parsed;
       }});
}

void Options::number(const std::string& name, double* target, double min, double max, const std::string& help) {
  add({name, "X", help, true, [name, target, min, max](const std::string& v) {
         double parsed = 0;
         std::size_t used = 0;
         try {
           parsed = std::stod(v, &used);
         } catch (const std::exception&) {
           used = 0;
         }
         LOWBIT_CHECK(used == v.size() && used > 0 && std::isfinite(parsed), name, ": expected a number, got '", v,
                      "'");
         LOWBIT_CHECK(parsed >= min && parsed <= max, name, ": expected ", min, " .. ", max, ", got ", parsed);
         *target = parsed;
       }});
}

std::optional<int> Options::parse(const Args& args) const {
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--help" || arg == "-h") {
      print_usage(std::cout);
      return 0;
    }
    const auto it = std::find_if(options_.begin(), options_.end(), [&](const Option& o) { return o.name == arg; });
    if (it == options_.end()) {
      std::cerr << command_ << ": unknown option '" << arg << "'\n\n";
      print_usage(std::cerr);
      return 2;
    }
    if (!it->takes_value) {
      it->apply("");
      continue;
    }
    LOWBIT_CHECK(i + 1 < args.size(), arg, ": expected a value after it");
    it->apply(args[++i]);
  }
  return std::nullopt;
}

void Options::print_usage(std::ostream& out) const {
  out << "usage: " << command_ << " [options]\n\n" << summary_ << "\n\noptions:\n";
  std::size_t width = 0;
  std::vector<std::string> heads;
  for (const Option& o : options_) {
    heads.push_back(o.name + (o.metavar.empty() ? "" : " " + o.metavar));
    width = std::max(width, heads.back().size());
  }
  for (std::size_t i = 0; i < options_.size(); ++i) {
    out << "  " << heads[i] << std::string(width + 2 - heads[i].size(), ' ') << options_[i].help << "\n";
  }
}

}  // namespace lowbit::cli
