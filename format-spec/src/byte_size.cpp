// Byte sizes as users type them (parse_byte_size) and as every program prints them (format_bytes):
// one set of binary units, so a size printed can be typed back.
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "endor/format.h"

namespace endor {

namespace {

// The units after bytes, each 1024 times the one before: "3G" reads and "3.00 GiB" prints 3 << 30.
constexpr char kUnitLetters[] = {'K', 'M', 'G', 'T'};
constexpr int kUnitCount = int(sizeof kUnitLetters);

// 1024^(k+1) for the k-th unit letter, 1 for none; 0 when `unit` is not one.
double unit_scale(const std::string& unit) {
  if (unit.empty()) return 1;
  double scale = 1;
  for (int k = 0; k < kUnitCount; ++k) {
    scale *= 1024.0;
    if (unit.size() == 1 && unit[0] == kUnitLetters[k]) return scale;
  }
  return 0;
}

}  // namespace

uint64_t parse_byte_size(const std::string& text) {
  const std::string bad = "invalid size '" + text + "' (examples: 3G, 512M, 1.5T, 4096)";
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  if (i == 0) throw Error(bad);
  const std::string number = text.substr(0, i);
  if (number.find('.') != number.rfind('.') || number == ".") throw Error(bad);
  char* end = nullptr;
  const double value = std::strtod(number.c_str(), &end);
  if (end != number.c_str() + number.size() || !std::isfinite(value) || value < 0) throw Error(bad);
  std::string unit = text.substr(i);
  for (char& c : unit) c = char(std::toupper(static_cast<unsigned char>(c)));
  if (unit.size() >= 2 && unit.compare(unit.size() - 2, 2, "IB") == 0) unit.resize(unit.size() - 2);
  else if (!unit.empty() && unit.back() == 'B') unit.pop_back();
  const double scale = unit_scale(unit);
  if (scale == 0) throw Error(bad);
  const double bytes = value * scale;
  if (bytes >= 1.8e19) throw Error(bad);
  return uint64_t(bytes);
}

uint64_t parse_memory_size(const std::string& text, const std::string& option) {
  try {
    return parse_byte_size(text);
  } catch (const Error& e) {
    throw Error(option + ": " + e.what());
  }
}

std::string format_bytes(uint64_t bytes) {
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double v = double(bytes) / 1024;
  int k = 0;
  while (v >= 1024 && k + 1 < kUnitCount) {
    v /= 1024;
    ++k;
  }
  char text[40];
  std::snprintf(text, sizeof text, "%.2f %ciB", v, kUnitLetters[k]);
  return text;
}

}  // namespace endor
