#!/usr/bin/env bash
# --version on every executable: exit 0 and "NAME VERSION" (the project version) on stdout.
set -u
bin=$1
version=$(sed -n 's/^project([^)]*VERSION \([0-9.]*\).*/\1/p' "$(dirname "$0")/../../CMakeLists.txt")
[[ -n $version ]] || { echo "FAIL: no project VERSION in CMakeLists.txt"; exit 1; }
failed=0
for exe in tessera-train tessera-preprocess tessera-bench tessera-config; do
  out=$("$bin/$exe" --version 2>&1); rc=$?
  if [[ $rc -eq 0 && $out == "$exe $version" ]]; then echo "ok   $exe --version: $out"
  else echo "FAIL $exe --version: exit $rc, output '$out' (expected '$exe $version')"; failed=1; fi
done
exit $failed
