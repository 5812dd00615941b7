// Agreement on failure for collective checkpoint steps: a rank that cannot read its part of a
// checkpoint must not leave the other ranks waiting in a collective; every rank ends with its message.
#pragma once
#include <functional>

#include "tessera/runtime/communicator.h"

namespace tessera::ckpt {

// Runs body on every rank of comm (body itself must not call collectives of comm). When body throws
// on one or more ranks, every rank throws: the lowest failing rank rethrows its own exception, the
// others an Error (a ConfigError when the failure was one) that carries that rank's message and
// says which rank failed. Collective: two small broadcasts and one all-reduce, only on failure more.
void run_on_all_ranks_or_fail_together(Communicator& comm, const std::function<void()>& body);

}  // namespace tessera::ckpt
