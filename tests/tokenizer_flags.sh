#!/usr/bin/env bash
# tokenizer_flags.sh MCC OUT_DIR RANKS — `mcc data preprocess` with TikTokenizer and
# HuggingFaceTokenizer flags wrong: each run exits 1 (no signal, no sanitizer abort), writes no
# dataset, and its message names the flag or file and the fix.
set -uo pipefail
mcc=$1 out=$2 ranks=$3
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
fails=0
printf '{"text": "hello"}\n' > "$work/c.jsonl"
printf 'fine text\n\nmore\nbad \377\376 bytes\n' > "$work/c.txt"
# expect SUBSTRING -- ARGS... (after `mcc data preprocess --input ... --output-prefix ...`)
expect() {
  local want=$1 input=$work/c.jsonl; shift 2
  case "$*" in *c.txt*) input=$work/c.txt ;; esac
  "$mcc" data preprocess --input "$input" --output-prefix "$work/p" "$@" >"$work/log" 2>&1; local rc=$?
  if [ $rc -ne 1 ] || ! grep -qF -- "$want" "$work/log" || ls "$work"/p_* >/dev/null 2>&1; then
    echo "FAIL (exit $rc): $*"; echo "  wanted: $want"; sed 's/^/  got: /' "$work/log" | head -5; fails=$((fails + 1))
  else
    echo "ok: $want"
  fi
}
expect "mcc supports ByteLevel, GPT2BPETokenizer, TikTokenizer and HuggingFaceTokenizer" -- --tokenizer-type Tik
expect "--tokenizer-type TikTokenizer needs --tokenizer-model" -- --tokenizer-type TikTokenizer
expect "--tokenizer-type HuggingFaceTokenizer needs --tokenizer-model (a tokenizer.json" -- --tokenizer-type HuggingFaceTokenizer
expect "--tokenizer-model is not read by --tokenizer-type GPT2BPETokenizer" -- --tokenizer-type GPT2BPETokenizer \
  --vocab-file v --merge-file m --tokenizer-model "$ranks"
expect "--tiktoken-pattern is not read by --tokenizer-type HuggingFaceTokenizer" -- \
  --tokenizer-type HuggingFaceTokenizer --tokenizer-model x --tiktoken-pattern v2
expect "--vocab-file is not read by --tokenizer-type TikTokenizer" -- --tokenizer-type TikTokenizer \
  --tokenizer-model "$ranks" --vocab-file v
expect "--tiktoken-num-special-tokens" -- --tokenizer-type TikTokenizer --tokenizer-model "$ranks" \
  --tiktoken-num-special-tokens 2
expect "--vocab-size" -- --tokenizer-type TikTokenizer --tokenizer-model "$ranks" --vocab-size abc
expect "--tiktoken-pattern v9: unknown; one of llama3, v1, v2" -- --tokenizer-type TikTokenizer \
  --tokenizer-model "$ranks" --vocab-size 101256 --tiktoken-pattern v9
expect "has 100256 ranks; with 1000 special tokens the vocabulary can be at most 101256: pass --vocab-size 101256" -- \
  --tokenizer-type TikTokenizer --tokenizer-model "$ranks"
expect "--tokenizer-model $work/none.json: " -- --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$work/none.json"
expect "c.txt line 3: the paragraph starting here is not valid UTF-8; TikTokenizer reads UTF-8 text" -- \
  --tokenizer-type TikTokenizer --tokenizer-model "$ranks" --vocab-size 101256 --input "$work/c.txt"
[ $fails -eq 0 ] && echo "OK: every bad tokenizer flag is refused with its message" && exit 0
exit 1
