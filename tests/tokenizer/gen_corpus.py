#!/usr/bin/env python3
"""Generates tests/tokenizer/corpus.jsonl: one JSON string per line (lines may hold CR, tabs, NUL-free).
Deterministic (fixed seed); sentences and word lists below were written for this corpus.
usage: python3 tests/tokenizer/gen_corpus.py > tests/tokenizer/corpus.jsonl
U+0085, U+180E and U+FEFF are left out on purpose: JavaScript's \\s differs from Unicode White_Space
(which HF and our C use) on them; divergent.jsonl holds those cases (tests/tokenizer/README.md)."""
import json
import random
import unicodedata

rng = random.Random(20261122)

SENT = {
    "en": [
        "The quick brown fox jumps over the lazy dog.",
        "She sells seashells by the seashore, doesn't she?",
        "I can't believe it's already half past nine!",
        "Please speak slowly and clearly into the microphone.",
        "Our train leaves at 7:45 from platform 12.",
        "He said, \"Never give up,\" and walked away.",
        "The weather today is cloudy with a chance of rain.",
        "Could you read this paragraph one more time?",
        "They've been waiting for hours; we'll be late.",
        "A voice clone needs only a few seconds of clean audio.",
        "Mr. Smith's dog barked at 3 a.m. again...",
        "Well -- that was unexpected, wasn't it?",
        "Reading aloud helps children learn new words.",
        "The museum opens on Tuesday, March 4th, 2025.",
        "What's the difference between 'affect' and 'effect'?",
        "You're welcome to join us for dinner tonight.",
        "This sentence ends with an ellipsis…",
        "Temperatures fell to -12.5 degrees overnight.",
    ],
    "zh": [
        "今天天气很好，我们去公园散步吧。",
        "请把这段文字慢慢地读一遍。",
        "他说：“明天见！”然后就走了。",
        "这个声音克隆模型只需要几秒钟的录音。",
        "我们的火车早上七点四十五分出发。",
        "学习一门新的语言需要耐心和时间。",
        "北京是中国的首都，人口超过两千万。",
        "你吃饭了吗？我刚刚做好了饺子。",
        "春眠不觉晓，处处闻啼鸟。",
        "会议将在二零二五年三月四日举行。",
        "请问最近的地铁站怎么走？",
        "这本书一共有三百二十八页。",
    ],
    "ja": [
        "今日はとても良い天気ですね。",
        "この文章をゆっくり読んでください。",
        "東京駅から新幹線で大阪へ行きます。",
        "私はコーヒーよりお茶が好きです。",
        "明日の会議は午前十時に始まります。",
        "カタカナとひらがなと漢字を混ぜて書きます。",
        "すみません、トイレはどこですか？",
        "彼は「ありがとう」と言いました。",
        "ソフトウェアのアップデートが完了しました。",
        "ｶﾀｶﾅの半角文字も試してみましょう。",
    ],
    "ko": [
        "오늘 날씨가 정말 좋네요.",
        "이 문장을 천천히 읽어 주세요.",
        "서울에서 부산까지 기차로 갑니다.",
        "저는 커피보다 차를 더 좋아해요.",
        "회의는 오전 열 시에 시작합니다.",
        "감사합니다! 다음에 또 만나요.",
        "한국어 음성 합성 테스트 문장입니다.",
        "지하철역이 어디에 있는지 아세요?",
        "우리는 2025년 3월 4일에 만났습니다.",
    ],
    "de": [
        "Der schnelle braune Fuchs springt über den faulen Hund.",
        "Können Sie bitte etwas langsamer sprechen?",
        "Die Straßenbahn fährt um 7:45 Uhr ab.",
        "Grüße aus München, wo es heute schneit.",
        "Das Bundesverfassungsgericht tagt in Karlsruhe.",
        "Ich hätte gern ein Stück Käsekuchen, bitte.",
        "Übermorgen öffnen die Geschäfte wieder.",
        "Die Donaudampfschifffahrtsgesellschaft existiert nicht mehr.",
        "Heißt es „das“ oder „dass“ in diesem Satz?",
        "Wir müssen über die Brücke gehen.",
    ],
    "fr": [
        "Le vif renard brun saute par-dessus le chien paresseux.",
        "Pourriez-vous parler un peu plus lentement ?",
        "J'ai mangé une crème brûlée à Noël.",
        "L'été dernier, nous sommes allés à Besançon.",
        "« Bonjour ! » dit-elle en souriant.",
        "Où est la gare la plus proche, s'il vous plaît ?",
        "Il était une fois un garçon très curieux.",
        "C'est déjà l'heure de partir ; dépêchons-nous.",
        "Ça coûte 12,50 € au marché.",
        "Les élèves étudient le français et l'anglais.",
    ],
    "ru": [
        "Съешь же ещё этих мягких французских булок да выпей чаю.",
        "Пожалуйста, говорите медленнее.",
        "Поезд отправляется в 7:45 с первой платформы.",
        "Москва — столица России.",
        "Я люблю читать книги по вечерам.",
        "Сегодня холодно: минус пятнадцать градусов.",
        "«Привет!» — сказал он и улыбнулся.",
        "Ёлка стоит в углу большой комнаты.",
        "Мы встретимся в понедельник, 4 марта.",
    ],
    "pt": [
        "O rápido cachorro marrom pula sobre a raposa preguiçosa.",
        "Você poderia falar mais devagar, por favor?",
        "A reunião começa às nove e meia da manhã.",
        "Não sei se ele já chegou à estação.",
        "Obrigado pela ajuda; até amanhã!",
        "O coração da cidade é a praça principal.",
        "Ações da empresa subiram 3,7% hoje.",
        "Vovó preparou pão de queijo e café.",
    ],
    "es": [
        "El veloz murciélago hindú comía feliz cardillo y kiwi.",
        "¿Podría hablar más despacio, por favor?",
        "¡Qué sorpresa verte aquí!",
        "La reunión empieza a las nueve y media.",
        "El niño jugó con su pequeño perro en el jardín.",
        "Mañana iremos a la montaña con mis abuelos.",
        "Año nuevo, vida nueva: ¡feliz 2026!",
        "La cigüeña voló sobre el pingüino.",
    ],
    "it": [
        "La volpe veloce salta sopra il cane pigro.",
        "Potrebbe parlare più lentamente, per favore?",
        "Perché non andiamo al mare domenica?",
        "L'università è chiusa fino a lunedì.",
        "Ho mangiato un caffè e un cornetto alle otto.",
        "È già tardi: dobbiamo partire subito.",
        "Città, virtù e perciò sono parole accentate.",
        "Quest'anno la vendemmia è stata abbondante.",
    ],
    "other": [
        "مرحبا بكم في هذا الاختبار.",
        "שלום עולם, מה שלומך?",
        "สวัสดีครับ ยินดีต้อนรับ",
        "नमस्ते, आप कैसे हैं?",
        "Γειά σου Κόσμε! Τι κάνεις;",
        "Xin chào, bạn có khỏe không?",
        "Cześć, jak się masz? Żółć gęślą jaźń.",
        "Merhaba dünya, nasılsın?",
        "Tiếng Việt có nhiều dấu thanh điệu.",
        "ქართული ენა ძალიან ლამაზია.",
        "Հայերեն լեզուն ունի իր այբուբենը։",
    ],
}

