// The questionnaire: the Accelerate guide's questions in order (machines, GPUs per node, an
// existing config or a model family and size, TP, SP, PP, micro-batches, recomputation,
// distributed optimizer, gradient clipping, precision, data and tokenizer, checkpoint directory).
// Each question shows its default in brackets (the session's current value) and checks its
// answer at once; a wrong answer is asked again with the reason.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "session.h"
#include "terminal.h"

namespace tessera::config_app {

struct Question {
  std::string prompt;
  std::function<bool(const Session&)> applies;                              // asked only when true
  std::function<std::string(const Session&)> default_answer;                // shown in brackets
  std::function<std::string(Session&, const std::string& answer)> apply;    // "" or why it is wrong
};

struct QuestionnaireOptions {
  bool ask_existing_config = true;  // false with --input (the file is already loaded)
  bool ask_output = true;           // false with --output
  bool take_defaults = false;       // --defaults: every question answered with its default
};

std::vector<Question> questions(const QuestionnaireOptions& options);
void run_questionnaire(Session& session, Terminal& terminal, const QuestionnaireOptions& options);

}  // namespace tessera::config_app
