#!/usr/bin/env python3
"""Makes the tokenizer test fixtures under tests/fixtures/tokenizers/ with the real HF `tokenizers`.

Writes:
  {llama2,llama3,qwen3}.tokenizer.json.zst  minified copies of shared/tokenizers/*/tokenizer.json
  reference-encodings.json.zst              copy of shared/tokenizers/reference-encodings.json
  bytebpe/tokenizer.json, vocab.json, merges.txt
                                            a GPT-2/OPT-style byte-level BPE (GPT-2 split regex,
                                            no prefix space, 1000 ids) trained here
  wordbpe/tokenizer.json                    a Metaspace BPE with unk/fuse_unk, "##" prefix and
                                            "</w>" suffix (features the real files do not use)
  refs.json.zst                             {"families": {name: {"tokenizer": fixture, "patch":
                                            {...} or null, "cases": [{text, ids, plain, decoded,
                                            decoded_skip}]}}}: ids = encode(text) (special tokens
                                            added), plain = encode(text, add_special_tokens=False)
                                            when it differs, decoded(_skip) = decode(ids,
                                            skip_special_tokens=False/True). A "patch" replaces
                                            top-level keys of the tokenizer.json (variants).
Deterministic (seeded). Usage: python3 tools/make_tokenizer_refs.py [--shared DIR] [--out DIR]
"""
import argparse
import copy
import inspect
import json
import os
import random
import subprocess
import sys
import unicodedata

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from tokenizers import AddedToken

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def zstd(path_in, path_out):
    subprocess.run(["zstd", "-q", "-19", "-f", "--no-progress", path_in, "-o", path_out], check=True)
    os.chmod(path_out, 0o644)


def write_zst_json(obj, path):
    tmp = path[:-4]
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, separators=(",", ":"))
    zstd(tmp, path)
    os.remove(tmp)


