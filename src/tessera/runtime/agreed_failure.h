// A failure every rank knows about (run_on_all_ranks_or_fail_together agreed on it): one rank
// reports it, the others exit with the same code silently, and no rank needs MPI_Abort because
// none is left in a collective. run_main reads this; the agreement code sets it before throwing.
#pragma once

namespace tessera {

enum class AgreedFailure { none, report, silent };

void note_agreed_failure(bool this_rank_reports);
AgreedFailure agreed_failure();

}  // namespace tessera
