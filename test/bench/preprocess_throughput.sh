#!/usr/bin/env bash
# Preprocessing throughput of tessera-preprocess (GPT-2 BPE on the Austen corpus), MB/s of JSONL
# input with 1 and 2 worker threads, each run pinned to that many cores; prints one JSON object.
# Usage: test/bench/preprocess_throughput.sh [BIN_DIR] [SHARED_DIR] [REPEATS]
set -euo pipefail
bin_dir=${1:-${TESSERA_BIN_DIR:-build/bin}}
shared=${2:-${TESSERA_SHARED_DIR:-../shared}}
repeats=${3:-3}
input=$shared/data/corpus/austen.jsonl
tok=$shared/data/tokenizers/gpt2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
run() {  # workers cores -> best MB/s of $repeats runs (encoding time, tokenizer loading excluded)
  local workers=$1 cores=$2 best=0 mbps
  for _ in $(seq "$repeats"); do
    mbps=$(taskset -c "$cores" "$bin_dir/tessera-preprocess" --input "$input" --output-prefix "$work/out" \
             --tokenizer-type GPT2BPETokenizer --vocab-file "$tok/vocab.json" --merge-file "$tok/merges.txt" \
             --append-eod --workers "$workers" --log-interval 1000000 2>&1 |
           sed -n 's/.* s: \([0-9.e+]*\) MB\/s with.*/\1/p')
    best=$(python3 -c "print(max($best, $mbps))")
  done
  echo "$best"
}
one=$(run 1 0)
two=$(run 2 0,1)
python3 - "$one" "$two" "$input" <<'PY'
import json, os, sys
one, two, path = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
print(json.dumps({"benchmark": "preprocess_throughput", "tokenizer": "GPT2BPETokenizer", "input": os.path.basename(path),
                  "input_bytes": os.path.getsize(path), "mb_per_s_1_worker": round(one, 2),
                  "mb_per_s_2_workers": round(two, 2), "speedup_2_workers": round(two / one, 3),
                  "target": {"mb_per_s_1_worker": 10.0, "speedup_2_workers": 1.7}}))
PY
