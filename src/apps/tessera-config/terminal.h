// Terminal I/O of the questionnaire: a prompt with its default in brackets, one answer line back
// (empty: the default), and the reason a wrong answer is asked again.
#pragma once
#include <iostream>
#include <string>

namespace tessera::config_app {

class Terminal {
 public:
  Terminal(std::istream& in, std::ostream& out) : in_(in), out_(out) {}
  // Prints "prompt [default]: " and returns the trimmed answer, or `default_answer` when empty.
  // Throws ConfigError when the input ends (no terminal, or the answers ran out).
  std::string ask(const std::string& prompt, const std::string& default_answer);
  void say(const std::string& line);        // a line of output
  void reject(const std::string& reason);   // why the answer is asked again

 private:
  std::istream& in_;
  std::ostream& out_;
};

}  // namespace tessera::config_app
