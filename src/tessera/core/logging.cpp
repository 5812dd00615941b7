#include "tessera/core/logging.h"

#include <cstdio>
#include <mutex>

namespace tessera::log {

namespace {
int g_rank = 0;
int g_world = 1;
int g_output_rank = 0;
std::mutex g_mutex;
}  // namespace

void set_rank(int rank, int world_size) {
  g_rank = rank;
  g_world = world_size;
}
void set_output_rank(int rank) { g_output_rank = rank; }
bool is_output_rank() { return g_rank == g_output_rank; }
int rank() { return g_rank; }

void info_line(const std::string& line) {
  std::lock_guard<std::mutex> lock(g_mutex);
  std::fprintf(stdout, "%s\n", line.c_str());
  std::fflush(stdout);
}

static void prefixed(const char* level, const std::string& line) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_world > 1) std::fprintf(stderr, "[rank %d] %s: %s\n", g_rank, level, line.c_str());
  else std::fprintf(stderr, "%s: %s\n", level, line.c_str());
  std::fflush(stderr);
}

void warn_line(const std::string& line) { prefixed("warning", line); }
void error_line(const std::string& line) { prefixed("error", line); }

}  // namespace tessera::log
