#!/usr/bin/env bash
# mcc_flags.sh MCC — a Megatron user's command line: a LLaMA-3 recipe's flag list, in Megatron's
# spelling, compiles (no-op flags said so on stderr, mapped ones applied, the vocabulary padded as
# Megatron pads it); --flag=value reads as --flag value; --help after any command prints its usage
# and exits 0, `mcc compile --help` lists every spec field (docs_check: each in docs/spec-fields.md); `mcc
# --version`; and each bad flag exits 2 with the flag named (a near one offered for a typo).
set -uo pipefail
mcc=$1
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
fails=0
bad() { echo "FAIL: $*"; fails=$((fails + 1)); }
tiny=$root/models/tiny-gpt2.json

# A Megatron LLaMA-3 8B recipe's flags, shrunk to a test's size (every size flag a recipe passes)
recipe=(--tensor-model-parallel-size 2 --sequence-parallel --use-mcore-models --bf16 --use-flash-attn
  --transformer-impl transformer_engine --num-layers 2 --hidden-size 256 --ffn-hidden-size 512
  --num-attention-heads 8 --group-query-attention --num-query-groups 2 --seq-length 128
  --max-position-embeddings 128 --position-embedding-type rope --rotary-base 500000 --normalization RMSNorm
  --swiglu --untie-embeddings-and-output-weights --disable-bias-linear --attention-dropout 0.0
  --hidden-dropout 0.0 --micro-batch-size 2 --global-batch-size 8 --lr 3e-4 --min-lr 3e-5
  --lr-decay-style cosine --lr-warmup-iters 10 --weight-decay 0.1 --clip-grad 1.0 --adam-beta1 0.9
  --adam-beta2 0.95 --init-method-std 0.02 --no-masked-softmax-fusion --no-bias-gelu-fusion
  --distributed-backend nccl --make-vocab-size-divisible-by 128 --train-iters 10 --eval-interval 5
  --eval-iters 2 --log-interval 1 --recompute-granularity selective --recompute-modules core_attn --target cpu)
if "$mcc" compile "$root/models/llama3-8b.json" "${recipe[@]}" -o "$work/train_rank" 2>"$work/recipe.log" &&
   [ -x "$work/train_rank" ]; then
  for line in "--bf16: accepted, nothing to change" "--use-mcore-models: accepted" "--use-flash-attn: accepted" \
              "--transformer-impl transformer_engine: accepted" "--no-masked-softmax-fusion: accepted" \
              "--no-bias-gelu-fusion: accepted" "--distributed-backend nccl: accepted" \
              "--group-query-attention: accepted: implied by --num-query-groups" \
              "--disable-bias-linear: mapped: read as --add-bias-linear false" \
              "--recompute-modules core_attn: accepted, nothing to change: attention is flash attention" \
              "padded vocab (size: 128256) with 0 dummy tokens (new size: 128256)"; do
    grep -qF -- "mcc: $line" "$work/recipe.log" || bad "the recipe's log lacks 'mcc: $line'"
  done
  echo "ok: the LLaMA-3 recipe's flags compile"
else
  bad "the LLaMA-3 recipe's flags do not compile:"; sed 's/^/  /' "$work/recipe.log"
fi
# what the mapped flags did: no biases (--disable-bias-linear), two kv groups of 32 split over tp 2
ir=$("$mcc" ir "$root/models/llama3-8b.json" "${recipe[@]}" --after shard 2>/dev/null)
grep -q '^global @.*\.bias ' <<<"$ir" && bad "--disable-bias-linear left bias parameters"
grep -q '^global @layers.0.attention.k.weight : f32\[32,256\]' <<<"$ir" || bad "k is not [2 groups * 32 / tp 2, 256]"
# Megatron's older --recompute-activations is selective recompute
log=$("$mcc" ir "$tiny" --recompute-activations --after recompute --target cpu 2>&1 >/dev/null)
diff <("$mcc" ir "$tiny" --recompute-activations --after recompute --target cpu 2>/dev/null) \
     <("$mcc" ir "$tiny" --recompute-granularity selective --after recompute --target cpu 2>/dev/null) >/dev/null &&
  grep -qF "mcc: --recompute-activations: mapped: read as --recompute-granularity selective" <<<"$log" ||
  bad "--recompute-activations is not read as --recompute-granularity selective"

