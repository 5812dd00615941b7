// run_main wraps an executable's body: it initialises the Runtime, runs the body, and turns an
// exception on any rank into that rank's message (printed once, by that rank) and an exit code
// (2 for ConfigError, 1 otherwise) for the whole job: with several ranks it calls MPI_Abort so
// no other rank is left waiting in a collective.
#pragma once
#include <functional>

namespace tessera {

int run_main(int argc, char** argv, const std::function<int(int, char**)>& body);

}  // namespace tessera
