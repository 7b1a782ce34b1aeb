// gpt2_reference.js NPM_PREFIX < docs.jsonl > ids.jsonl — GPT-2 token ids of each line's "text"
// by two independent JavaScript tokenizers, npm's gpt-3-encoder (a port of OpenAI's encoder.py)
// and js-tiktoken (OpenAI's gpt2 ranks): one JSON array of ids a line. Exits 1 where they differ.
'use strict';
const path = require('path');
const readline = require('readline');

const prefix = path.resolve(process.argv[2]);
const gpt3 = require(path.join(prefix, 'node_modules', 'gpt-3-encoder'));
const { getEncoding } = require(path.join(prefix, 'node_modules', 'js-tiktoken'));
const tiktoken = getEncoding('gpt2');

const lines = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
let lineno = 0, failed = false;
const out = [];
lines.on('line', (line) => {
  lineno++;
  const text = JSON.parse(line).text;
  const a = gpt3.encode(text);
  // No special tokens: "<|endoftext|>" inside a document is text, as in Megatron's GPT2 tokenizer.
  const b = Array.from(tiktoken.encode(text, [], []));
  if (JSON.stringify(a) !== JSON.stringify(b)) {
    process.stderr.write(`line ${lineno}: gpt-3-encoder and js-tiktoken disagree on ${JSON.stringify(text).slice(0, 200)}\n`);
    failed = true;
  }
  out.push(JSON.stringify(a));
});
lines.on('close', () => {
  process.stdout.write(out.length ? out.join('\n') + '\n' : '');
  process.exitCode = failed ? 1 : 0;
});
