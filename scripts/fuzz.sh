#!/usr/bin/env bash
# The long fuzz campaign: every fuzz target of the module (or those named),
# each for FUZZTIME (10m by default) with one worker, in LANES parallel lanes.
# Writes one line per target to $OUT/summary.tsv (target, time, execs, new
# inputs, result) and each target's log beside it. With SAVE=1 the inputs the
# fuzzer found interesting are copied into the package's testdata/fuzz, so that
# `go test` replays them from then on.
#
# Usage: scripts/fuzz.sh [pkg:Target ...]
# Minimizing each new input is capped at MINIMIZETIME (10s), so that a target
# finding many inputs still spends most of its time fuzzing.
#   FUZZTIME=10m LANES=2 OUT=/tmp/ztfs-fuzz SAVE=1 scripts/fuzz.sh
# A file named $OUT/pause holds every lane before its next target starts, so
# that a benchmark can run on a quiet machine without cutting a run short.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
ensure_go

fuzztime=${FUZZTIME:-10m}
minimizetime=${MINIMIZETIME:-10s}
lanes=${LANES:-1}
out=${OUT:-/tmp/ztfs-fuzz}
save=${SAVE:-0}
mkdir -p "$out"
cache=$(go env GOCACHE)/fuzz

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for pkg in $(go list ./...); do
    dir=$(go list -f '{{.Dir}}' "$pkg")
    for target in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | cut -d' ' -f2); do
      targets+=("$pkg:$target")
    done
  done
fi

# run_one fuzzes one target and appends its summary line.
run_one() {
  local pkg=${1%%:*} target=${1##*:} log last execs newin result start
  log="$out/$(basename "$pkg")-$target.log"
  while [ -e "$out/pause" ]; do sleep 5; done
  start=$(date -u +%FT%TZ)
  if go test -run '^$' -fuzz "^$target\$" -fuzztime "$fuzztime" -fuzzminimizetime "$minimizetime" -parallel 1 "$pkg" >"$log" 2>&1; then
    result=ok
  elif ! grep -q 'Failing input written to' "$log" && grep -q 'context deadline exceeded' "$log"; then
    # The fuzzer's own -fuzztime boundary flake (golang/go#51484): the run
    # lasted its time and found nothing.
    result=ok
  else
    result=FAIL
  fi
  last=$(grep -E 'elapsed: .*execs: ' "$log" | tail -1 || true)
  execs=$(sed -nE 's/.*execs: ([0-9]+).*/\1/p' <<<"$last")
  newin=$(sed -nE 's/.*new interesting: ([0-9]+).*/\1/p' <<<"$last")
  if [ "$save" = 1 ] && [ -d "$cache/$pkg/$target" ]; then
    local dest
    dest="$(go list -f '{{.Dir}}' "$pkg")/testdata/fuzz/$target"
    mkdir -p "$dest"
    cp -n "$cache/$pkg/$target"/* "$dest"/ 2>/dev/null || true
  fi
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$pkg" "$target" "$start" "$fuzztime" \
    "${execs:-?}" "${newin:-?}" "$result" >>"$out/summary.tsv"
  echo "$result $pkg $target: ${execs:-?} execs, ${newin:-?} new inputs ($log)"
}

# Lane i takes every lanes-th target; each lane runs its targets in turn.
pids=()
for ((lane = 0; lane < lanes; lane++)); do
  (
    for ((i = lane; i < ${#targets[@]}; i += lanes)); do
      run_one "${targets[$i]}"
    done
  ) &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
if grep -q 'FAIL$' "$out/summary.tsv"; then status=1; fi
exit $status
