// bpe_reference.js NPM_PREFIX tiktoken PATTERN OFFSET < docs.jsonl > ids.jsonl
// bpe_reference.js NPM_PREFIX hf TOKENIZER_JSON_OR_DIR < docs.jsonl > ids.jsonl
//   The token ids of each line's "text", one JSON array a line, by npm's reference tokenizers:
//   tiktoken: js-tiktoken with cl100k_base's ranks (its own copy, not the file bpe_files.js
//     wrote) and the pre-tokenizer PATTERN (llama3, or Megatron's v1 / v2), each id + OFFSET
//     (Megatron's TikTokenizer puts its special tokens first). No special tokens in the text.
//   hf: @huggingface/tokenizers (tokenizers.js) on the tokenizer.json (or DIR/tokenizer.json), with
//     the tokenizer_config.json beside it when there is one; special tokens as the library adds them.
'use strict';
const fs = require('fs');
const path = require('path');
const readline = require('readline');

const [prefix, mode, arg, offsetArg] = process.argv.slice(2);
const mod = (name) => path.join(path.resolve(prefix), 'node_modules', name);

// The patterns in JavaScript's spelling: tiktoken's Rust regex has Unicode \s (White_Space, as
// \p{White_Space}; JavaScript's \s differs at U+0085 and U+FEFF) and (?i:...) (ASCII cases
// spelled out, as js-tiktoken's own cl100k pattern does); JavaScript has no possessive
// quantifiers, and v1's never need to backtrack, so plain ones match the same.
const WS = '\\p{White_Space}', NWS = '\\P{White_Space}';
const CONTRACTIONS = "'s|'S|'t|'T|'re|'rE|'Re|'RE|'ve|'vE|'Ve|'VE|'m|'M|'ll|'lL|'Ll|'LL|'d|'D";
const PATTERNS = {
  llama3: `(?:${CONTRACTIONS})|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^${WS}\\p{L}\\p{N}]+[\\r\\n]*` +
          `|${WS}*[\\r\\n]+|${WS}+(?!${NWS})|${WS}+`,
  v1: `[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^${WS}\\p{L}\\p{N}]+[\\r\\n]*|${WS}*[\\r\\n]|${WS}+(?!${NWS})|${WS}+`,
  v2: '[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+' +
      '|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*' +
      `|\\p{N}| ?[^${WS}\\p{L}\\p{N}]+[\\r\\n/]*|${WS}*[\\r\\n]+|${WS}+(?!${NWS})|${WS}+`,
};

function tiktokenEncoder() {
  const { Tiktoken } = require(mod('js-tiktoken'));
  const src = fs.readFileSync(path.join(mod('js-tiktoken'), 'dist', 'ranks', 'cl100k_base.js'), 'utf8');
  const ranks = JSON.parse(src.slice(src.indexOf('{'), src.lastIndexOf('}') + 1));
  if (!PATTERNS[arg]) throw new Error(`unknown pattern ${arg}; one of ${Object.keys(PATTERNS)}`);
  // One special token that never occurs: js-tiktoken's special-token regex needs one.
  const enc = new Tiktoken({ pat_str: PATTERNS[arg], special_tokens: { '<|mcc-none|>': 1 << 30 },
                             bpe_ranks: ranks.bpe_ranks });
  const offset = Number(offsetArg);
  return (text) => enc.encode(text, [], []).map((id) => id + offset);
}

function hfEncoder() {
  const { Tokenizer } = require(mod('@huggingface/tokenizers'));
  const isDir = fs.statSync(arg).isDirectory();
  const dir = isDir ? arg : path.dirname(arg);
  const read = (file) => JSON.parse(fs.readFileSync(file, 'utf8'));
  const configFile = path.join(dir, 'tokenizer_config.json');
  const tok = new Tokenizer(read(isDir ? path.join(arg, 'tokenizer.json') : arg),
                            fs.existsSync(configFile) ? read(configFile) : {});
  return (text) => tok.encode(text).ids;
}

const encode = mode === 'tiktoken' ? tiktokenEncoder() : hfEncoder();
const lines = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
const out = [];
lines.on('line', (line) => out.push(JSON.stringify(encode(JSON.parse(line).text))));
lines.on('close', () => process.stdout.write(out.length ? out.join('\n') + '\n' : ''));
