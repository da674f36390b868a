// Reference encode throughput for tokenizer_benchmark: the Hugging Face tokenizers library
// (@anush008/tokenizers) on the same corpus, single thread (RAYON_NUM_THREADS=1 is set by the
// caller). Usage: node tokenizer_reference.js TOKENIZER_JSON CORPUS_TXT PASSES
// Prints {"sequential_mbps": x, "batch_mbps": y}: per-document async encode() calls, and one
// encodeBatch() over all documents (less per-call overhead; still one Rust thread).
'use strict';
const fs = require('fs');
const { Tokenizer } = require('@anush008/tokenizers');

async function main() {
  const [file, corpusPath, passesArg] = process.argv.slice(2);
  const docs = fs.readFileSync(corpusPath, 'utf8').split('\n').filter((d) => d.length > 0);
  const bytes = docs.reduce((n, d) => n + Buffer.byteLength(d, 'utf8'), 0);
  const passes = Number(passesArg || 3);
  const tok = Tokenizer.fromFile(file);
  const opts = { addSpecialTokens: false };
  for (const d of docs) await tok.encode(d, null, opts);  // warm-up (fills the word cache)
  let best = Infinity;
  for (let p = 0; p < passes; p++) {
    const t0 = process.hrtime.bigint();
    for (const d of docs) await tok.encode(d, null, opts);
    best = Math.min(best, Number(process.hrtime.bigint() - t0) / 1e9);
  }
  let bestBatch = Infinity;
  for (let p = 0; p < passes; p++) {
    const t0 = process.hrtime.bigint();
    await tok.encodeBatch(docs, opts);
    bestBatch = Math.min(bestBatch, Number(process.hrtime.bigint() - t0) / 1e9);
  }
  console.log(JSON.stringify({ sequential_mbps: bytes / 1e6 / best,
                               batch_mbps: bytes / 1e6 / bestBatch, bytes }));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
