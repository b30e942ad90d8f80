// Commands that hold subcommands (`lowbit`, `lowbit bench`, `lowbit eval`): a table of
// names, one-line summaries and entry points, from which both the dispatch and the
// usage text come.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include "commands.h"

namespace lowbit::cli {

struct Subcommand {
  std::string name;     // "kvquant"
  std::string summary;  // one line (continuation lines start with a newline)
  int (*run)(const Args& args);
};

// Runs the subcommand named by args[0] with the rest. `group` is the command as typed
// ("lowbit bench"). No arguments: the usage on stderr, status 2; --help / -h: the usage
// on stdout, status 0; an unknown name: a UsageError naming the ones there are.
int run_subcommand(const std::string& group, const std::vector<Subcommand>& table, const Args& args);
void print_subcommands(std::ostream& out, const std::string& group, const std::vector<Subcommand>& table);

}  // namespace lowbit::cli
