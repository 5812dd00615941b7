// run_on_all_ranks_or_fail_together: catch locally, all-reduce the lowest failing rank, broadcast its
// message and error kind, throw everywhere.
#include "tessera/ckpt/collective_errors.h"

#include <exception>
#include <string>

#include "tessera/core/buffer.h"
#include "tessera/core/error.h"
#include "tessera/runtime/agreed_failure.h"
#include "tessera/runtime/runtime.h"

namespace tessera::ckpt {

void run_on_all_ranks_or_fail_together(Communicator& comm, const std::function<void()>& body) {
  std::exception_ptr failure;
  std::string message;
  int32_t kind = 1;  // exit code of the failure: 1 Error, 2 ConfigError
  try {
    body();
  } catch (const Error& e) {
    failure = std::current_exception();
    message = e.message();
    kind = e.exit_code();
  } catch (const std::exception& e) {
    failure = std::current_exception();
    message = e.what();
  }
  if (comm.size() == 1) {
    if (failure) std::rethrow_exception(failure);
    return;
  }
  Buffer header_buffer(2 * sizeof(int32_t));
  Tensor header = header_buffer.as_tensor(DType::i32, {2});
  auto* h = header.data_as<int32_t>();
  h[0] = failure ? comm.rank() : comm.size();
  h[1] = 0;
  comm.all_reduce(header, ReduceOp::min);
  const int failed_rank = h[0];
  if (failed_rank >= comm.size()) return;  // no rank failed

  // The failing rank's message and kind.
  h[0] = static_cast<int32_t>(message.size());
  h[1] = kind;
  comm.broadcast(header, failed_rank);
  const int64_t length = h[0];
  const int32_t failed_kind = h[1];
  // One character per i32 element (collectives carry f32 / bf16 / f16 / i32 / i64).
  Buffer text_buffer((static_cast<size_t>(length) + 1) * sizeof(int32_t));
  Tensor text = text_buffer.as_tensor(DType::i32, {length + 1});
  auto* chars = text.data_as<int32_t>();
  if (comm.rank() == failed_rank)
    for (int64_t i = 0; i < length; ++i) chars[i] = static_cast<unsigned char>(message[static_cast<size_t>(i)]);
  comm.broadcast(text, failed_rank);
  comm.synchronize();
  // Over the whole world, that rank prints it and the others exit quietly (none is left waiting).
  if (Runtime::initialized() && comm.size() == Runtime::get().world_size()) note_agreed_failure(comm.rank() == failed_rank);
  if (comm.rank() == failed_rank) std::rethrow_exception(failure);
  std::string received(static_cast<size_t>(length), ' ');
  for (int64_t i = 0; i < length; ++i) received[static_cast<size_t>(i)] = static_cast<char>(chars[i]);
  if (failed_kind == 2) TESSERA_CONFIG_FAIL("rank ", failed_rank, " failed: ", received);
  TESSERA_FAIL("rank ", failed_rank, " failed: ", received);
}

}  // namespace tessera::ckpt
