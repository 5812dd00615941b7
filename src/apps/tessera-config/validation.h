// The checks tessera-config makes as each answer comes in (a non-empty string is the reason the
// question is asked again), and the whole-config check before the file is written: the config as
// tessera-train loads it plus the world-size rules.
#pragma once
#include <string>
#include <vector>

#include "session.h"

namespace tessera::config_app {

std::string check_tensor_parallel(const Session& session, int64_t tp);
std::string check_sequence_parallel(const Session& session, int64_t tp);  // seq_length / TP tokens per rank
std::string check_pipeline_parallel(const Session& session, int64_t pp);
std::string check_prefix(const std::string& prefix);  // a dataset prefix: PREFIX.bin and PREFIX.idx exist
std::string check_file(const std::string& path);      // an existing regular file

// "key = value is not supported yet (it comes with ...)" for each value tessera-train rejects today,
// and for the combination it rejects (sequence parallelism with pipeline parallelism).
std::vector<std::string> unsupported_notes(const Session& session);

// Loads `file` (as written) as tessera-train would, with the values that are not supported yet put
// back to their defaults (unsupported_notes names those), then checks the parallel layout and the
// batch against the world size. Throws ConfigError with tessera-train's message.
void check_whole(const Session& session, const std::string& file);

}  // namespace tessera::config_app
