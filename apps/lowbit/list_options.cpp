#include "list_options.h"

#include "lowbit/error.h"

namespace lowbit::cli {

std::vector<std::string> split_list(const std::string& text, const char* option) {
  std::vector<std::string> items;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = text.find(',', start);
    items.push_back(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    LOWBIT_CHECK(!items.back().empty(), option, ": empty item in '", text, "'");
    if (comma == std::string::npos) return items;
    start = comma + 1;
  }
}

std::vector<std::int64_t> parse_positive_integers(const std::string& text, const char* option, std::int64_t max) {
  std::vector<std::int64_t> out;
  for (const std::string& item : split_list(text, option)) {
    std::size_t used = 0;
    long long value = 0;
    try {
      value = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    LOWBIT_CHECK(used == item.size() && value >= 1 && value <= max, option, ": expected positive integers up to ", max,
                 ", got '", item, "'");
    out.push_back(value);
  }
  return out;
}

}  // namespace lowbit::cli