# ---- test strings ---------------------------------------------------------------------------
HAND = [
    "", " ", "  ", "a", "Hello world", "Hello, world!", "hello world", "HELLO WORLD", " Hello", "Hello ",
    "The quick brown fox jumps over the lazy dog.", "I'm fine, you're late, they've gone, we'll see, she'd go, it's ok",
    "I'M FINE, YOU'RE LATE, THEY'VE GONE, WE'LL SEE, SHE'D GO, IT'S OK", "'S 'T 'RE 'VE 'M 'LL 'D 's 't 're 've 'm 'll 'd",
    "'Re 'rE 'Ll 'lL 'Ve 'vE", "don't DON'T Don'T", "y'all rock'n'roll o'clock", "''s '' ' 's' 'ss", "'ſ 'ſs ſ 'K 'k",
    "the dog's bone, the dogs' bones", "’s ‘quoted’ “double” «guillemets» „German“", "'sup 'twas 'em",
    "0", "7", "42", "123", "1234", "12345", "123456", "1234567", "12345678", "123456789", "1234567890",
    "12345678901234567890123", "3.14159", "-2.5e-10", "1,234,567.89", "$100.00", "10%", "1/2", "2^10=1024",
    "v1.2.3", "0x1F 0b1010 0o17", "+1 (555) 123-4567", "2024-01-31T12:34:56Z", "12:30pm", "1st 2nd 3rd 4th",
    "١٢٣٤٥ ٣.١٤", "१२३ ৪৫৬", "１２３４５ ＡＢＣ", "²³ ½ ¼ ① ② Ⅻ ⅻ 𝟎𝟏𝟐 ٠", "百二十三 万",
    "a1b2c3", "abc123def456", "123abc", "99bottles",
    "\t", "\n", "\r\n", "\r", "\n\n", "\n\n\n", " \n", "\n ", " \n ", "a\nb", "a\n\nb", "a\r\nb", "a\rb",
    "tabs\tand\tstuff", "\ttab first", "trailing tab\t", "a \t b", "line1\nline2\r\nline3\rline4",
    "   leading", "trailing   ", "a  b   c    d     e", "      ", "\t\t\t", " \t \t ", "\n \n \n", "  \n\n  x",
    "x\u00a0y", "x\u3000y", "x\u2028y\u2029z", "x\u0085y", "x\x0by\x0cz", "x\x1cy\x1dz\x1ew\x1fv", "x\u180ey",
    "x\u200by\u200cz\u200dw", "x\u2060y\ufeffz", "\u00a0\u00a0lead", "trail\u3000\u3000", " \u00a0 \u2003 \u2009 ",
    "中文字符测试", "我爱北京天安门。", "日本語のテキスト、カタカナ、ひらがな。", "한국어 텍스트 입니다", "Русский текст, ПРОПИСНЫЕ.",
    "Ελληνικά γράμματα", "العربية: مرحبا بالعالم", "עברית: שלום עולם", "हिन्दी पाठ", "বাংলা লেখা", "தமிழ் உரை",
    "ภาษาไทยไม่มีช่องว่าง", "ქართული ენა", "Հայերեն", "አማርኛ", "ខ្មែរ", "ᠮᠣᠩᠭᠣᠯ", "བོད་ཡིག", "ᏣᎳᎩ",
    "Tiếng Việt có dấu", "Ünïcödé àçcéñts", "Ñandú ñoño", "Straße ẞ", "ǅ ǈ ǋ ǲ", "ﬁ ﬂ ﬀ ﬃ", "Å Å Ω Ω K",
    "e\u0301 a\u0300 o\u0302\u0323 u\u0308\u0304", "\u1100\u1161\u11a8 \u1112\u1161\u11ab", "a\u0315\u0300\u05ae\u0300b",
    "\u0958\u0959 \u2126 \u212b \u0344 \u0f73", "q\u0307\u0323 s\u0323\u0307", "\u0041\u030a\u0301", "\U00011935\U00011930",
    "\u0cc6\u0cc2\u0cd5", "\U000105d2\u0307", "\U00011382\U000113c9", "a\u1dfa\u0316 b\u1df6\u0334",
    "😀", "😀😃😄", "Hi 👋🏽!", "👨‍👩‍👧‍👦 family", "🏳️‍🌈 🏴‍☠️", "🇯🇵🇺🇸🇫🇷", "1️⃣ #️⃣", "❤️ ♥ ☺️", "🧑🏿‍💻",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕄𝕒𝕥𝕙", "\U0001F600\U0001F64F\U0001F680", "\U00031350\U0002ebf0\U00010d50", "\U00010940\U000323b0",
    "def foo(x):\n    return x * 2\n", "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}", "if x==1: print('yes')",
    '{"key": "value", "n": [1, 2, 3]}', "<div class=\"a\">Hello</div>", "SELECT * FROM t WHERE id = 42;",
    "$ ls -la | grep foo > out.txt 2>&1", "#include <stdio.h>\nint main(){return 0;}", "x += 1; y -= 2; z *= 3",
    "https://example.com/path?q=1&r=two#frag", "user@example.org", "C:\\Users\\name\\file.txt", "~/.bashrc",
    "!!!???...", "...", "---", "***", "a...b", "(parens) [brackets] {braces}", "@#$%^&*()_+-=", "«»‹›", "、。「」『』",
    "::", "->", "=>", "<=", "!=", "...\n", ".\n\n", "?!\r\n", " ?!", " ...x", "a.b,c;d:e", "__init__", "snake_case_name",
    "<|endoftext|>", "Hello<|endoftext|>world", "Hello <|endoftext|> world", "<|endoftext|><|endoftext|>",
    "<|endoftext", "<|endoftext|", "<<|endoftext|>>", "<s>", "</s>", "<unk>", "<s>Hello</s>", " <s> ", "a<s>b",
    "<s><s></s>", "< s>", "<s >", "<|begin_of_text|>Hi", "<|end_of_text|>", "<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>",
    "<|reserved_special_token_5|>", "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n", "<think>\nhmm\n</think>\n\nok",
    "<tool_call>{}</tool_call>", "<|vision_start|><|image_pad|><|vision_end|>", "<|fim_prefix|>a<|fim_suffix|>b<|fim_middle|>",
    "<mask>", "a <mask> b", "a<mask>b", "  <mask>  ", "[R] x", "x [R]   y", "word", "a word here", "sword words",
    "wording", "word.", "(word)", "_word_", "éword", "word1",
]


def random_codepoint(rng):
    while True:
        cp = rng.randrange(0x110000)
        if not 0xD800 <= cp <= 0xDFFF:
            return chr(cp)