WORDS = {
    "en": "apple window river silent yellow engine bridge morning whisper garden market quietly "
          "thunder kitchen pencil journey sunlight ocean mountain violin ticket holiday".split(),
    "de": "Apfel Fenster Fluss leise gelb Motor Brücke Morgen flüstern Garten Markt Gewitter "
          "Küche Bleistift Reise Sonnenlicht Ozean Berg Geige Fahrkarte Urlaub Straße".split(),
    "fr": "pomme fenêtre rivière silencieux jaune moteur pont matin chuchoter jardin marché "
          "tonnerre cuisine crayon voyage soleil océan montagne violon billet vacances".split(),
    "es": "manzana ventana río silencioso amarillo motor puente mañana susurrar jardín mercado "
          "trueno cocina lápiz viaje océano montaña violín billete vacaciones".split(),
    "it": "mela finestra fiume silenzioso giallo motore ponte mattina sussurrare giardino "
          "mercato tuono cucina matita viaggio oceano montagna violino biglietto".split(),
    "pt": "maçã janela rio silencioso amarelo motor ponte manhã sussurrar jardim mercado "
          "trovão cozinha lápis viagem oceano montanha violino bilhete férias".split(),
    "ru": "яблоко окно река тихий жёлтый мотор мост утро шептать сад рынок гром кухня "
          "карандаш путешествие солнце океан гора скрипка билет".split(),
    "zh": "苹果 窗户 河流 安静 黄色 发动机 桥 早晨 低语 花园 市场 雷声 厨房 铅笔 旅行 阳光 海洋 高山".split(),
    "ja": "りんご 窓 川 静か 黄色 エンジン 橋 朝 ささやき 庭 市場 雷 台所 鉛筆 旅 日光 海 山".split(),
    "ko": "사과 창문 강 조용한 노란색 엔진 다리 아침 속삭임 정원 시장 천둥 부엌 연필 여행 햇빛 바다 산".split(),
}

