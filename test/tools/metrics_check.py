#!/usr/bin/env python3
"""Checks a tessera-train metrics_file (JSON Lines, INTERFACE.md) for what only a correct run writes.

Usage: metrics_check.py RUN.jsonl [RUN.jsonl ...] [--iterations N] [--first F] [--decreasing]
                        [--reference REF.jsonl --tolerance FIELD=REL ...] [--label NAME]
Each RUN gets every check (its label: --label with one RUN, else the file name without .jsonl).

  every line is strict JSON (no NaN / Infinity tokens; tessera writes a non-finite value as null)
  --iterations N  the training rows are exactly iterations F..N, once each (F: --first, default 1)
  every training row has a finite lm_loss and grad_norm (null = non-finite = failure)
  --decreasing    the last lm_loss is below the first
  --reference     per iteration, |run - reference| / |reference| <= REL for each --tolerance FIELD;
                  the reference gets the same row checks (iterations F..N, finite values)
Exit 0 when every check holds, 1 with one line per failure otherwise (the script's own usage errors: 2).
"""
import argparse
import json
import math
import os
import sys


def reject_constant(name):
    raise ValueError(f"non-JSON number {name}")


def training_rows(path, failures):
    """The rows with lm_loss, by iteration, from a strict-JSON metrics file."""
    rows = {}
    try:
        lines = open(path, encoding="utf-8").read().splitlines()
    except OSError as e:
        failures.append(f"{path}: cannot read ({e.strerror})")
        return rows
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line, parse_constant=reject_constant)
        except ValueError as e:
            failures.append(f"{path}:{number}: not strict JSON ({e})")
            continue
        if "lm_loss" not in row:
            continue  # an evaluation row
        iteration = row.get("iteration")
        if not isinstance(iteration, int) or isinstance(iteration, bool):
            failures.append(f"{path}:{number}: iteration {json.dumps(iteration)} is not an integer")
            continue
        if iteration in rows:
            failures.append(f"{path}:{number}: iteration {iteration} written twice")
        rows[iteration] = row
    return rows


def finite(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def check_rows(path, rows, first, last, failures):
    if last is not None:
        want = list(range(first, last + 1))
        if sorted(rows) != want:
            failures.append(f"{path}: training rows for iterations {sorted(rows)}, expected {first}..{last}")
    for iteration, row in sorted(rows.items()):
        for field in ("lm_loss", "grad_norm"):
            if not finite(row.get(field)):
                failures.append(f"{path}: iteration {iteration}: {field} is {json.dumps(row.get(field))} (not finite)")


def relative(a, b):
    return abs(a - b) / max(abs(b), 1e-30)


def check_run(path, label, args, tolerances, ref, failures):
    rows = training_rows(path, failures)
    check_rows(path, rows, args.first, args.iterations, failures)
    if not rows:
        failures.append(f"{path}: no training rows")
    ordered = [rows[k] for k in sorted(rows)]
    summary = []
    if ordered and finite(ordered[0].get("lm_loss")) and finite(ordered[-1].get("lm_loss")):
        summary.append(f"lm_loss {ordered[0]['lm_loss']:.6f} -> {ordered[-1]['lm_loss']:.6f}")
        if args.decreasing and not ordered[-1]["lm_loss"] < ordered[0]["lm_loss"]:
            failures.append(f"{path}: lm_loss did not decrease ({ordered[0]['lm_loss']} at iteration "
                            f"{ordered[0]['iteration']} -> {ordered[-1]['lm_loss']} at {ordered[-1]['iteration']})")
    for field, tol in tolerances.items():
        worst, worst_it = 0.0, None
        for row in ordered:
            it = row["iteration"]
            if it not in ref:
                failures.append(f"{label}: iteration {it} is not in the reference {args.reference}")
                continue
            got, want = row.get(field), ref[it].get(field)
            if not (finite(got) and finite(want)):
                failures.append(f"{label}: iteration {it}: {field} {json.dumps(got)} vs reference {json.dumps(want)}")
                continue
            r = relative(got, want)
            if worst_it is None or r > worst:
                worst, worst_it = r, it
            if r > tol:
                failures.append(f"{label}: iteration {it}: {field} {got!r} vs reference {want!r}: relative "
                                f"difference {r:.3e} > {tol:.0e}")
        summary.append(f"worst relative difference {field} {worst:.2e} at iteration {worst_it} (<= {tol:.0e})")
    return f"{label}: {len(rows)} iterations; " + "; ".join(summary)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+")
    parser.add_argument("--iterations", type=int)
    parser.add_argument("--first", type=int, default=1)
    parser.add_argument("--decreasing", action="store_true")
    parser.add_argument("--reference")
    parser.add_argument("--tolerance", action="append", default=[], metavar="FIELD=REL")
    parser.add_argument("--label")
    args = parser.parse_args(argv)
    tolerances = {}
    for item in args.tolerance:
        field, _, value = item.partition("=")
        try:
            tolerances[field] = float(value)
        except ValueError:
            parser.error(f"--tolerance {item}: expected FIELD=REL, e.g. lm_loss=1e-5")
    if tolerances and not args.reference:
        parser.error("--tolerance needs --reference")
    if args.label and len(args.runs) > 1:
        parser.error("--label names a single RUN")
    status = 0
    ref = {}
    if args.reference:
        failures = []
        ref = training_rows(args.reference, failures)
        check_rows(args.reference, ref, args.first, args.iterations, failures)
        if not ref:
            failures.append(f"{args.reference}: no training rows")
        print(f"reference {args.reference}: {len(ref)} iterations" + (" FAIL" if failures else " ok"))
        for f in failures:
            print(f"FAIL: {f}")
        status |= bool(failures)
    for path in args.runs:
        failures = []
        label = args.label or os.path.basename(path).removesuffix(".jsonl")
        line = check_run(path, label, args, tolerances, ref, failures)
        print(line + (" FAIL" if failures else " ok"))
        for f in failures:
            print(f"FAIL: {f}")
        status |= bool(failures)
    return 1 if status else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
