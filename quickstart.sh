#!/usr/bin/env bash
# Quickstart: installs what is missing, builds, and trains the bundled default GPT on the CPU
# (share/configs/quickstart.toml) on the bundled Austen corpus, preprocessed with GPT-2 BPE first. Extra arguments go to tessera-train (e.g. --train-iters 20).
set -euo pipefail
cd "$(dirname "$0")"
scripts/install-deps.sh
scripts/build.sh
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
mkdir -p runs/quickstart/data
if [ ! -f runs/quickstart/data/austen_text_document.idx ]; then
  build/bin/tessera-preprocess --input share/data/austen/austen.jsonl \
    --output-prefix runs/quickstart/data/austen --json-keys text \
    --tokenizer-type GPT2BPETokenizer --vocab-file share/tokenizers/gpt2/vocab.json \
    --merge-file share/tokenizers/gpt2/merges.txt --append-eod --workers "$(nproc)"
fi
rm -f runs/quickstart/metrics.jsonl
exec build/bin/tessera-train --config share/configs/quickstart.toml "$@"