POOLS = {
    "ascii": [chr(c) for c in range(32, 127)],
    "space": [" ", " ", " ", "\t", "\n", "\r", "\r\n", "\u00a0", "\u3000", "\u2009", "\x0b", "\x0c", "\u0085", "\u2028"],
    "latin": [chr(c) for c in range(0xA0, 0x250)],
    "marks": [chr(c) for c in range(0x300, 0x370)] + [chr(c) for c in range(0x1AB0, 0x1ACF)] +
             [chr(c) for c in range(0x1DC0, 0x1E00)] + [chr(c) for c in range(0x20D0, 0x20F1)],
    "cjk": [chr(c) for c in range(0x4E00, 0x4F00)] + [chr(c) for c in range(0x3040, 0x30FF)] +
           [chr(c) for c in range(0xAC00, 0xAD00)],
    "digits": list("0123456789") + ["٣", "७", "５", "²", "½", "①", "Ⅳ", "𝟕"],
    "emoji": ["😀", "👍", "🏽", "\u200d", "\ufe0f", "🇺", "🇸", "👩", "💻", "🔥", "✨", "⃣"],
    "punct": list("'\".,;:!?-_()[]{}<>/\\|@#$%^&*+=~`") + ["’", "—", "…", "«", "»", "¿", "¡", "、", "。"],
    "jamo": [chr(c) for c in range(0x1100, 0x1113)] + [chr(c) for c in range(0x1161, 0x1176)] +
            [chr(c) for c in range(0x11A8, 0x11C3)],
}
WORDS = ["the", "The", "THE", "a", "of", "and", "to", "in", "is", "was", "it's", "don't", "I'm", "hello", "world",
         "token", "tokenizer", "naïve", "café", "Straße", "Москва", "東京", "서울", "مرحبا", "שלום", "नमस्ते",
         "42", "3.14", "1000000", "x", "foo_bar", "FooBar", "<s>", "</s>", "<|endoftext|>", "<|im_end|>", "<mask>",
         "[R]", "word", "😀", "👨‍👩‍👧", "e\u0301", "ｆｕｌｌ", "ﬁne", "'s", "'LL", "\t", "\n", "  "]


def random_strings(rng, n):
    out = []
    for k in range(n):
        kind = k % 6
        if kind == 0:  # words joined by random separators
            parts = [rng.choice(WORDS) for _ in range(rng.randint(1, 12))]
            seps = [rng.choice([" ", " ", "", "  ", "\n", "\t", ", ", ". ", " \n"]) for _ in parts]
            out.append("".join(p + s for p, s in zip(parts, seps)))
        elif kind == 1:  # characters from mixed pools
            pools = rng.sample(list(POOLS), rng.randint(1, 4))
            out.append("".join(rng.choice(POOLS[rng.choice(pools)]) for _ in range(rng.randint(1, 40))))
        elif kind == 2:  # any code point (assigned or not) with ASCII around
            out.append("".join(random_codepoint(rng) if rng.random() < 0.5 else rng.choice(POOLS["ascii"] + POOLS["space"])
                               for _ in range(rng.randint(1, 24))))
        elif kind == 3:  # random bytes kept where they form valid UTF-8
            raw = bytes(rng.randrange(256) for _ in range(rng.randint(1, 60)))
            s = raw.decode("utf-8", errors="ignore")
            out.append(s if s else "x")
        elif kind == 4:  # base letters with random combining marks (normalization order)
            s = ""
            for _ in range(rng.randint(1, 8)):
                s += rng.choice("aeiouAEOUnsczKqy\u1100\uac00") + "".join(rng.choice(POOLS["marks"]) for _ in range(rng.randint(0, 4)))
                s += rng.choice(["", " ", "", "\u1161", "\u11a8"])
            out.append(s)
        else:  # numbers and whitespace runs
            s = ""
            for _ in range(rng.randint(1, 6)):
                s += rng.choice(["".join(rng.choice("0123456789") for _ in range(rng.randint(1, 14))),
                                 " " * rng.randint(1, 7), "\t" * rng.randint(1, 3), "\n" * rng.randint(1, 4),
                                 rng.choice(["'s", "'S", "'Ll", "'d", "'ve"]), rng.choice(WORDS), "\r\n", " \n\n "])
            out.append(s)
    return out


def long_strings(rng):
    para = ("Tokenizers split text into pieces; BPE merges the most frequent pairs. It's 2024, and "
            "models like Llama-3 use 128k vocabularies! 東京は大きい。 Ünïcödé… 😀\n")
    return [para * 20, "a" * 3000, " " * 1000 + "x", "9" * 500, "😀" * 300, "\n" * 200 + "end",
            "".join(rng.choice(WORDS) + " " for _ in range(600)), "ab" * 1500, "-" * 700, "字" * 800]