# GPT-2's 50257 pads to 50304 (tp 1) and 50432 (tp 2, a multiple of 256); the plan has the padded one
gpt2=("$root/models/gpt2-124m.json" --num-layers 1 --target cpu)
log=$("$mcc" ir "${gpt2[@]}" --after shard 2>&1 >"$work/gpt2.ir")
grep -qF "mcc: padded vocab (size: 50257) with 47 dummy tokens (new size: 50304)" <<<"$log" || bad "tp 1 padding: $log"
grep -q 'vocab_size = "50304"' "$work/gpt2.ir" || bad "the plan's vocab_size is not the padded 50304"
log=$("$mcc" ir "${gpt2[@]}" --tp 2 --after shard 2>&1 >/dev/null) ||
  bad "GPT-2's vocabulary at tp 2 is refused: $log"
grep -qF "(size: 50257) with 175 dummy tokens (new size: 50432)" <<<"$log" || bad "tp 2 padding: $log"

# --flag=value reads as --flag value, in compile/ir and in the other commands
diff <("$mcc" ir "$tiny" --hidden-size=128 --after=autodiff --target=cpu 2>/dev/null) \
     <("$mcc" ir "$tiny" --hidden-size 128 --after autodiff --target cpu 2>/dev/null) >/dev/null ||
  bad "--flag=value differs from --flag value"
printf 'one small document\n' >"$work/doc.txt"
"$mcc" data preprocess --input="$work/doc.txt" --output-prefix="$work/doc" >/dev/null 2>&1 &&
  [ -f "$work/doc_text_document.idx" ] || bad "mcc data preprocess --input=FILE --output-prefix=P"

# --help / -h after any command: its usage on stdout, exit 0
for cmd in "compile" "ir" "compile $tiny --hidden-size 64 -h" "data" "data preprocess" "plot"; do
  # shellcheck disable=SC2086
  out=$("$mcc" $cmd --help 2>&1) && grep -q "usage" <<<"$out" || bad "mcc $cmd --help: $(head -2 <<<"$out")"
done
help=$("$mcc" compile --help)
for flag in --make-vocab-size-divisible-by --hidden-size "--tensor-model-parallel-size, --tp" --recompute-num-layers \
            --gpu-memory --bf16 --fp16 --disable-bias-linear; do
  grep -qF -- "$flag" <<<"$help" || bad "mcc compile --help does not list $flag"
done
grep -qE -- '--lr-decay-style +choice +cosine +.*\(constant\|linear\|cosine\|inverse-square-root\|WSD\)' <<<"$help" ||
  bad "mcc compile --help: --lr-decay-style lacks its type, default or choices"
# every field listed (docs/spec-fields.md is this table: tests/docs_check.py)
nfields=0
while read -r flag; do
  nfields=$((nfields + 1))
done < <(awk '/^Spec fields/ {on = 1; next} /^Megatron/ {on = 0} on && $1 ~ /^--/ {sub(/,$/, "", $1); print $1}' <<<"$help")
[ "$nfields" -ge 50 ] || bad "mcc compile --help lists only $nfields spec fields"
"$mcc" --version | grep -qE '^mcc [0-9]+\.[0-9]+\.[0-9]+$' || bad "mcc --version: $("$mcc" --version 2>&1)"

