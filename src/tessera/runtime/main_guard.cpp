#include "tessera/runtime/main_guard.h"

#include <exception>

#include "tessera/core/error.h"
#include "tessera/core/logging.h"
#include "tessera/runtime/agreed_failure.h"
#include "tessera/runtime/runtime.h"

namespace tessera {

int run_main(int argc, char** argv, const std::function<int(int, char**)>& body) {
  int exit_code = 0;
  try {
    Runtime::init(&argc, &argv);
    exit_code = body(argc, argv);
  } catch (const Error& e) {
    if (agreed_failure() != AgreedFailure::silent)
      log::error(e.message(), e.exit_code() == 1 ? " [" + e.location() + "]" : std::string());
    exit_code = e.exit_code();
  } catch (const std::exception& e) {
    if (agreed_failure() != AgreedFailure::silent) log::error(e.what());
    exit_code = 1;
  }
  // A failure all ranks agreed on leaves no rank in a collective: every rank exits with its code.
  if (exit_code != 0 && agreed_failure() == AgreedFailure::none && Runtime::initialized() &&
      Runtime::get().world_size() > 1)
    Runtime::get().abort(exit_code);
  if (Runtime::initialized()) Runtime::get().finalize();
  return exit_code;
}

}  // namespace tessera