# ---- trained fixtures ------------------------------------------------------------------------------
CORPUS_MODULES = ["argparse", "asyncio", "bisect", "collections", "csv", "datetime", "decimal", "email",
                  "fractions", "functools", "heapq", "http.client", "inspect", "itertools", "json", "logging",
                  "math", "os", "pathlib", "random", "re", "shutil", "statistics", "string", "subprocess",
                  "tarfile", "tempfile", "textwrap", "threading", "typing", "unittest", "urllib.parse",
                  "zipfile"]


def training_corpus():
    """Docstrings of standard-library modules and their members (English prose and code)."""
    import importlib
    texts = []
    for name in CORPUS_MODULES:
        mod = importlib.import_module(name)
        for _, member in [("", mod)] + sorted(inspect.getmembers(mod), key=lambda kv: kv[0]):
            doc = inspect.getdoc(member) if (inspect.ismodule(member) or callable(member)) else None
            if doc:
                texts.append(doc)
    return texts + HAND * 3


def train_bytebpe(out_dir):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=1000, special_tokens=["<|endoftext|>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(training_corpus(), trainer)
    os.makedirs(out_dir, exist_ok=True)
    tok.save(os.path.join(out_dir, "tokenizer.json"))
    tok.model.save(out_dir)  # vocab.json + merges.txt
    return tok


def train_wordbpe(out_dir):
    tok = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True, continuing_subword_prefix="##",
                               end_of_word_suffix="</w>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=True)
    tok.decoder = decoders.Sequence([decoders.BPEDecoder(suffix="</w>"), decoders.Metaspace(prepend_scheme="first")])
    trainer = trainers.BpeTrainer(vocab_size=700, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False,
                                  limit_alphabet=80, continuing_subword_prefix="##", end_of_word_suffix="</w>")
    tok.train_from_iterator(training_corpus(), trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A </s>", special_tokens=[("<s>", 1), ("</s>", 2)])
    os.makedirs(out_dir, exist_ok=True)
    tok.save(os.path.join(out_dir, "tokenizer.json"))
    return tok


def variants(base_json):
    """Patches of the byte-level fixture exercising added-token flags and pipeline stages."""
    added = base_json["added_tokens"] + [
        {"id": 1000, "content": "<mask>", "single_word": False, "lstrip": True, "rstrip": False, "normalized": False, "special": True},
        {"id": 1001, "content": "[R]", "single_word": False, "lstrip": False, "rstrip": True, "normalized": False, "special": False},
        {"id": 1002, "content": "word", "single_word": True, "lstrip": False, "rstrip": False, "normalized": True, "special": False},
        {"id": 1003, "content": "Å", "single_word": False, "lstrip": False, "rstrip": False, "normalized": True, "special": False},
        {"id": 1004, "content": "<s>", "single_word": False, "lstrip": True, "rstrip": True, "normalized": False, "special": True},
    ]
    split = lambda regex, behavior, invert=False: {"type": "Split", "pattern": {"Regex": regex}, "behavior": behavior, "invert": invert}  # noqa: E731
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}
    return {
        "bytebpe-added": {
            "added_tokens": added,
            "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "Replace", "pattern": {"String": "``"}, "content": "\""}]},
            "post_processor": {"type": "RobertaProcessing", "sep": ["<|endoftext|>", 0], "cls": ["<s>", 1004], "trim_offsets": True, "add_prefix_space": False},
        },
        "bytebpe-prefix": {
            "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
            "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFD"}, {"type": "Strip", "strip_left": True, "strip_right": True}]},
            "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}}],
                               "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
                               "special_tokens": {"<|endoftext|>": {"id": "<|endoftext|>", "ids": [0], "tokens": ["<|endoftext|>"]}}},
        },
        "bytebpe-splits": {
            "normalizer": {"type": "Replace", "pattern": {"Regex": "\\s{2,}"}, "content": " "},
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                split("\\p{N}", "MergedWithPrevious"), split("[aeiouAEIOU]+", "MergedWithNext"),
                split(" ", "Contiguous", True), {"type": "Digits", "individual_digits": True}, byte_level]},
        },
        "bytebpe-splits2": {
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                {"type": "WhitespaceSplit"}, split("(?i:th|sh)|[.,!?]+?|x{2,3}|\\d{2}", "Isolated"),
                split("[^\\p{L}\\s]", "Removed"), split("[\\p{Lu}]", "Removed", True), byte_level]},
            "decoder": {"type": "Sequence", "decoders": [{"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}, {"type": "Replace", "pattern": {"String": "a"}, "content": "A"},
                                                         {"type": "Strip", "content": "x", "start": 2, "stop": 0}]},
        },
    }


