#!/usr/bin/env bash
# `make test`, stage by stage: each argument is a make target, run in order; the time each
# took is printed at the end, passed or failed (the budget: docs/BENCHMARKS.md, "CI time").
set -uo pipefail
declare -a timings=()
report() {
  printf '%s\n' "--- time per stage" "${timings[@]}" "$(printf '%-16s %5d s' total "$SECONDS")"
}
for target in "$@"; do
  started=$SECONDS
  echo "=== make ${target}"
  if ! "${MAKE:-make}" --no-print-directory "$target"; then
    timings+=("$(printf '%-16s %5d s  FAILED' "$target" $((SECONDS - started)))")
    report
    exit 1
  fi
  timings+=("$(printf '%-16s %5d s' "$target" $((SECONDS - started)))")
done
report
