#!/usr/bin/env python3
"""Group one training step's kernel durations (an ncu --csv --page raw dump) by what they do.

Usage: step_kernel_times.py NCU_CSV [STEPS]
The dump (ncu --print-units base: nanoseconds) holds every kernel of a short run (tessera-bench train, STEPS iterations, default 3);
one step is the kernels after the second-to-last optimizer launch up to and including the last.
Prints a table: category, launches, ms, share of the step; then the ten longest kernel names.
"""
import csv
import re
import sys
from collections import defaultdict

CATEGORIES = [  # (name, regex on the kernel's name, case-insensitive), first match wins.
    # Tessera's kernel names and torch.compile's (Inductor's triton_* names list the fused ops).
    ("GEMM (cuBLAS / cuBLASLt, incl. epilogues and split-K reduce)",
     r"nvjet|gemm|cutlass|xmma|splitkreduce|^sm90_|^sm80_|ampere_|cublas"),
    ("attention forward", r"flash_forward|forward_wgmma|fprop|flash_fwd|fmha.*fwd"),
    ("attention backward (main)", r"flash_backward(?!_prepare|_write|_sum)|backward_wgmma|bprop|flash_bwd|fmha.*bwd"),
    ("attention backward (prepare, dQ write, dropout bits)",
     r"flash_backward_prepare|flash_backward_write_dq|flash_backward_sum_dq|flash_dropout_bits|dot_do_o|convert_dq"),
    ("optimizer (AdamW, grad norm, convert)", r"adam|grad_stats|sum_of_squares|convert_kernel|scale_kernel|foreach|norm_kernel"),
    ("cross entropy", r"cross_entropy|vocab_parallel|log_softmax|nll_loss"),
    ("LayerNorm backward (incl. weight partial sums)", r"layernorm_backward|layernorm_column|layernorm_partials|layer_norm_backward"),
    ("LayerNorm forward", r"layernorm_forward|layer_norm"),
    ("GeLU (separate kernels)", r"gelu"),
    ("residual add, bias-dropout-add, dropout", r"bias_dropout_add|^add_kernel|add_vec|dropout|fused_add|native_dropout"),
    ("bias gradients (column sums)", r"column_sum|column_partials|add_column|fused_sum"),
    ("embedding forward / backward", r"embedding"),
]


def category_of(name):
    for label, pattern in CATEGORIES:
        if re.search(pattern, name, re.IGNORECASE):
            return label
    return "other"


def read_kernels(path):
    rows = []
    with open(path, newline="") as f:
        lines = [l for l in f if l.startswith('"')]  # ncu's own log lines are not quoted
    reader = csv.DictReader(lines)
    for row in reader:
        name, duration = row.get("Kernel Name"), row.get("gpu__time_duration.sum")
        if not name or not duration or not re.match(r"^[0-9.,]+$", duration):
            continue  # the units row
        rows.append((name, float(duration.replace(",", ""))))
    return rows


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    kernels = read_kernels(sys.argv[1])
    optimizer = [i for i, (n, _) in enumerate(kernels) if re.search(r"adam", n, re.IGNORECASE)]
    if len(optimizer) < 2:
        sys.exit(f"{sys.argv[1]}: fewer than two optimizer launches; profile at least two steps")
    # A step may launch the optimizer more than once (per segment, beside its convert kernels): the
    # launches of one step lie within a few kernels of each other. A step ends at its last one.
    ends = [a for a, b in zip(optimizer, optimizer[1:] + [len(kernels) + 100]) if b - a > 20]
    if len(ends) < 2:
        sys.exit("could not find two steps' optimizer launches")
    step = kernels[ends[-2] + 1: ends[-1] + 1]
    total = sum(d for _, d in step)
    by_category, launches, by_name = defaultdict(float), defaultdict(int), defaultdict(float)
    for name, d in step:
        c = category_of(name)
        by_category[c] += d
        launches[c] += 1
        by_name[name[:90]] += d
    print(f"one step: {len(step)} kernels, {total / 1e6:.3f} ms of kernel time")
    print("| kernels | launches | ms | share |")
    print("| --- | --- | --- | --- |")
    for c, d in sorted(by_category.items(), key=lambda kv: -kv[1]):
        print(f"| {c} | {launches[c]} | {d / 1e6:.3f} | {100 * d / total:.1f}% |")
    print("\nlongest kernel names (total ms in the step):")
    for n, d in sorted(by_name.items(), key=lambda kv: -kv[1])[:15]:
        print(f"  {d / 1e6:8.3f}  {n}")
    other = sorted(((d, n) for n, d in by_name.items() if category_of(n) == "other"), reverse=True)
    if other:
        print("\nkernels in 'other' (total ms in the step):")
        for d, n in other[:12]:
            print(f"  {d / 1e6:8.3f}  {n}")


if __name__ == "__main__":
    main()
