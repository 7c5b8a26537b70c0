"""Strings for tokenizer parity: many scripts, emoji, code, whitespace, numbers, special
tokens. Built from hand-written pieces and their combinations (over 200 in all)."""

SCRIPTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Portez ce vieux whisky au juge blond qui fume. Ça coûte 12,50 €.",
    "Falsches Üben von Xylophonmusik quält jeden größeren Zwerg.",
    "¿Dónde está la biblioteca? ¡Aquí!",
    "Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "Ξεσκεπάζω την ψυχοφθόρα βδελυγμία.",
    "صِف خَلقَ خَودِ كَمِثلِ الشَمسِ إِذ بَزَغَت",
    "דג סקרן שט בים מאוכזב ולפתע מצא חברה",
    "ऋषियों को सताने वाले दुष्ट राक्षसों के राजा रावण का सर्वनाश करने वाले विष्णुवतार भगवान श्रीराम",
    "เป็นมนุษย์สุดประเสริฐเลิศคุณค่า",
    "我能吞下玻璃而不伤身体。",
    "いろはにほへと ちりぬるを わかよたれそ つねならむ",
    "키스의 고유조건은 입술끼리 만나야 하고 특별한 기술은 필요치 않다.",
    "Tiếng Việt có dấu: Những đứa trẻ đang chơi.",
    "Ελληνικά, русский, 中文, 日本語, 한국어 in one line",
    "ᚠᛇᚻ᛫ᛒᛦᚦ᛫ᚠᚱᚩᚠᚢᚱ᛫ᚠᛁᚱᚪ᛫ᚷᛖᚻᚹᛦᛚᚳᚢᛗ",
    "Zwölf Boxkämpfer jagen Viktor quer über den großen Sylter Deich.",
    "Ąžuolas, ėglė, ūsai, žąsys — lietuviškai.",
    "Ölçü: 5 km; şişe; ığdır; İstanbul",
    "Ñandú, pingüino, acción.",
]
EMOJI = [
    "🎉", "😀😃😄", "👍🏽 thumbs", "👨‍👩‍👧‍👦 family", "🇫🇷🇯🇵 flags", "❤️ love ♥", "🤖🦙🚀",
    "emoji at end 🙂", "🙂 emoji at start", "mixed 🙂text🙂more",
]
CODE = [
    "def add(a, b):\n    return a + b\n",
    "for (int i = 0; i < n; ++i) { sum += x[i]; }",
    '{"name": "ggml", "version": [0, 25, 3], "ok": true}',
    "<div class=\"x\"><p>Hello&nbsp;world</p></div>",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name;",
    "x = [i**2 for i in range(10) if i % 2 == 0]",
    "fn main() { println!(\"{}\", 42); }",
    "$ pip install -e '.[test]' && pytest -q",
    "#include <stdio.h>\nint main(void) { return 0; }",
    "a->b->c; x <<= 2; y >>= 3; z != w",
]
WHITESPACE = [
    " ", "  ", "   leading", "trailing   ", "\n", "\n\n\n", "\t", "\ttab\tseparated\t",
    "a  b   c    d", "line1\nline2\r\nline3", " \n \n ", "mixed \t\n whitespace",
    "         many spaces", "x\u00a0y (nbsp)", "\u3000full-width space",
]
NUMBERS = [
    "0", "7", "42", "123", "1234", "12345678901234567890", "3.14159", "-0.5e-10",
    "1,000,000", "2026-11-22", "+1 (555) 123-4567", "v0.25.3", "100%", "$19.99",
    "0x1F 0b1010 0o755", "1st 2nd 3rd 4th", "٣٤٥ (Arabic-Indic)", "½ ¾ ⅓",
]
CONTRACTIONS = [
    "It's", "they're", "we've", "I'm", "you'll", "he'd", "IT'S LOUD", "don't", "O'Neil's",
    "'quoted'", "\"double\"", "rock 'n' roll",
]
PUNCTUATION = [
    "Hello, world!", "Wait... what?!", "(parentheses) [brackets] {braces}", "a—b–c-d",
    "«guillemets» „Anführung“", "…", "!!!", "???", "@user #tag", "https://example.com/a?b=c&d=e",
    "email@example.org", "C:\\Windows\\path", "~/home/user/.config", "**bold** _it_ `code`",
]
PIECES = SCRIPTS + EMOJI + CODE + WHITESPACE + NUMBERS + CONTRACTIONS + PUNCTUATION


def corpus(special_tokens: list[str]) -> list[str]:
    """Every piece, pairs of pieces joined in several ways, and special tokens in text."""
    texts = list(PIECES)
    for i in range(0, len(PIECES) - 1, 2):
        texts.append(PIECES[i] + " " + PIECES[i + 1])
        texts.append(PIECES[i] + "\n" + PIECES[i + 1])
    for i, special in enumerate(special_tokens):
        texts.append(f"{special}{PIECES[i % len(PIECES)]}")
        texts.append(f"before {special} after")
        texts.append(f"{PIECES[(i * 7) % len(PIECES)]}{special}\n")
    return texts
