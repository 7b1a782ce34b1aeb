#!/usr/bin/env bash
# update_docs.sh MCC — remakes the docs/ pages generated from mcc's tables (tests/docs_check.py
# fails while they differ): docs/spec-fields.md from frontend/spec.c's field table,
# docs/megatron-flags.md from frontend/megatron_flags.c's.
set -euo pipefail
mcc=${1:?usage: scripts/update_docs.sh BUILD/mcc}
cd "$(dirname "$0")/.."
"$mcc" help fields --markdown > docs/spec-fields.md
"$mcc" help megatron-flags --markdown > docs/megatron-flags.md
