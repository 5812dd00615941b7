// Launch declarations of the persistent decode stack (decode_stack.cu): every GPT block of a decode
// step (one new token per sequence, up to kDecodeStackMaxRows sequences, bf16/f16, TP = 1, pre-LN with
// LayerNorm, multi-head attention, a dense GeLU MLP) in one kernel of one block per SM. Each block
// streams its share of every layer's weights into a shared-memory ring by cp.async (swizzled), which
// never wait for activations, while its consumer warps wait for the activations through counters in
// global memory: the weight stream goes on across what are kernel boundaries in the five-kernel
// fused layer (decode_linear.h, cached_attention.h), whose arithmetic it repeats.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "tessera/core/dtype.h"

namespace tessera::kernels {

constexpr int kDecodeStackMaxRows = 4;

// One block's parameters (device pointers, row-major [out, in] weights) and its KV cache.
struct DecodeStackLayer {
  const void* ln1_weight = nullptr;
  const void* ln1_bias = nullptr;
  const void* qkv_weight = nullptr;  // [3 hidden, hidden], Megatron's per-head [q, k, v] rows
  const void* qkv_bias = nullptr;
  const void* proj_weight = nullptr;  // [hidden, hidden]
  const void* proj_bias = nullptr;
  const void* ln2_weight = nullptr;
  const void* ln2_bias = nullptr;
  const void* fc1_weight = nullptr;  // [ffn, hidden]
  const void* fc1_bias = nullptr;
  const void* fc2_weight = nullptr;  // [hidden, ffn]
  const void* fc2_bias = nullptr;
  void* k_cache = nullptr;  // [rows, capacity, hidden]
  void* v_cache = nullptr;
};

struct DecodeStackArgs {
  const DecodeStackLayer* layers = nullptr;  // device array [num_layers]
  int num_layers = 0, rows = 0, hidden = 0, heads = 0, head_dim = 0, ffn = 0;
  float ln_eps = 1e-5f;
  bool gelu_erf = false;  // GeLU: erf form, else tanh
  float softmax_scale = 1.0f;
  int64_t capacity = 0;                  // cache tokens per sequence
  const int32_t* past_device = nullptr;  // i32 [1]: cached tokens; the new token goes at that index
  const uint8_t* key_mask = nullptr;     // u8 [rows, capacity] (1: attend) or null
  const void* in = nullptr;              // [rows, hidden]: the first block's input
  void* out = nullptr;                   // [rows, hidden]: the last block's output
  // decode_stack_workspace_bytes(args) of device memory, zeroed once before the first launch and
  // left to the kernel afterwards (its synchronisation counters carry over between launches).
  void* workspace = nullptr;
  // Measurement only (test/gpu/decode_stack_bench.cpp), null otherwise: u64 [num_layers][5 ops][grid][32]
  // %globaltimer stamps: the consumers' wait begins, input ready, chunks done, signalled; the
  // producer's first and last copy of the op issued; chunk c (< 16) ready for warp 0 (6 + c), and
  // warp 0 done with it (c < 8: 22 + c).
  unsigned long long* trace = nullptr;
  // Measurement only: bit 0 skips the waits for other blocks, bit 1 the GEMVs' arithmetic, bit 4 the
  // consumers' waits for their chunks, bit 5 the producer's copies (wrong outputs: the bench times
  // the parts with them); bit 3 spins on the ring's barriers with test_wait instead of try_wait.
  int debug = 0;
  // Measurement only: the ring's slot size in bytes and slot count (0: the kernel's choice).
  int slot_bytes = 0, slots = 0;
};

size_t decode_stack_workspace_bytes(DType t, const DecodeStackArgs& a);
// Whether the kernel takes the shape: bf16/f16, 1..kDecodeStackMaxRows rows, head_dim 64 or 128 with
// heads * head_dim == hidden, hidden % 8 == 0 and <= 4096, ffn % 8 == 0, the activations fitting in
// shared memory beside a ring of at least four slots, an sm_90 GPU.
bool decode_stack_applies(DType t, const DecodeStackArgs& a);
void decode_stack_forward(DType t, const DecodeStackArgs& a, cudaStream_t s);

}  // namespace tessera::kernels
