"""Shared by scripts/make-hf-fixtures.py and scripts/hf-fixtures-llamacpp-convert.py.

A checkpoint under test/fixtures/hf/<name>/ holds no tokenizer files: its `tokenizer.from` names a
folder of test/fixtures/tokenizers/, so the big tokenizer.json is stored once. assemble() builds a
complete Hugging Face directory (what `from_pretrained` and llama.cpp's converter expect) in a
temporary folder: the checkpoint's files plus the gunzipped tokenizer.json and tokenizer_config.json.
"""

import gzip
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HF_FIXTURES = ROOT / "test" / "fixtures" / "hf"
TOKENIZER_FIXTURES = ROOT / "test" / "fixtures" / "tokenizers"
REFERENCES = ROOT / "test" / "reference" / "hf"

# Six prompts of different scripts and kinds (prose, code, digits, French, Japanese with an emoji,
# a long one), the same for every architecture.
PROMPTS = [
    "The capital of France is",
    "Once upon a time, there was a little robot who",
    "def fibonacci(n):\n    if n < 2:\n        return",
    "1, 2, 3, 5, 8, 13,",
    "Bonjour, je m'appelle Marie et j'habite à",
    "日本語の文章と絵文字 🙂 が混ざったテキストです。",
]
GENERATED = 24
TOP_K = 8


def tokenizer_folder(name: str) -> Path:
    folder = (HF_FIXTURES / name / "tokenizer.from").read_text().strip()
    return TOKENIZER_FIXTURES / folder


def assemble(name: str, dest: Path) -> Path:
    """Copies checkpoint `name` and its tokenizer into `dest` (created); returns dest."""
    dest.mkdir(parents=True, exist_ok=True)
    for f in (HF_FIXTURES / name).iterdir():
        if f.name not in ("README.md", "tokenizer.from"):
            shutil.copyfile(f, dest / f.name)
    return assemble_tokenizer(tokenizer_folder(name).name, dest)


def assemble_tokenizer(folder: str, dest: Path) -> Path:
    """Writes tokenizer.json (gunzipped) and tokenizer_config.json of a tokenizers fixture into dest."""
    dest.mkdir(parents=True, exist_ok=True)
    tok = TOKENIZER_FIXTURES / folder
    with gzip.open(tok / "tokenizer.json.gz", "rb") as src, open(dest / "tokenizer.json", "wb") as out:
        shutil.copyfileobj(src, out)
    shutil.copyfile(tok / "tokenizer_config.json", dest / "tokenizer_config.json")
    return dest
