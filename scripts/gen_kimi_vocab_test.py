#!/usr/bin/env python3
"""gen_kimi_vocab_test.py LLAMA_TOKENIZE — writes the kimi-k2 test vocabulary
and llama.cpp's ids for it into tests/data/llamacpp-vocab/:

  ggml-vocab-kimi-k2.gguf      ggml-vocab-deepseek-coder.gguf with only
                               tokenizer.ggml.pre changed to "kimi-k2"
  ggml-vocab-kimi-k2.gguf.inp  llama.cpp's 46 test strings, then the
                               strings of EXTRA (Han/Latin mixes, contractions
                               in upper case, digit runs, punctuation and
                               newlines, kana, marks, emoji)
  ggml-vocab-kimi-k2.gguf.out  one line per string: llama-tokenize's ids
                               (--no-bos --no-parse-special), each after a space

Run from the repository root; see tests/data/llamacpp-vocab/PROVENANCE.md."""
import os
import re
import subprocess
import sys
import tempfile

D = "tests/data/llamacpp-vocab"
SEP = "\n__ggml_vocab_test__\n"
EXTRA = [
    "Hello World HelloWorld ABCdef abcDEF",
    " 中文abc中文 def",
    "中文English混合text, 北京2024年奥运会！",
    "I'M DON'T YOU'RE WE'VE SHE'LL HE'D IT'S it'ſ don'T we'Re",
    "1234567890 ６７８９ ٣٤٥٦ 12.5%",
    "Hello!!!\n\n\nWorld...\r\n\r\nend",
    "日本語のテキストとカタカナ、ひらがな。",
    "한국어 텍스트 and English",
    "café naïve e\u0301x n\u0303o A\u030a\u030a",
    "emoji 🦙🤖 👍🏽 x🦙y ❤️",
    "〇一二三 ⺀⺁ 〆 豈 𠀀𠀁 𪜀",
    "\t\ttab  \n  \n x   ",
    "中'S 中's 中 's",
    "a\u0085b \u3000中\u3000x",
    "Ａｂｃ１２３！ “quoted” — «guillemets»…",
    "def f(x):\n    return x**2  # 平方\n",
]


def main():
    tok = sys.argv[1]
    base = os.path.join(D, "ggml-vocab-deepseek-coder.gguf")
    vocab = os.path.join(D, "ggml-vocab-kimi-k2.gguf")
    subprocess.run([sys.executable, "scripts/gguf_set_pre.py", base, vocab, "kimi-k2"], check=True)
    with open(base + ".inp", encoding="utf-8", newline="") as f:
        texts = f.read().split(SEP)[:-1]
    assert len(texts) == 46, len(texts)
    texts += EXTRA
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        for t in texts:
            p = os.path.join(tmp, "t.txt")
            with open(p, "w", encoding="utf-8", newline="") as f:
                f.write(t)
            r = subprocess.run([tok, "-m", vocab, "-f", p, "--ids", "--no-bos", "--no-parse-special",
                                "--log-disable"], check=True, capture_output=True, text=True)
            m = re.search(r"\[([0-9, ]*)\]\s*$", r.stdout)
            ids = [int(x) for x in m.group(1).split(",") if x.strip()]
            lines.append("".join(" %d" % i for i in ids))
    with open(vocab + ".inp", "w", encoding="utf-8", newline="") as f:
        f.write("".join(t + SEP for t in texts))
    with open(vocab + ".out", "w", encoding="utf-8", newline="") as f:
        f.write("".join(l + "\n" for l in lines))


if __name__ == "__main__":
    main()