# bad flags: exit 2 (no signal, no sanitizer report), the flag named
expect() { # SUBSTRING -- COMMAND...
  local want=$1; shift 2
  "$@" >"$work/out" 2>&1; local rc=$?
  if [ $rc -ne 2 ] || ! grep -qF -- "$want" "$work/out"; then
    bad "(exit $rc) $*"; echo "  wanted: $want"; sed 's/^/  got: /' "$work/out" | head -5
  else echo "ok: $want"; fi
}
expect "--rank expects an integer >= 0, got 'abc'" -- "$mcc" ir "$tiny" --rank abc
expect "--rank expects an integer >= 0, got ''" -- "$mcc" ir "$tiny" --rank ''
expect "--rank expects an integer >= 0, got 'x'" -- "$mcc" ir "$tiny" --rank=x
expect "--rank needs a value" -- "$mcc" ir "$tiny" --rank
expect "--hidden-size expects an integer in 1..2147483647, got ''" -- "$mcc" compile "$tiny" --hidden-size '' -o "$work/x"
expect "--lr expects a finite number, got ''" -- "$mcc" compile "$tiny" --lr= -o "$work/x"
expect "--gpu-memory expects a number > 0, got 'x'" -- "$mcc" compile "$tiny" --gpu-memory x -o "$work/x"
expect "--gpu-memory 0 is out of range" -- "$mcc" compile "$tiny" --gpu-memory=0 -o "$work/x"
expect "--fp16 is refused: mcc trains in bf16 only" -- "$mcc" compile "$tiny" --fp16 -o "$work/x"
expect "--transformer-impl te: it takes transformer_engine|local" -- "$mcc" compile "$tiny" --transformer-impl te -o "$work/x"
expect "--distributed-backend gloo: it takes nccl" -- "$mcc" compile "$tiny" --distributed-backend=gloo -o "$work/x"
# train_rank's flags given to mcc compile are baked into the plan as its defaults, their values checked
ir=$("$mcc" ir "$tiny" --data-path 0.3 data/a 0.7 data/b --split 969,30,1 --save ckpt --finetune --eval-iters 0 \
  --after autodiff --target cpu 2>"$work/baked.log")
grep -qF 'train_rank_args = "--data-path\n0.3\ndata/a\n0.7\ndata/b\n--split\n969,30,1\n--save\nckpt\n--finetune"' <<<"$ir" ||
  bad "train_rank flags not baked as given: $(grep train_rank_args <<<"$ir")"
grep -qF "mcc: --finetune: baked into train_rank as its default" "$work/baked.log" || bad "no note for a baked flag"
expect "--save-interval 0 is out of range: give an integer in 1..1000000000" -- "$mcc" compile "$tiny" --save-interval 0 -o "$work/x"
expect "--dataloader-type external: it takes single|cyclic" -- "$mcc" compile "$tiny" --dataloader-type external -o "$work/x"
expect "--data-path needs a value" -- "$mcc" compile "$tiny" --data-path --save x -o "$work/x"
expect "--tokenizer-type GPT2BPETokenizer: accepted, not used: the tokenizer runs before training, in \`mcc data preprocess\`" \
  -- "$mcc" compile "$tiny" --tokenizer-type GPT2BPETokenizer --fp16 -o "$work/x"
# every problem of a command line in one run, counted
"$mcc" compile "$tiny" --fp16 --hiden-size 3 --save-interval 0 --ckpt-format torch_dist --lr x --bf16 7 -o "$work/x" \
  >/dev/null 2>"$work/all.log"
for line in "error: --fp16 is refused" "error: unknown flag '--hiden-size'" "error: --save-interval 0 is out of range" \
            "error: --lr expects a finite number, got 'x'" "error: '7' is not a flag" "5 problems" ; do
  grep -qF -- "$line" "$work/all.log" || bad "one run's problems lack '$line': $(cat "$work/all.log")"
done
expect "unknown flag '--hiden-size': did you mean --hidden-size?" -- "$mcc" compile "$tiny" --hiden-size 64 -o "$work/x"
expect "unknown flag '--bf61': did you mean --bf16?" -- "$mcc" compile "$tiny" --bf61 -o "$work/x"
expect "unknown flag '--keep-logit': did you mean --keep-logits?" -- "$mcc" compile "$tiny" --keep-logit -o "$work/x"
expect "unknown flag '--tq': did you mean --tp?" -- "$mcc" ir "$tiny" --tq 2
# no suggestion where the nearest flag is another word, not a typo of it
expect "unknown flag '--ckpt-dir' (spec fields" -- "$mcc" compile "$tiny" --ckpt-dir x -o "$work/x"
expect "unknown flag '--foo-bar' (spec fields" -- "$mcc" compile "$tiny" --foo-bar 1.0 -o "$work/x"
expect "\`mcc data\` has one command" -- "$mcc" data

[ $fails = 0 ] && echo "mcc flags: all cases pass"
exit $((fails > 0))
