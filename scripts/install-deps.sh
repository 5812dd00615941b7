#!/usr/bin/env bash
# Installs the Debian packages Tessera builds and tests with (idempotent: only what is missing).
set -euo pipefail
packages=(build-essential cmake ninja-build pkg-config python3
          libopenmpi-dev openmpi-bin libhdf5-dev hdf5-tools libtomlplusplus-dev libboost-program-options-dev libboost-dev
          nlohmann-json3-dev libopenblas-dev libicu-dev libgtest-dev zlib1g-dev
          libprotobuf-dev protobuf-compiler
          libsentencepiece-dev sentencepiece  # SentencePieceTokenizer's shim (libtessera_sentencepiece.so); spm_train
          clang libclang-rt-dev)  # CI's sanitizer and libFuzzer step only (scripts/sanitize.sh); libclang-rt-dev
                                  # (the ASan/UBSan/libFuzzer runtimes) is only a Recommends of clang-14
                                  # and --no-install-recommends below would leave it out
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
