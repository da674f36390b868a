// Compare our BPE encoder's ids with the Hugging Face tokenizers library (Rust, via npm
// @anush008/tokenizers).  Usage: node check_tokenizer.js tokenizer.json cases.json
// cases.json: {"cases": [{"text": "...", "ids": [...], "ids_bos": [...]}, ...]}
// Exit status 0 iff every case matches (without and with special tokens) and decodes back.
const fs = require('fs');
const { Tokenizer } = require('@anush008/tokenizers');

async function main() {
  const [tokPath, casesPath] = process.argv.slice(2);
  const tok = Tokenizer.fromFile(tokPath);
  const { cases } = JSON.parse(fs.readFileSync(casesPath, 'utf8'));
  let bad = 0, tokens = 0;
  const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);
  for (const [n, c] of cases.entries()) {
    const ids = Array.from((await tok.encode(c.text, null, { addSpecialTokens: false })).getIds());
    const idsBos = Array.from((await tok.encode(c.text, null, { addSpecialTokens: true })).getIds());
    const text = await tok.decode(ids, false);
    tokens += ids.length;
    if (!same(ids, c.ids) || !same(idsBos, c.ids_bos) || text !== c.text) {
      if (bad++ < 5) {
        const i = ids.findIndex((x, j) => x !== c.ids[j]);
        console.log(`case ${n}: mismatch at ${i}: ref ${ids.slice(i, i + 8)} ours ${c.ids.slice(i, i + 8)}` +
                    ` bos ${same(idsBos, c.ids_bos)} decode ${text === c.text}`);
      }
    }
  }
  console.log(`${cases.length - bad}/${cases.length} cases identical (${tokens} tokens)`);
  process.exit(bad ? 1 : 0);
}
main().catch(e => { console.error(e); process.exit(2); });
