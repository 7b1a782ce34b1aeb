#!/usr/bin/env bash
# ir_check.sh FILECHECK CHECKS PREFIX MCC SPEC FLAGS... — `mcc ir SPEC --target cpu FLAGS` (FLAGS
# name the pass: --after P) must match the FileCheck lines of CHECKS that carry PREFIX.
set -euo pipefail
filecheck=$1; checks=$2; prefix=$3; mcc=$4; spec=$5; shift 5
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
"$mcc" ir "$spec" --target cpu "$@" >"$work/ir" 2>"$work/err" || { cat "$work/err"; exit 1; }
"$filecheck" "$checks" --check-prefix "$prefix" --input-file "$work/ir" --dump-input=fail --dump-input-filter=error
