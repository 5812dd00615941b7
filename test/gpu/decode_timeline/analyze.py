#!/usr/bin/env python3
"""analyze.py BASE: the decode step's block timeline from BASE.linear and BASE.attention (the rings
tessera-generate-timeline writes at exit with DECODE_TIMELINE=BASE). Per kernel position in a layer
(mean over the last full tokens): blocks, the time from the previous kernel's last block's end to
this kernel's first start, first release (after the grid dependency wait) and last end; the per
layer total and the gaps between tokens. Microseconds."""
import collections
import statistics
import struct
import sys

ROW = struct.Struct("<QQQIIII")  # entry, released, exit, launch, kind, block, sm


def load(base):
    entries = []
    for tag, name in enumerate(("linear", "attention")):
        try:
            data = open(f"{base}.{name}", "rb").read()
        except OSError:
            continue
        entries += [(tag,) + ROW.unpack_from(data, off) for off in range(0, len(data) - ROW.size + 1, ROW.size)]
    if not entries:
        sys.exit(f"analyze.py: no {base}.linear or {base}.attention")
    # Only the window both rings cover (the linear ring wraps first).
    lo = max(min(e[1] for e in entries if e[0] == tag) for tag in {e[0] for e in entries})
    return [e for e in entries if e[1] >= lo]


def launches(entries):
    by_launch = collections.defaultdict(list)
    for e in entries:
        by_launch[(e[0], e[4])].append(e)
    rows = []
    for blocks in by_launch.values():  # a captured launch replays every step: split at 300 us gaps
        blocks.sort(key=lambda e: e[1])
        start = 0
        for i in range(1, len(blocks) + 1):
            if i == len(blocks) or blocks[i][1] - blocks[i - 1][1] > 300_000:
                part = blocks[start:i]
                rows.append({"kind": part[0][5], "blocks": len(part), "start": min(e[1] for e in part),
                             "released": min(e[2] for e in part), "end": max(e[3] for e in part)})
                start = i
    return sorted(rows, key=lambda r: r["start"])


def name(kind):
    if kind == 1:
        return "cached attention"
    n, layernorm = divmod(kind, 10)
    return f"linear n_out {n}" + (" + LayerNorm" if layernorm else "")


def main(base):
    rows = launches(load(base))
    cuts = [0] + [i for i in range(1, len(rows)) if rows[i]["start"] - rows[i - 1]["end"] > 20_000] + [len(rows)]
    tokens = [rows[a:b] for a, b in zip(cuts, cuts[1:])]
    length = collections.Counter(len(t) for t in tokens).most_common(1)[0][0]
    full = [t for t in tokens if len(t) == length]
    period = 5 if length % 5 == 0 else length
    table = collections.defaultdict(lambda: collections.defaultdict(list))
    for t in full:
        for j, r in enumerate(t):
            cell = table[(j % period, name(r["kind"]))]
            cell["blocks"].append(r["blocks"])
            if j > 0:
                prev_end = t[j - 1]["end"]
                cell["start"].append((r["start"] - prev_end) / 1e3)
                cell["released"].append((r["released"] - prev_end) / 1e3)
                cell["end"].append((r["end"] - prev_end) / 1e3)
    print(f"{len(full)} full tokens of {length} kernels; us from the previous kernel's last end")
    print(f"{'kernel':34s} {'blocks':>6s} {'start':>7s} {'release':>8s} {'end':>7s}")
    for (pos, kernel), cell in sorted(table.items()):
        mean = lambda k: statistics.mean(cell[k]) if cell[k] else float("nan")
        print(f"{kernel:34s} {mean('blocks'):6.0f} {mean('start'):7.2f} {mean('released'):8.2f} {mean('end'):7.2f}")
    if period == 5:
        layers = [(t[j + 5]["end"] - t[j]["end"]) / 1e3 for t in full for j in range(0, length - 5, 5)]
        print(f"a layer: {statistics.mean(layers):.2f} us")
    gaps = [(tokens[i + 1][0]["start"] - tokens[i][-1]["end"]) / 1e3 for i in range(len(tokens) - 1)]
    print("between tokens:", " ".join(f"{g:.1f}" for g in gaps))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
