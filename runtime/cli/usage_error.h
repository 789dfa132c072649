// Command-line usage errors of endor-infer: printed as one line like every error, but exit 2.
#pragma once

#include <stdexcept>

namespace endor::cli {

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace endor::cli
