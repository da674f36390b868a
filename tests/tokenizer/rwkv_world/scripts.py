"""Word and character pools per script, and sentence / paragraph / code generators for
make_corpus.py. Everything is driven by the caller's random.Random, so output is deterministic."""

ENGLISH = (
    "the of and to in is that it for was on are as with his they at be this from have or by one "
    "had not but what all were when we there can an your which their said if do will each about "
    "how up out them then she many some so these would other into has more her two like him see "
    "time could no make than first been its who now people my made over did down only way find "
    "use may water long little very after words called just where most know state recurrent "
    "linear attention tokenizer greedy longest match vocabulary server stream latency throughput "
    "don't isn't we'll I'm you're it's O'Neill naïve café résumé coöperate Zürich").split()

HANZI = ("的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生会自着去之过家"
         "学对可她里后小么心多天而能好都然没日于起还发成事只作当想看文无开手十用主行方又如前所本见"
         "经头面公同三已老从动两长知民样现分将外但身些与高意进把法此实回二理美点月明其种声全工己话"
         "儿者向情部正名定女问力机给等几很业最间新什打便位因重被走电四第门相次东政海口使教西再平真"
         "听世气信北少关并内加化由却代军产入先山五太水万市眼体别处总才场师书比住员九笑性通目华报立"
         "马命张活难神数件安表原车白应路期叫死常提感金何更反合放做系计或司利受光王果亲界及今京务制"
         "解各任至清物台象记边共风战干接它许八特觉望直服毛林题建南度统色字请交爱让认算论百吃义科怎"
         "模型语言分词器线性注意力推理服务")
HIRAGANA = "".join(chr(c) for c in range(0x3041, 0x3097))
KATAKANA = "".join(chr(c) for c in range(0x30A1, 0x30FB)) + "ー"
JAPANESE_WORDS = ("私 日本語 東京 今日 明日 天気 とても いい です ます でした ありがとう ございます "
                  "こんにちは さようなら 学校 先生 学生 電車 駅 コンピューター プログラム データ "
                  "トークナイザー 言語 モデル 推論 サーバー ラーメン 寿司 桜 富士山 が を に で と は "
                  "も の から まで").split()
KOREAN_WORDS = ("안녕하세요 감사합니다 한국어 서울 오늘 날씨 좋아요 학교 선생님 학생 컴퓨터 "
                "프로그램 데이터 언어 모델 추론 서버 김치 비빔밥 사랑 그리고 하지만 있습니다 "
                "없습니다 입니다 이 가 을 를 은 는 에서 으로").split()
ARABIC_WORDS = ("مرحبا شكرا اللغة العربية القاهرة اليوم الطقس جميل مدرسة معلم طالب حاسوب برنامج "
                "بيانات نموذج خادم كتاب قلم في من إلى على عن مع هذا هذه الذي التي كان يكون "
                "وَالْكِتَابُ مُحَمَّدٌ ١٢٣ ٤٥٦٧٨٩٠").split()
HINDI_WORDS = ("नमस्ते धन्यवाद हिंदी भाषा दिल्ली आज मौसम अच्छा विद्यालय शिक्षक छात्र कंप्यूटर "
               "प्रोग्राम डेटा मॉडल सर्वर किताब है हैं था थे में से को का की के और लेकिन क्योंकि "
               "स्वतंत्रता प्रधानमंत्री १२३ ४५६").split()
RUSSIAN_WORDS = ("привет спасибо русский язык Москва сегодня погода хорошая школа учитель студент "
                 "компьютер программа данные модель сервер книга и в не на я что он с как это по "
                 "но они мы из у за же от всё ещё Ёлка съезд объём").split()
GREEK_WORDS = "καλημέρα ευχαριστώ γλώσσα Αθήνα σήμερα καιρός ωραίος σχολείο και το η ο".split()
HEBREW_WORDS = "שלום תודה שפה ירושלים היום מזג אוויר טוב בית ספר מורה תלמיד של את על".split()
THAI_WORDS = "สวัสดี ขอบคุณ ภาษาไทย กรุงเทพ วันนี้ อากาศ ดี โรงเรียน ครู นักเรียน และ ที่".split()
EUROPEAN_WORDS = ("Straße Größe Übung français garçon où señor mañana niño ação São Paulo "
                  "Kraków żółć Łódź İstanbul ğüşıöç Æsir Ørsted Ångström Tiếng Việt "
                  "đường phố").split()
