#!/usr/bin/env python3
"""Instrumented copies of the decode kernels for a block timeline (docs/decode-gpu.md, session 14).

instrument.py SOURCE_DIR OUT_DIR   writes OUT_DIR/decode_linear.cu and OUT_DIR/cached_attention.cu:
                                   kernels/<same> with decode_trace.cuh's recorder at each block's
                                   entry, after its grid dependency wait and at its exit
instrument.py --check SOURCE_DIR   exit 0 when every edit still applies to the sources, 1 naming
                                   the file and the text that is gone
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
INCLUDE = '#include "kernels/programmatic_launch.cuh"'
TRACE_INCLUDE = INCLUDE + '\n#include "' + os.path.join(HERE, "decode_trace.cuh") + '"'

# (old, new) edits per kernel file; each old text must occur exactly once.
EDITS = {
    "decode_linear.cu": [
        (INCLUDE, TRACE_INCLUDE),
        ("int64_t n_out, int64_t k_in,\n                         int rows_per_block, T* out) {",
         "int64_t n_out, int64_t k_in,\n                         int rows_per_block, T* out, unsigned timeline_launch) {\n"
         "  const unsigned long long timeline_entry = decode_timeline::now();"),
        ("  wait_for_previous_grid();\n  let_next_grid_launch();\n  const T* x = in;",
         "  wait_for_previous_grid();\n  const unsigned long long timeline_released = decode_timeline::now();\n"
         "  let_next_grid_launch();\n  const T* x = in;"),
        ("    store_f(out + m * n_out + n, v);\n  }\n}",
         "    store_f(out + m * n_out + n, v);\n  }\n  __syncthreads();\n"
         "  decode_timeline::record(timeline_launch, unsigned(n_out) * 10 + (kLayerNorm ? 1 : 0), timeline_entry,\n"
         "                          timeline_released);\n}"),
        ("a.k_in, static_cast<int>(rows_per_block), static_cast<T*>(a.out));",
         "a.k_in, static_cast<int>(rows_per_block), static_cast<T*>(a.out),\n"
         "                decode_timeline::next_launch(\"linear\"));"),
    ],
    "cached_attention.cu": [
        (INCLUDE, TRACE_INCLUDE),
        ("T* out) {\n  constexpr int kVec = 16 / sizeof(T);\n  constexpr int kGroups = kHeadThreads / kLanes;",
         "T* out, unsigned timeline_launch) {\n  const unsigned long long timeline_entry = decode_timeline::now();\n"
         "  constexpr int kVec = 16 / sizeof(T);\n  constexpr int kGroups = kHeadThreads / kLanes;"),
        ("  load_chunk(0, true, false);\n  wait_for_previous_grid();\n",
         "  load_chunk(0, true, false);\n  wait_for_previous_grid();\n"
         "  const unsigned long long timeline_released = decode_timeline::now();\n"),
        ("l > 0.0f ? o / l : 0.0f);  // no key to attend: a zero row\n  }\n}",
         "l > 0.0f ? o / l : 0.0f);  // no key to attend: a zero row\n  }\n  __syncthreads();\n"
         "  decode_timeline::record(timeline_launch, 1, timeline_entry, timeline_released);\n}"),
        ("static_cast<T*>(v_cache), static_cast<T*>(out));\n    return true;",
         "static_cast<T*>(v_cache), static_cast<T*>(out),\n"
         "           decode_timeline::next_launch(\"attention\"));\n    return true;"),
    ],
}


def instrumented(source_dir, name):
    path = os.path.join(source_dir, "kernels", name)
    text = open(path).read()
    for old, new in EDITS[name]:
        count = text.count(old)
        if count != 1:
            raise SystemExit(f"instrument.py: {path}: expected once, found {count} times:\n{old}")
        text = text.replace(old, new)
    return text


def main(argv):
    if len(argv) == 3 and argv[1] == "--check":
        for name in EDITS:
            instrumented(argv[2], name)
        print("instrument.py: every edit applies to", ", ".join(EDITS))
        return 0
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    os.makedirs(argv[2], exist_ok=True)
    for name in EDITS:
        with open(os.path.join(argv[2], name), "w") as f:
            f.write(instrumented(argv[1], name))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
