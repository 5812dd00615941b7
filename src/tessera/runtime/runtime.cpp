#include "tessera/runtime/runtime.h"

#include <mpi.h>

#include <cstdlib>

#include "tessera/core/error.h"
#include "tessera/core/logging.h"
#include "tessera/runtime/mpi_check.h"

namespace tessera {

namespace {
Runtime* g_runtime = nullptr;
}

Runtime& Runtime::init(int* argc, char*** argv) {
  if (g_runtime) return *g_runtime;
  int already = 0;
  TESSERA_MPI_CHECK(MPI_Initialized(&already));
  if (!already) {
    int provided = 0;
    TESSERA_MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided));
  }
  static Runtime runtime;
  g_runtime = &runtime;
  TESSERA_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &runtime.world_rank_));
  TESSERA_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &runtime.world_size_));
  MPI_Comm node;
  TESSERA_MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, runtime.world_rank_, MPI_INFO_NULL, &node));
  TESSERA_MPI_CHECK(MPI_Comm_rank(node, &runtime.local_rank_));
  TESSERA_MPI_CHECK(MPI_Comm_size(node, &runtime.local_size_));
  TESSERA_MPI_CHECK(MPI_Comm_free(&node));
  log::set_rank(runtime.world_rank_, runtime.world_size_);
  std::atexit([] {
    if (g_runtime) g_runtime->finalize();
  });
  return runtime;
}

Runtime& Runtime::get() {
  TESSERA_CHECK(g_runtime != nullptr, "Runtime::init() has not been called");
  return *g_runtime;
}

bool Runtime::initialized() { return g_runtime != nullptr; }

int cuda_visible_device_count();  // runtime/device_cuda.cpp, or 0 without CUDA
void cuda_set_device(int index);   // runtime/device_cuda.cpp (cudaSetDevice), or an error without CUDA

Device Runtime::select_device(const std::string& request) {
  if (request == "cpu") return Device::cpu();
  if (request != "auto" && request != "cuda")
    TESSERA_CONFIG_FAIL("training.device = \"", request, "\" is not allowed; use \"auto\", \"cpu\" or \"cuda\"");
  int gpus = cuda_visible_device_count();
  if (gpus == 0) {
    if (request == "cuda") {
#ifdef TESSERA_HAVE_CUDA
      TESSERA_CONFIG_FAIL("training.device = \"cuda\" but no GPU is visible to rank ", world_rank_,
                          " (check CUDA_VISIBLE_DEVICES and the job's GPU allocation), or use device = \"cpu\"");
#else
      TESSERA_CONFIG_FAIL("training.device = \"cuda\" but this Tessera was built without CUDA "
                          "(-DTESSERA_CUDA=OFF or no CUDA Toolkit found); use device = \"cpu\"");
#endif
    }
    return Device::cpu();
  }
  // GPU = node-local rank modulo the GPUs this rank sees (one GPU per rank under srun
  // --gpus-per-task, or all node GPUs shared round-robin under mpirun).
  Device device = Device::cuda(local_rank_ % gpus);
  cuda_set_device(device.index);
  return device;
}

void Runtime::finalize() {
  if (finalized_) return;
  finalized_ = true;
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (init && !fin) MPI_Finalize();
}

void Runtime::abort(int exit_code) {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (init && !fin && world_size_ > 1) MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);
}

#ifndef TESSERA_HAVE_CUDA
int cuda_visible_device_count() { return 0; }
void cuda_set_device(int index) {
  TESSERA_FAIL("cannot bind GPU ", index, ": this Tessera was built without CUDA (-DTESSERA_CUDA=OFF)");
}
#endif

}  // namespace tessera
