#!/bin/sh
# Saves synthetic checkpoints at TP=2 x PP=2 (whole optimizer) and TP=2 x PP=2 x DP=2 (sharded
# optimizer), then loads them at TP=1 x PP=1, TP=4, PP=4 and other DP sizes. Usage: MPIRUN EXE
set -e
MPIRUN="$1 --oversubscribe --allow-run-as-root"
EXE=$2
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
$MPIRUN -np 4 $EXE save "$DIR/a" 2 2 0
$MPIRUN -np 1 $EXE load "$DIR/a" 1 1 0
$MPIRUN -np 4 $EXE load "$DIR/a" 4 1 0
$MPIRUN -np 4 $EXE load "$DIR/a" 1 4 0
$MPIRUN -np 2 $EXE load "$DIR/a" 1 1 1
$MPIRUN -np 8 $EXE save "$DIR/b" 2 2 1
$MPIRUN -np 1 $EXE load "$DIR/b" 1 1 0
$MPIRUN -np 3 $EXE load "$DIR/b" 1 1 1
$MPIRUN -np 8 $EXE load "$DIR/b" 4 1 1
$MPIRUN -np 8 $EXE load "$DIR/b" 2 2 1
echo "checkpoint resharding: all layouts ok"
