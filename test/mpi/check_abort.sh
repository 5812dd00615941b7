#!/usr/bin/env bash
# Runs abort_on_error under mpirun and checks: the job ends within 10 s, with a non-zero exit code,
# and the failing rank's message appears exactly once. Usage: check_abort.sh MPIEXEC NP PROGRAM
set -u
mpiexec=$1 np=$2 program=$3
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
start=$(date +%s.%N)
output=$(timeout 30 "$mpiexec" -np "$np" --oversubscribe "$program" 3 2>&1)
rc=$?
elapsed=$(echo "$(date +%s.%N) - $start" | bc)
echo "$output"
count=$(grep -c "is not divisible by tensor x context x pipeline" <<< "$output")
echo "exit code $rc, elapsed ${elapsed} s, message printed $count time(s)"
fail=0
if [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ]; then echo "FAIL: exit code $rc (want non-zero, not a timeout)"; fail=1; fi
if [ "$count" -ne 1 ]; then echo "FAIL: the message was printed $count times (want 1)"; fail=1; fi
if ! grep -q "rank 1" <<< "$(grep "is not divisible" <<< "$output")"; then echo "FAIL: message not attributed to rank 1"; fail=1; fi
if [ "$(echo "$elapsed < 10" | bc)" -ne 1 ]; then echo "FAIL: took ${elapsed} s (want < 10 s)"; fail=1; fi
exit $fail
