# Sourced by the GPU training scripts: require_gpus N (exit 77 = skipped with fewer visible GPUs),
# then prepare_austen BIN SRC sets $work (a temporary folder, removed on exit) and preprocesses the
# bundled Austen corpus there with GPT-2 BPE, and sets $austen_config: the quickstart config on that
# data with a 2-layer model over 64-token sequences (callers add their own --set overrides).
require_gpus() {
  local gpus
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
  if [ "${gpus:-0}" -lt "$1" ]; then
    echo "fewer than $1 GPU(s) visible: skipped"
    exit 77
  fi
}
prepare_austen() {
  local bin=$1 src=$2
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  "$bin/tessera-preprocess" --input "$src/share/data/austen/austen.jsonl" --output-prefix "$work/austen" \
    --json-keys text --tokenizer-type GPT2BPETokenizer --vocab-file "$src/share/tokenizers/gpt2/vocab.json" \
    --merge-file "$src/share/tokenizers/gpt2/merges.txt" --append-eod --workers 4 >/dev/null
  austen_config=(--config "$src/share/configs/quickstart.toml"
    --set "data.data_path=[\"$work/austen_text_document\"]"
    --set model.num_layers=2 --set model.seq_length=64 --set model.max_position_embeddings=64)
}
