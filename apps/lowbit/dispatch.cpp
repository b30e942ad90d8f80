#include "dispatch.h"

#include <algorithm>
#include <iostream>

#include "options.h"

namespace lowbit::cli {

void print_subcommands(std::ostream& out, const std::string& group, const std::vector<Subcommand>& table) {
  std::size_t width = 0;
  for (const Subcommand& s : table) width = std::max(width, s.name.size());
  out << "usage: " << group << " <command> [options]\n\ncommands:\n";
  for (const Subcommand& s : table) {
    std::string summary = s.summary;
    for (std::size_t at = summary.find('\n'); at != std::string::npos; at = summary.find('\n', at + 1)) {
      summary.insert(at + 1, width + 4, ' ');
    }
    out << "  " << s.name << std::string(width + 2 - s.name.size(), ' ') << summary << "\n";
  }
  out << "\nRun `" << group << " <command> --help` for a command's options.\n";
}

int run_subcommand(const std::string& group, const std::vector<Subcommand>& table, const Args& args) {
  if (args.empty()) {
    print_subcommands(std::cerr, group, table);
    return 2;
  }
  if (args[0] == "--help" || args[0] == "-h") {
    print_subcommands(std::cout, group, table);
    return 0;
  }
  const auto it = std::find_if(table.begin(), table.end(), [&](const Subcommand& s) { return s.name == args[0]; });
  if (it == table.end()) {
    std::string names;
    for (const Subcommand& s : table) names += (names.empty() ? "" : ", ") + s.name;
    throw UsageError("unknown command '" + args[0] + "' (available: " + names + ")").in_command(group);
  }
  try {
    return it->run(Args(args.begin() + 1, args.end()));
  } catch (const UsageError& e) {
    if (!e.command().empty()) throw;
    throw e.in_command(group + " " + it->name);
  }
}

}  // namespace lowbit::cli
