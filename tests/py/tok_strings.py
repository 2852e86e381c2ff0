"""Deterministic test strings for the tokenizer cross-checks: Unicode edge cases, whitespace
runs, digits, emoji, code, CJK, combining marks, contractions, special-token texts."""
import random

WORDS = ("the quick brown fox jumps over lazy dog hello world tokenizer Kinetic llama gemma "
         "qwen don't I'm we'll they've she'd it's HE'S CAN'T Hello HELLO hElLo a I x y z "
         "receipt deterministic inference café naïve résumé Äpfel straße über ñandú camelCase "
         "HTTPServer iPhone XMLHttpRequest getHTTPResponseCode ALLCAPS ÉCOLE ǅungla DŽE "
         "snake_case kebab-case").split()
PUNCT = list(".,;:!?-_()[]{}<>/\\|@#$%^&*+=~`'\"") + ["...", "--", "->", "=>", "::", "!=", "&&"]
SPACES = [" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", "\r", " \n", "\n ", "\t\t", "\u00a0",
          "\u3000", "\u2028", "\u2009", "\x0b", "\x0c", "\x85", "    ", " \t \n"]
EMOJI = ["🦙", "😀", "👍🏽", "👨‍👩‍👧‍👦", "🇫🇷", "🏳️‍🌈", "❤️", "✨", "🤖", "1️⃣", "🫠", "🧑🏿‍💻"]
CJK = ["你好世界", "日本語のテキスト", "한국어 문장", "漢字", "カタカナ", "ひらがな", "中文，标点。",
       "「引用」", "ｆｕｌｌｗｉｄｔｈ　ＡＢＣ１２３"]
SCRIPTS = ["Привет мир", "Γειά σου κόσμε", "مرحبا بالعالم", "שלום עולם", "नमस्ते दुनिया",
           "สวัสดีชาวโลก", "Բարեւ", "გამარჯობა", "ሰላም", "Xin chào thế giới", "Ṫḧïṡ ïṡ ẗëṡẗ",
           "ǅemal", "ﬁne ﬂow", "ℌ𝔢𝔩𝔩𝔬 𝕨𝕠𝕣𝕝𝕕", "Ⅻ ⅷ ①②③", "²³¹ ¼ ½", "٣٤٥ ۱۲۳ १२३ ๑๒๓"]
COMBINING = ["e\u0301", "a\u0308", "n\u0303", "\u1100\u1161\u11a8", "o\u0302\u0323",
             "x\u0336\u0336", "\u0915\u094d\u0937", "Z\u0351\u036b\u0343\u036a", "a\u20dd"]
CODE = ["def f(x):\n    return x**2 + 1\n", "int main(void) { return 0; }",
        "for (int i = 0; i < n; i++) {\n\tsum += a[i];\n}", "if x == 3.14159: print('pi')",
        "<div class=\"x\">Hi</div>", "SELECT * FROM t WHERE id=42;", "a_b_c = [1,2,3]  # ok",
        "x += 1;  // comment", "$ echo \"$HOME\" && ls -la ~/", "{\"key\": [1, 2.5, null]}",
        "    indented\n        more\n", "fn main() -> Result<(), Box<dyn Error>> {}",
        "https://example.com/path?q=1&r=2#frag", "user@example.org", "0x1F 0b1010 1e-9 1_000_000"]
CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Ve", "'ſ",
                "ſ", "'ß", "’s"]
DIGITS = ["0", "7", "42", "123", "1234", "12345", "1234567890", "3.14", "1,000", "-5", "2024-01-01",
          "٣", "１２３"]


def special_texts(extra):
    return list(extra)


def generate(n, seed=20261129, specials=()):
    """n strings; the same n and seed give the same strings."""
    rnd = random.Random(seed)
    pools = [WORDS, PUNCT, SPACES, EMOJI, CJK, SCRIPTS, COMBINING, CODE, CONTRACTIONS, DIGITS]
    weights = [8, 3, 4, 1, 1, 1, 1, 1, 1, 2]
    out = [""] + [w for w in WORDS[:5]] + SPACES + EMOJI + CJK + SCRIPTS + COMBINING + CODE
    while len(out) < n:
        kind = rnd.random()
        parts = []
        if kind < 0.1:
            # Long runs of one whitespace kind, and mixes of them.
            parts.append(rnd.choice(SPACES) * rnd.randint(1, 40))
            parts.append(rnd.choice(WORDS))
            parts.append(rnd.choice(SPACES) * rnd.randint(1, 10))
        elif kind < 0.15:
            # Random code points from ranges whose properties are old and stable.
            ranges = [(0x20, 0x7E), (0xA0, 0x24F), (0x370, 0x3FF), (0x400, 0x4FF),
                      (0x590, 0x5FF), (0x600, 0x6FF), (0x900, 0x97F), (0x2000, 0x206F),
                      (0x20A0, 0x20BF), (0x2190, 0x21FF), (0x2500, 0x257F), (0x3040, 0x30FF),
                      (0x4E00, 0x4FFF), (0xAC00, 0xAD00), (0xFF00, 0xFF60), (0x1F300, 0x1F5FF)]
            for _ in range(rnd.randint(1, 12)):
                a, b = rnd.choice(ranges)
                c = rnd.randint(a, b)
                if 0xD800 <= c <= 0xDFFF:
                    continue
                parts.append(chr(c))
        elif kind < 0.2 and specials:
            for _ in range(rnd.randint(1, 4)):
                parts.append(rnd.choice(specials) if rnd.random() < 0.5 else rnd.choice(WORDS))
                if rnd.random() < 0.5:
                    parts.append(rnd.choice(SPACES))
        else:
            for _ in range(rnd.randint(1, 10)):
                pool = rnd.choices(pools, weights)[0]
                parts.append(rnd.choice(pool))
                if rnd.random() < 0.5:
                    parts.append(" ")
        out.append("".join(parts))
    return out[:n]
