#include "terminal.h"

#include "tessera/core/error.h"

namespace tessera::config_app {

namespace {
std::string trim(const std::string& s) {
  size_t begin = s.find_first_not_of(" \t\r\n");
  if (begin == std::string::npos) return "";
  size_t end = s.find_last_not_of(" \t\r\n");
  return s.substr(begin, end - begin + 1);
}
}  // namespace

std::string Terminal::ask(const std::string& prompt, const std::string& default_answer) {
  out_ << prompt << " [" << default_answer << "]: " << std::flush;
  std::string line;
  if (!std::getline(in_, line))
    TESSERA_CONFIG_FAIL("tessera-config: the input ended before \"", prompt,
                        "\" was answered (run it in a terminal, or use --defaults --output FILE --set k=v)");
  line = trim(line);
  return line.empty() ? default_answer : line;
}

void Terminal::say(const std::string& line) { out_ << line << "\n" << std::flush; }

void Terminal::reject(const std::string& reason) { out_ << "  ! " << reason << "; please answer again\n" << std::flush; }

}  // namespace tessera::config_app
