// Rank-aware logging. info() prints on the output rank only (rank 0 by default; the last pipeline
// stage once pipelining exists); warn() and error() print on every rank, prefixed with the rank.
#pragma once
#include <string>

#include "tessera/core/error.h"

namespace tessera::log {

void set_rank(int rank, int world_size);
void set_output_rank(int rank);  // which rank prints info()
bool is_output_rank();
int rank();

void info_line(const std::string& line);
void warn_line(const std::string& line);
void error_line(const std::string& line);

template <typename... Args>
void info(const Args&... args) { if (is_output_rank()) info_line(detail::concat(args...)); }
template <typename... Args>
void warn(const Args&... args) { warn_line(detail::concat(args...)); }
template <typename... Args>
void error(const Args&... args) { error_line(detail::concat(args...)); }

}  // namespace tessera::log