EMOJI = ["\U0001F600", "\U0001F602", "\U0001F44D", "\U0001F44D\U0001F3FD", "\u2764\ufe0f",
         "\U0001F468\u200d\U0001F469\u200d\U0001F467\u200d\U0001F466",  # family (ZWJ)
         "\U0001F469\U0001F3FE\u200d\U0001F4BB",  # technologist, skin tone
         "\U0001F3F3\ufe0f\u200d\U0001F308",  # rainbow flag
         "\U0001F1EF\U0001F1F5", "\U0001F1FA\U0001F1F8", "\U0001F1E8\U0001F1F3",  # flags
         "1\ufe0f\u20e3", "#\ufe0f\u20e3", "\U0001F9D1\u200d\U0001F91D\u200d\U0001F9D1",
         "\U0001F680", "\U0001F525", "\u2728", "\U0001F914", "\U0001FAE0", "\u263A"]

WORDS = {
    "english": ENGLISH, "japanese": JAPANESE_WORDS, "korean": KOREAN_WORDS,
    "arabic": ARABIC_WORDS, "hindi": HINDI_WORDS, "russian": RUSSIAN_WORDS,
    "greek": GREEK_WORDS, "hebrew": HEBREW_WORDS, "thai": THAI_WORDS, "european": EUROPEAN_WORDS,
}
SCRIPT_NAMES = sorted(list(WORDS) + ["chinese", "emoji"])
END = {"chinese": "。！？，；", "japanese": "。、！？", "arabic": ".،؟", "hindi": "।?!",
       "thai": " "}


def sentence(rng, script):
    n = rng.randint(3, 18)
    if script == "chinese":
        body = "".join(rng.choice(HANZI) for _ in range(n * 2))
        return body + rng.choice(END["chinese"])
    if script == "emoji":
        return " ".join(rng.choice(EMOJI) * rng.randint(1, 3) + rng.choice(["", " ok", "!"])
                        for _ in range(n // 2 + 1))
    words = [rng.choice(WORDS[script]) for _ in range(n)]
    if script == "japanese":
        words.append("".join(rng.choice(HIRAGANA + KATAKANA) for _ in range(rng.randint(1, 6))))
        return "".join(words) + rng.choice(END["japanese"])
    if script == "thai":
        return "".join(words) + " "
    if script == "english" and rng.random() < 0.5:
        words[0] = words[0].capitalize()
        words.insert(rng.randrange(len(words)), str(rng.choice([7, 42, 1999, 2026, 3.14159, 10**9])))
    text = " ".join(words)
    return text + rng.choice(END.get(script, ".!?,;:"))


def paragraph(rng, script):
    sep = "" if script in ("chinese", "japanese") else " "
    body = sep.join(sentence(rng, script) for _ in range(rng.randint(1, 8)))
    return body + rng.choice(["", "\n", "\n\n", " "])


CODE = [
    "def forward(self, x):\n    h = self.norm(x)\n    return x + self.mix(h)\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i] * b[i];  // dot\n}\n",
    "#include <vector>\nint main() { std::vector<int> v{1, 2, 3}; return v.size(); }\n",
    "const f = async (url) => { const r = await fetch(url); return r.json(); };\n",
    '{"name": "linfer", "version": "0.1.0", "tags": ["rwkv", "world"], "ok": true}\n',
    "<div class=\"row\">\n  <span>&lt;tag&gt; &amp; &#x4e2d;</span>\n</div>\n",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name DESC LIMIT 10;\n",
    "fn main() {\n    let xs: Vec<u32> = (0..10).map(|x| x * x).collect();\n}\n",
    "if [ -f \"$HOME/.bashrc\" ]; then\n    source ~/.bashrc  # comment\nfi\n",
    "    \t  mixed   indentation\t\t\n        deeply    nested\n",
    "x = 0x7fffffff; y = 1e-9; z = 'single' + \"double\" + `tick`; /* block */\n",
    "\\begin{equation} e^{i\\pi} + 1 = 0 \\end{equation}\n",
]


def code(rng):
    return "".join(rng.choice(CODE) for _ in range(rng.randint(1, 6)))
