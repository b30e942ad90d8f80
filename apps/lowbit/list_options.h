// Comma-separated option values ("1,8,16", "full,selective"), split and checked.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lowbit::cli {

// "a,b,c" -> {"a", "b", "c"}; an empty item is an error naming the option.
std::vector<std::string> split_list(const std::string& text, const char* option);

// "2048,8192" -> {2048, 8192}: integers in 1..max; throws lowbit::Error naming the option
// and the item at fault.
std::vector<std::int64_t> parse_positive_integers(const std::string& text, const char* option, std::int64_t max);

}  // namespace lowbit::cli
