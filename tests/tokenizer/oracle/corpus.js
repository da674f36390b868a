// Deterministic test corpus for the tokenizer oracle: prose, code, many scripts, emoji and ZWJ
// sequences, combining marks, whitespace runs, digits, inline special tokens, very long words.
'use strict';

function mulberry32(seed) {
  return function () {
    seed |= 0;
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const PROSE = [
  'The quick brown fox jumps over the lazy dog.',
  "It's a truth universally acknowledged, that a single man in possession of a good fortune, must be in want of a wife.",
  "I'm sure you're right; we'll see what they've done. DON'T PANIC! She'd say it's OK.",
  'In 1969, Apollo 11 landed on the Moon; 600 million people watched on TV.',
  'Linear attention replaces softmax(QK^T)V with a recurrent state S_t = S_{t-1} + k_t v_t^T.',
  'Mr. O\u2019Neil\u2019s e-mail (sent 3:45 p.m.) said: \u201cSee you at 10 o\u2019clock!\u201d',
  'Hello,   world!\tTabs\tand  double  spaces.\nNew line.\r\nWindows line.',
  'URLs like https://example.com/path?q=1&x=%20y#frag and emails like a.b@c.org appear often.',
];

const CODE = [
  'def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n',
  '#include <vector>\nint main() {\n  std::vector<int> v{1, 2, 3};\n  for (auto& x : v) x *= 2;\n  return 0;\n}\n',
  'const f = async (x) => { await sleep(10); return x ?? null; }; // TODO: fix\n',
  '{"key": "value", "n": [1, 2.5, -3e10], "nested": {"a": null, "b": true}}',
  '<div class="row"><span id=\'x\'>&nbsp;&lt;tag&gt;</span></div>',
  'SELECT id, name FROM users WHERE age >= 18 AND name LIKE \'%son\' ORDER BY id DESC;',
  '    \tindented\t\tline\n\n\n\tafter blank lines\n        return x;;\n',
  'fn main() { let s: &str = "hi"; println!("{s:?} {}", 0x1F_u8 as char); }',
];

const SCRIPTS = [
  '\u4eca\u5929\u5929\u6c14\u5f88\u597d\uff0c\u6211\u4eec\u53bb\u516c\u56ed\u6563\u6b65\u5427\u3002',  // Chinese
  '\u6771\u4eac\u306f\u65e5\u672c\u306e\u9996\u90fd\u3067\u3059\u3002\u30ab\u30bf\u30ab\u30ca\u3068\u3072\u3089\u304c\u306a\u3002',
  '\ud55c\uad6d\uc5b4 \ubb38\uc7a5\uc744 \ud1a0\ud070\ud654\ud569\ub2c8\ub2e4.',  // Korean
  '\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645! \u0643\u064a\u0641 \u062d\u0627\u0644\u0643\u061f',  // Arabic
  '\u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd',  // Hebrew
  '\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e, \u092f\u0939 \u090f\u0915 \u092a\u0930\u0940\u0915\u094d\u0937\u0923 \u0939\u0948\u0964',  // Hindi
  '\u0986\u09ae\u09bf \u09ac\u09be\u0982\u09b2\u09be\u09af\u09bc \u0997\u09be\u09a8 \u0997\u09be\u0987\u0964',  // Bengali
  '\u0bb5\u0ba3\u0b95\u0bcd\u0b95\u0bae\u0bcd \u0b89\u0bb2\u0b95\u0bae\u0bcd',  // Tamil
  '\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u0e04\u0e23\u0e31\u0e1a \u0e22\u0e34\u0e19\u0e14\u0e35\u0e15\u0e49\u0e2d\u0e19\u0e23\u0e31\u0e1a',  // Thai
  '\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440! \u0421\u044a\u0435\u0448\u044c \u0435\u0449\u0451 \u044d\u0442\u0438\u0445 \u0431\u0443\u043b\u043e\u043a.',  // Russian
  '\u039a\u03b1\u03bb\u03b7\u03bc\u03ad\u03c1\u03b1 \u03ba\u03cc\u03c3\u03bc\u03b5! \u03a3\u03af\u03c3\u03c5\u03c6\u03bf\u03c2 \u039f\u0394\u03a5\u03a3\u03a3\u0395\u03a5\u03a3',  // Greek
  '\u0532\u0561\u0580\u0587 \u0561\u0577\u056d\u0561\u0580\u0570',  // Armenian
  '\u10d2\u10d0\u10db\u10d0\u10e0\u10ef\u10dd\u10d1\u10d0 \u10db\u10e1\u10dd\u10e4\u10da\u10d8\u10dd',  // Georgian
  'Ti\u1ebfng Vi\u1ec7t c\u00f3 nhi\u1ec1u d\u1ea5u: \u0111\u01b0\u1eddng ph\u1ed1 H\u00e0 N\u1ed9i.',  // Vietnamese
  'T\u00fcrk\u00e7e: \u0130stanbul, \u0131\u015f\u0131k, \u00c7\u0130\u00c7EK. Deutsch: Stra\u00dfe, \u00c4pfel, GR\u00dc\u1e9e.',
  'Fran\u00e7ais: \u00e0 l\u2019\u00e9cole, na\u00efve, c\u0153ur. Espa\u00f1ol: \u00bfQu\u00e9 tal? \u00a1Ol\u00e9! Polski: \u017c\u00f3\u0142\u0107 g\u0119\u015bl\u0105 ja\u017a\u0144.',
  '\u12a0\u121b\u122d\u129b \u124b\u1295\u124b',  // Amharic
  '\u1797\u17b6\u179f\u17b6\u1781\u17d2\u1798\u17c2\u179a',  // Khmer
  '\u1019\u103c\u1014\u103a\u1019\u102c\u1005\u102c',  // Burmese
  '\u0dc3\u0dd2\u0d82\u0dc4\u0dbd',  // Sinhala
  '\u0f56\u0f7c\u0f51\u0f0b\u0f61\u0f72\u0f42',  // Tibetan
  '\u1830\u1823\u1829\u182d\u182d\u1823\u182f \u180e\u1820',  // Mongolian incl. U+180E
  '\u0628\u0647 \u0641\u0627\u0631\u0633\u06cc \u06f1\u06f2\u06f3 \u0648 \u0627\u0631\u062f\u0648 \u0661\u0662\u0663',
  '\u13a3\u13cf\u13b3\u13a9 \u1403\u14c4\u1483\u144e\u1450\u1466',  // Cherokee, Canadian syllabics
];

const EMOJI = [
  '\ud83d\ude00\ud83d\ude03\ud83d\ude04 \ud83d\udc4d\ud83c\udffd \ud83d\udc4b\ud83c\udfff',
  '\ud83d\udc68\u200d\ud83d\udc69\u200d\ud83d\udc67\u200d\ud83d\udc66 family, \ud83c\udff3\ufe0f\u200d\ud83c\udf08 flag, \ud83d\udc69\u200d\ud83d\udcbb coder',
  '\ud83c\uddfa\ud83c\uddf8\ud83c\uddef\ud83c\uddf5\ud83c\udde9\ud83c\uddea flags 1\ufe0f\u20e3 #\ufe0f\u20e3 \u2764\ufe0f \u263a',
  '\ud83e\uddd1\ud83c\udffb\u200d\ud83e\udd1d\u200d\ud83e\uddd1\ud83c\udffe \ud83d\udc41\ufe0f\u200d\ud83d\udde8\ufe0f',
  '\u2728\ud83d\ude80\ud83d\udd25\ud83d\udcaf\ud83c\udf89 emoji-only line \ud83e\udd16\ud83e\udde0',
];

const COMBINING = [
  'e\u0301 vs \u00e9, a\u0300 vs \u00e0, n\u0303 vs \u00f1, \u212b vs \u00c5, \ufb01 ligature, \u2126 ohm',
  'Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334\u0319\u0324\u031e\u0349\u035a\u032f\u031e\u0320\u034da\u0336\u0317\u0330\u0353l\u0337\u0330\u0325g\u0338\u033bo\u0334\u0327 text',
  '\u1100\u1161\u11a8 jamo \u1112\u1161\u11ab\u1100\u1173\u11af decomposed hangul',
  'o\u0308\u0304 stacked, q\u0307\u0323 dots, \u0915\u093c nukta, \u0627\u064e\u0651 harakat',
  'full\uff37\uff49\uff44\uff54\uff48 \uff11\uff12\uff13 \u2460\u2461 \u00b2\u00b3 \u00bd \u2167 \u3000ideographic\u3000space',
];

const WHITESPACE = [
  ' ', '  ', '    ', '\t', '\t\t', '\n', '\n\n', '\n\n\n', '\r\n', ' \n ', '\u00a0', '\u3000',
  '\u2028', '\u2029', '\u200b', '\ufeff', '\u180e', '\u2003', '\u202f', '\u0085', '\u000b', '\u000c',
];

const DIGITS = [
  '0', '7', '42', '123', '1234', '12345', '3.14159', '1,000,000', '2024-05-17', '0xDEADBEEF',
  '\u0661\u0662\u0663', '\uff11\uff12\uff13', '\u00b2', '\u2167', '1e-9', '99.9%', '$1.50', '\u20ac20',
  '00000000000000000000', '31415926535897932384626433832795',
];

const SPECIALS = [
  '<|endoftext|>', '<s>', '</s>', '<unk>', '<|begin_of_text|>', '<|end_of_text|>', '<|eot_id|>',
  '<|start_header_id|>', '<|im_start|>', '<|im_end|>', '<bos>', '<eos>', '<start_of_turn>',
  '<end_of_turn>', '<pad>', '<unused12>', '<mask>', '[multimodal]', '<|endofprompt|>',
  '<\uff5cbegin\u2581of\u2581sentence\uff5c>', '<\uff5cend\u2581of\u2581sentence\uff5c>',
  '<think>', '</think>', '<|fim_prefix|>', '<|padding|>', '<|endoftext|', '<<s>>', '<|im_start|>user',
  '\u2581\u2581', '\u2581', '\u2581\u2581\u2581\u2581',
];

const LETTERS = 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ';

function pick(rand, list) {
  return list[Math.floor(rand() * list.length)];
}

// Random code point from assigned, stable blocks (no surrogates, no unassigned ranges).
const BLOCKS = [
  [0x20, 0x7e], [0xa0, 0x17f], [0x370, 0x3ff], [0x400, 0x4ff], [0x5d0, 0x5ea], [0x620, 0x64a],
  [0x900, 0x97f], [0xe01, 0xe3a], [0x3041, 0x3096], [0x30a1, 0x30fa], [0x4e00, 0x9fa5],
  [0xac00, 0xd7a3], [0x2000, 0x206f], [0x2190, 0x21ff], [0x2200, 0x22ff], [0x2500, 0x257f],
  [0x1f300, 0x1f5ff], [0x1f600, 0x1f64f], [0x300, 0x36f], [0xff01, 0xff5e],
];

function randomChars(rand, n) {
  let s = '';
  for (let i = 0; i < n; i++) {
    const [lo, hi] = pick(rand, BLOCKS);
    s += String.fromCodePoint(lo + Math.floor(rand() * (hi - lo + 1)));
  }
  return s;
}

function randomWord(rand, n) {
  let s = '';
  for (let i = 0; i < n; i++) s += LETTERS[Math.floor(rand() * LETTERS.length)];
  return s;
}

function fragment(rand) {
  const r = rand();
  if (r < 0.2) return pick(rand, PROSE);
  if (r < 0.3) return pick(rand, CODE);
  if (r < 0.5) return pick(rand, SCRIPTS);
  if (r < 0.58) return pick(rand, EMOJI);
  if (r < 0.64) return pick(rand, COMBINING);
  if (r < 0.72) return pick(rand, DIGITS);
  if (r < 0.8) return pick(rand, SPECIALS);
  if (r < 0.9) return randomWord(rand, 1 + Math.floor(rand() * 12));
  return randomChars(rand, 1 + Math.floor(rand() * 20));
}

// Returns the corpus: fixed cases first, then seeded random mixtures.
function makeCorpus(count) {
  const rand = mulberry32(20240517);
  const out = [''];
  for (const list of [PROSE, CODE, SCRIPTS, EMOJI, COMBINING, WHITESPACE, DIGITS, SPECIALS]) {
    out.push(...list);
  }
  for (const w of WHITESPACE) out.push('a' + w + 'b', w + 'x', 'x' + w, w + w + w + 'word' + w);
  for (const s of SPECIALS) out.push('Hi ' + s + ' there', s + s, '  ' + s + '\n', 'x' + s + 'y');
  out.push('a'.repeat(1000), 'ab'.repeat(700), 'supercalifragilisticexpialidocious'.repeat(40));
  out.push(randomWord(rand, 3000), '9'.repeat(500), ' '.repeat(300), '\n'.repeat(100));
  out.push('\t'.repeat(64), '\u4e2d\u6587'.repeat(400), '\ud83d\ude00'.repeat(200));
  out.push(randomChars(rand, 2000), '\u2581'.repeat(50), 'x\u2581y \u2581 z');
  out.push(("it's I'M we'LL they'Re you'VE he'D 'S 's").repeat(3));
  while (out.length < count) {
    const parts = 1 + Math.floor(rand() * 8);
    let s = '';
    for (let i = 0; i < parts; i++) {
      s += fragment(rand);
      if (rand() < 0.7) s += pick(rand, WHITESPACE.concat([' ', ' ', ' ', '', ', ', '. ']));
    }
    out.push(s);
  }
  return out;
}

module.exports = { makeCorpus };