def cases_for(tok, texts):
    out = []
    for t in texts:
        enc = tok.encode(t)
        ids = enc.ids
        plain = tok.encode(t, add_special_tokens=False).ids
        case = {"text": t, "ids": ids, "decoded": tok.decode(ids, skip_special_tokens=False),
                "decoded_skip": tok.decode(ids, skip_special_tokens=True)}
        if plain != ids:
            case["plain"] = plain
        out.append(case)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", default=os.path.join(os.path.dirname(ROOT), "shared", "tokenizers"))
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "fixtures", "tokenizers"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rng = random.Random(20240531)
    texts = HAND + random_strings(rng, 1500) + long_strings(rng)

    families = {}
    for name in ["llama2", "llama3", "qwen3"]:
        src = os.path.join(args.shared, name, "tokenizer.json")
        with open(src, encoding="utf-8") as f:
            j = json.load(f)
        write_zst_json(j, os.path.join(args.out, f"{name}.tokenizer.json.zst"))
        tok = Tokenizer.from_file(src)
        families[name] = {"tokenizer": f"{name}.tokenizer.json.zst", "patch": None, "cases": cases_for(tok, texts)}
    zstd(os.path.join(args.shared, "reference-encodings.json"), os.path.join(args.out, "reference-encodings.json.zst"))

    bytebpe_dir = os.path.join(args.out, "bytebpe")
    tok = train_bytebpe(bytebpe_dir)
    families["bytebpe"] = {"tokenizer": "bytebpe/tokenizer.json", "patch": None, "cases": cases_for(tok, texts)}
    with open(os.path.join(bytebpe_dir, "tokenizer.json"), encoding="utf-8") as f:
        base = json.load(f)
    small = HAND + texts[len(HAND):len(HAND) + 400]
    for name, patch in variants(base).items():
        j = copy.deepcopy(base)
        j.update(patch)
        vtok = Tokenizer.from_str(json.dumps(j))
        families[name] = {"tokenizer": "bytebpe/tokenizer.json", "patch": patch, "cases": cases_for(vtok, small)}

    # Real vocabularies with the pipelines other releases of these families ship: Llama-2 as
    # converted with legacy=False (Metaspace pre-tokenizer, prepend "first", no normalizer), and
    # Llama-3 as Meta ships it (Sequence[ByteLevel, TemplateProcessing] adding <|begin_of_text|>).
    real_variants = {
        "llama2-metaspace": ("llama2", {
            "normalizer": None,
            "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": False},
            "decoder": {"type": "Sequence", "decoders": [
                {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": False},
                {"type": "ByteFallback"}, {"type": "Fuse"}]}}),
        "llama3-bos": ("llama3", {
            "post_processor": {"type": "Sequence", "processors": [
                {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
                {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                 "pair": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
                 "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [128000], "tokens": ["<|begin_of_text|>"]}}}]}}),
    }
    for name, (family, patch) in real_variants.items():
        with open(os.path.join(args.shared, family, "tokenizer.json"), encoding="utf-8") as f:
            j = json.load(f)
        j.update(patch)
        vtok = Tokenizer.from_str(json.dumps(j))
        families[name] = {"tokenizer": f"{family}.tokenizer.json.zst", "patch": patch, "cases": cases_for(vtok, small)}

    wtok = train_wordbpe(os.path.join(args.out, "wordbpe"))
    families["wordbpe"] = {"tokenizer": "wordbpe/tokenizer.json", "patch": None, "cases": cases_for(wtok, small)}

    write_zst_json({"tokenizers_version": __import__("tokenizers").__version__,
                    "unicode_python": unicodedata.unidata_version, "families": families},
                   os.path.join(args.out, "refs.json.zst"))
    for name, fam in families.items():
        print(f"{name}: {len(fam['cases'])} cases", file=sys.stderr)


if __name__ == "__main__":
    main()