SPECIALS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<tts_pad>", "<tts_text_bos>",
            "<tts_text_eod>", "<tts_text_bos_single>", "<|audio_start|>", "<|audio_end|>",
            "<|audio_pad|>", "<think>", "</think>", "<tool_call>", "<|vision_pad|>",
            "<|fim_prefix|>"]
NEAR_SPECIALS = ["<|im_start|", "<im_start>", "<|im_end", "< |im_end|>", "<tts_pad", "<TTS_PAD>",
                 "<|IM_START|>", "<|im_start|><", "<<|im_end|>>", "<|<|endoftext|>|>"]
EMOJI = ["😀", "👍", "👍🏽", "❤️", "🇩🇪", "🇯🇵", "🏳️‍🌈", "👨‍👩‍👧‍👦", "👩🏾‍💻", "🧑‍🚀",
         "1️⃣", "#️⃣", "🤷‍♀️", "🐈‍⬛", "✈️", "☕", "🎉🎉🎉", "😂😂", "🫠", "🏴‍☠️"]
CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Ve", "'M",
                "'LL", "'D", "'rE", "'lL", "’s", "’t", "’re"]
WS = [" ", "  ", "   ", "\t", "\t\t", "\n", "\r\n", "\r", "\n\n", " \n", "\n ", "\r\n\r\n",
      " \t ", "\u00a0", "\u3000", "\u2009", "\v", "\f", "\u2028", "     "]
PUNCT = [".", ",", "!", "?", "...", "—", "-", "(", ")", "\"", "'", ":", ";", "«", "»", "「", "」",
         "。", "，", "！", "？", "/", "\\", "@", "#", "%", "&", "*", "+", "=", "~", "`", "|", "$",
         "€", "£", "¥", "→", "•", "§", "°"]

out = []


def add(s):
    assert not any(c in s for c in "\x00\u0085\u180e\ufeff")
    out.append(s)


def words(lang, k):
    return [rng.choice(WORDS[lang]) for _ in range(k)]


# 1. plain sentences, alone and joined
for lang, sents in SENT.items():
    for s in sents:
        add(s)
        add(s.upper() if lang not in ("zh", "ja", "ko") else s + s)
        add(" " + s + " ")
    for _ in range(25):
        add(" ".join(rng.sample(sents, min(3, len(sents)))))

# 2. word soup per language with random separators and punctuation
for lang in WORDS:
    sep = "" if lang in ("zh", "ja") else " "
    for _ in range(30):
        ws = words(lang, rng.randint(1, 12))
        s = sep.join(ws)
        if rng.random() < 0.5:
            s = s[0].upper() + s[1:]
        add(s + rng.choice(PUNCT))

# 3. numbers, decimals, dates
for _ in range(40):
    n = rng.randint(1, 60)
    add("".join(rng.choice("0123456789") for _ in range(n)))
for _ in range(40):
    a, b = rng.randint(0, 10**6), rng.randint(0, 10**4)
    add(rng.choice(["%d.%d", "%d,%d", "%d %d", "-%d.%d", "+%d,%d%%", "$%d.%02d", "%d.%de-7",
                    "v%d.%d", "%d/%d", "%d:%d"]) % (a, b))
for _ in range(40):
    y, m, d = rng.randint(1800, 2099), rng.randint(1, 12), rng.randint(1, 28)
    add(rng.choice(["%04d-%02d-%02d", "%02d/%02d/%04d", "%d.%d.%d", "%d年%d月%d日",
                    "on %04d-%02d-%02dT12:30:00Z", "%d. März %d, %d Uhr"]) % (y, m, d))
for s in ["3.14159265358979323846264338327950288419716939937510", "1,234,567,890.12",
          "１２３４５６７８９０", "٠١٢٣٤٥٦٧٨٩", "१२३४५", "½ ¼ ¾ ⅞", "Ⅻ ⅩⅣ ⅲ", "²³¹⁰", "①②③",
          "0x7fffffff", "1e100", "10^9+7", "+1 (555) 012-3456", "ISBN 978-3-16-148410-0",
          "12:00:00.000", "99.9%", "№ 5", "3×4=12", "2÷3≈0.667", "-0", "007", "٣٫١٤"]:
    add(s)

# 4. emoji and ZWJ sequences
for _ in range(80):
    k = rng.randint(1, 5)
    parts = [rng.choice(EMOJI) for _ in range(k)]
    glue = rng.choice(["", " ", "\u200d", " and ", ", "])
    s = glue.join(parts)
    if rng.random() < 0.5:
        s = rng.choice(SENT["en"] + SENT["zh"] + SENT["de"]) + " " + s
    add(s)

