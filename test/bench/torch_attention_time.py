#!/usr/bin/env python3
"""PyTorch's scaled_dot_product_attention on the GPT-2 attention shapes (bf16, causal, seq 1024), the
reference for Tessera's flash kernels (issue #20; docs/training-performance.md): which kernels torch's
default backend runs, and the forward and backward times of each backend (median of 20 after 3
warm-ups; FLOPs as gpu_flash_attention_parity_test counts them). Run on the GPU machine beside
`gpu_flash_attention_parity_test /dev/null timings`."""
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile


def median_ms(f):
    for _ in range(3):
        f()
    times = []
    for _ in range(20):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        f()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    times.sort()
    return 0.5 * (times[9] + times[10])


def inputs(b, h, s, d):
    return [torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3)]


print("torch", torch.__version__, torch.cuda.get_device_name())
for p in (0.0, 0.1):  # the default backend's kernels
    q, k, v = inputs(16, 12, 1024, 64)
    F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True).sum().backward()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True).sum().backward()
        torch.cuda.synchronize()
    names = sorted({e.name[:100] for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
                    and ("sdpa" in e.name or "flash" in e.name or "fmha" in e.name)})
    print(f"default backend, dropout {p}:", *names, sep="\n  ")
for label, b, h, s, d in [("124M", 16, 12, 1024, 64), ("1.5B", 8, 25, 1024, 64)]:
    for p in (0.0, 0.1):
        for backend in (SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION):
            q, k, v = inputs(b, h, s, d)
            try:
                with sdpa_kernel(backend):
                    grad = torch.randn_like(F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True))
                    fwd = median_ms(lambda: F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True))
                    both = median_ms(lambda: torch.autograd.grad(
                        F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True), (q, k, v), grad))
            except RuntimeError as e:
                print(f"{label} dropout {p} {backend.name}: unavailable ({str(e).splitlines()[0][:100]})")
                continue
            flops = 4.0 * b * h * s * s * d / 2
            print(f"{label} dropout {p} {backend.name:16s} fwd {fwd:.3f} ms ({flops / fwd * 1e-9:.0f} TFLOP/s)  "
                  f"bwd {both - fwd:.3f} ms ({2.5 * flops / (both - fwd) * 1e-9:.0f} TFLOP/s)")
