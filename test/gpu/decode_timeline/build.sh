#!/usr/bin/env bash
# build.sh BUILD_DIR: BUILD_DIR/bin/tessera-generate-timeline, tessera-generate with the decode
# kernels instrumented by instrument.py (BUILD_DIR: a CUDA build configured with Ninja). Run it with
# DECODE_TIMELINE=/tmp/t; analyze.py /tmp/t prints the per-kernel timeline (docs/decode-gpu.md).
set -euo pipefail
build=$(readlink -f "${1:?usage: build.sh BUILD_DIR}")
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../../.." && pwd)
work=$build/decode_timeline
rm -rf "$work" && mkdir -p "$work"
python3 "$here/instrument.py" "$src" "$work"
cd "$build"
ninja tessera-generate
cp src/libtessera_kernels.a "$work/"
for f in decode_linear.cu cached_attention.cu; do
  original="-c $src/kernels/$f"
  cmd=$(ninja -t commands tessera-generate | grep -F -- "$original")
  cmd=${cmd#ccache }
  cmd=${cmd/"$original"/"-c $work/$f"}
  cmd=${cmd%-o *}
  eval "$cmd -I$src -o $work/$f.o"
  (cd "$work" && ar r libtessera_kernels.a "$f.o")
done
link=$(ninja -t commands tessera-generate | tail -1)
link=${link/"src/libtessera_kernels.a"/"$work/libtessera_kernels.a"}
link=${link/"-o bin/tessera-generate"/"-o bin/tessera-generate-timeline"}
eval "$link"
echo "built $build/bin/tessera-generate-timeline"