# 5. NFD (and mixed) forms
accented = [s for lang in ("fr", "de", "es", "pt", "it", "other") for s in SENT[lang]] + \
           [w for lang in ("fr", "de", "es", "pt", "it") for w in WORDS[lang]]
for s in accented:
    nfd = unicodedata.normalize("NFD", s)
    if nfd != s:
        add(nfd)
for s in ["e\u0301\u0301", "a\u0308\u0304", "q\u0307\u0323", "x\u0300", "\u0301start",
          " \u0301", "Å Å Å", "ﬁ ﬂ ﬀ", "Ω Ω", "가 가", "\u1100\u1161\u11a8", "ṩ ṩ",
          "é\u0327", "I\u0307stanbul", "ǅ ǆ", "ﾊﾟ ﾊﾞ", "ㄱㅏ"]:
    add(s)

# 6. whitespace
for _ in range(120):
    parts = []
    for _ in range(rng.randint(1, 6)):
        parts.append(rng.choice(WS))
        if rng.random() < 0.7:
            parts.append(rng.choice(WORDS[rng.choice(list(WORDS))]))
        if rng.random() < 0.3:
            parts.append(rng.choice(PUNCT))
    add("".join(parts))
for w in WS:
    add(w)
    add(w * 7)
    add("a" + w + "b")
    add(w + "x" + w)
    add("." + w + "." + w)
    add("word" + w * 3 + "!" + w)

# 7. contractions
for _ in range(120):
    w = rng.choice(["I", "you", "he", "she", "it", "we", "they", "YOU", "WE", "That", "who",
                    "don", "CAN", "isn", "l", "O", "rock"])
    c = rng.choice(CONTRACTIONS)
    s = w + c
    if rng.random() < 0.4:
        s += rng.choice(["", "s", "t", "x", "ve"])
    if rng.random() < 0.5:
        s = rng.choice(["", " ", "\n", "'"]) + s + " " + rng.choice(WORDS["en"])
    add(s)
for s in ["'s", "'S", "''s", "'''", "'", "' s", "rock 'n' roll", "ma'am", "o'clock", "y'all'd've",
          "'tis", "'twas", "DON'T STOP", "I'M", "It'S", "ſ'ſ", "'ſt", "'K", "'Ĳ", "x'DD", "x'1"]:
    add(s)

# 8. special-token strings in text
for _ in range(90):
    parts = []
    for _ in range(rng.randint(1, 5)):
        r = rng.random()
        if r < 0.45:
            parts.append(rng.choice(SPECIALS))
        elif r < 0.6:
            parts.append(rng.choice(NEAR_SPECIALS))
        else:
            parts.append(rng.choice(SENT[rng.choice(list(SENT))]))
        if rng.random() < 0.3:
            parts.append(rng.choice(WS))
    add("".join(parts))
for t in SPECIALS:
    add(t)
    add(t + t)
    add("\n" + t + "\n")
    add("x" + t + "\u0301")

# 9. very long words and runs
for n in (100, 257, 500, 1000, 3000):
    add("a" * n)
    add("ab" * (n // 2))
    add("".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(n)))
    add("9" * n)
    add("!" * n)
    add(" " * n + "x")
    add("\n" * (n // 10))
    add("汉" * (n // 3))
    add("é" * (n // 2))
add("Rindfleischetikettierungsüberwachungsaufgabenübertragungsgesetz")
add("Pneumonoultramicroscopicsilicovolcanoconiosis " * 3)
add("Llanfairpwllgwyngyllgogerychwyrndrobwllllantysiliogogogoch")
add("https://example.com/a/very/long/path?with=query&and=more#fragment")
add("ghp_" + "".join(rng.choice("ABCDEFabcdef0123456789") for _ in range(200)))

# 10. code, markup, misc scripts
for s in ["def f(x):\n\treturn x**2  # square\n", "int main(void) { return 0; }",
          "<html><body>Hello</body></html>", "**bold** _italic_ `code`", "| a | b |\n|---|---|",
          "user@example.org", "C:\\Users\\name\\file.txt", "SELECT * FROM t WHERE id=1;",
          "{\"key\": [1, 2, 3]}", "λx.x+1", "∀x∈ℝ: x²≥0", "a→b⇒c", "<<<>>>", "(((())))",
          "..!!??", "--==--", "…", "‼⁉", "\u200b\u200c\u200d", "\u00ad", "\u202e reversed"]:
    add(s)

# 11. random mixtures of everything above
pool = list(out)
while len(out) < 2100:
    k = rng.randint(2, 4)
    glue = rng.choice(["", " ", "\n", "\r\n", "\t", " - "])
    s = glue.join(rng.choice(pool)[:200] for _ in range(k))
    add(s)

for s in out:
    print(json.dumps(s, ensure_ascii=False))
