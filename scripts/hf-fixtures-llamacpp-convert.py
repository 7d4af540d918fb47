#!/usr/bin/env python3
"""The second oracle for the checkpoints of test/fixtures/hf/: llama.cpp's own converter
(convert_hf_to_gguf.py of the llama.cpp checkout that bench/.peer's node-llama-cpp runs) on each
checkpoint, as F32, Q8_0 and BF16, and llama.cpp's greedy ids from the F32 GGUF. Run by hand, never
in tests or CI:

    LLAMACPP=/tmp/llamacpp python scripts/hf-fixtures-llamacpp-convert.py [NAME...]

Writes test/reference/hf/<name>.llamacpp-convert.json: per output type, the GGUF's metadata (arrays of
more than ARRAY_INLINE items, the tokenizer's, as their length and the sha256 of their bytes as stored
in the file after the item type and count: for strings each u64 length then the UTF-8 bytes) and every
tensor's name, ggml type, shape (ne, GGUF order: innermost first) and sha256 of its data; or the
converter's error when it refused. Then scripts/hf-fixtures-llamacpp-ids.mjs adds llama.cpp's greedy
ids. The GGUFs stay in /tmp/hffix-gguf/ (not committed).
"""

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hf_fixture_dir import HF_FIXTURES, REFERENCES, ROOT, assemble  # noqa: E402

LLAMACPP = Path(os.environ.get("LLAMACPP", "/tmp/llamacpp"))
sys.path.insert(0, str(LLAMACPP / "gguf-py"))
import gguf  # noqa: E402  (the checkout's own gguf-py, so the converter and reader match it)

OUT_TYPES = ["f32", "q8_0", "bf16"]
ARRAY_INLINE = 64
GGUF_DIR = Path("/tmp/hffix-gguf")


def llamacpp_commit() -> str:
    # a checkout copied without its .git (git archive) says where it came from here
    if os.environ.get("LLAMACPP_COMMIT"):
        return os.environ["LLAMACPP_COMMIT"]
    try:
        return subprocess.run(["git", "-C", str(LLAMACPP), "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def field_value(field: "gguf.ReaderField"):
    types = field.types
    if types[0] == gguf.GGUFValueType.ARRAY:
        n = len(field.data)
        if n > ARRAY_INLINE:
            raw = b"".join(bytes(p.tobytes()) for p in field.parts[5:])
            return {"arrayOf": types[-1].name, "length": n, "sha256": hashlib.sha256(raw).hexdigest()}
        if types[-1] == gguf.GGUFValueType.STRING:
            return [bytes(field.parts[i]).decode("utf-8") for i in field.data]
        return [field.parts[i].tolist()[0] for i in field.data]
    if types[0] == gguf.GGUFValueType.STRING:
        return bytes(field.parts[field.data[0]]).decode("utf-8")
    return field.parts[field.data[0]].tolist()[0]


def describe(path: Path) -> dict:
    reader = gguf.GGUFReader(path)
    metadata = {}
    for key, field in reader.fields.items():
        if key.startswith("GGUF."):
            continue  # the header's version and counts, not metadata
        metadata[key] = {"type": field.types[0].name, "value": field_value(field)}
    tensors = [
        {
            "name": t.name,
            "type": t.tensor_type.name,
            "ne": [int(x) for x in t.shape],
            "bytes": int(t.n_bytes),
            "sha256": hashlib.sha256(t.data.tobytes()).hexdigest(),
        }
        for t in reader.tensors
    ]
    return {"metadata": metadata, "tensors": tensors}


def needs_sentencepiece_model(d: Path) -> bool:
    return json.loads((d / "config.json").read_text())["architectures"] == ["Phi3ForCausalLM"]


def write_sentencepiece_model(d: Path) -> None:
    """llama.cpp's Phi-3 converter reads only tokenizer.model (SentencePiece's protobuf), which the
    tokenizer fixtures do not hold: this writes one from tokenizer.json's vocabulary, in id order,
    with BPE piece scores of -id (earlier pieces merge first, as in the published models), byte
    pieces typed BYTE and <unk>, <s>, </s> typed UNKNOWN and CONTROL. Only the converter reads it;
    the greedy ids do not depend on it (prompts are given as ids)."""
    from sentencepiece import sentencepiece_model_pb2 as sp

    vocab = json.loads((d / "tokenizer.json").read_text())["model"]["vocab"]
    proto = sp.ModelProto()
    proto.trainer_spec.model_type = sp.TrainerSpec.BPE
    proto.trainer_spec.byte_fallback = True
    proto.trainer_spec.vocab_size = len(vocab)
    proto.normalizer_spec.name = "identity"
    proto.normalizer_spec.add_dummy_prefix = True
    proto.normalizer_spec.remove_extra_whitespaces = False
    kinds = {"<unk>": sp.ModelProto.SentencePiece.UNKNOWN, "<s>": sp.ModelProto.SentencePiece.CONTROL, "</s>": sp.ModelProto.SentencePiece.CONTROL}
    for piece, i in sorted(vocab.items(), key=lambda kv: kv[1]):
        assert i == len(proto.pieces), f"tokenizer.json's vocabulary skips id {len(proto.pieces)}"
        entry = proto.pieces.add()
        entry.piece = piece
        if piece in kinds:
            entry.type, entry.score = kinds[piece], 0.0
        elif piece.startswith("<0x") and len(piece) == 6:
            entry.type, entry.score = sp.ModelProto.SentencePiece.BYTE, 0.0
        else:
            entry.type, entry.score = sp.ModelProto.SentencePiece.NORMAL, -float(i)
    (d / "tokenizer.model").write_bytes(proto.SerializeToString())


# Fixtures that carry Mistral's SentencePiece tokenizer (32000 tokens, to keep their embeddings
# small) for a class whose converter reads only byte-level BPE vocabularies (gpt-oss, SmallThinker:
# TextModel's _set_vocab_gpt2, which refuses an unknown pre-tokenizer): the converter runs with that
# class's set_vocab replaced by _set_vocab_llama_hf (tokenizer.json read as LlamaHfVocab, as its
# Llama class does without a tokenizer.model). Only the vocabulary's keys depend on it; tensors and model keys are the class's own.
VOCAB_AS_LLAMA = {"gpt-oss-mxfp4": "GptOssModel", "smallthinker": "SmallThinkerModel"}


def converter_command(name: str, d: Path, outtype: str, out: Path) -> list:
    args = [str(d), "--outtype", outtype, "--outfile", str(out)]
    cls = VOCAB_AS_LLAMA.get(name)
    if cls is None:
        return [sys.executable, str(LLAMACPP / "convert_hf_to_gguf.py"), *args]
    code = (
        f"import sys; sys.path.insert(0, {str(LLAMACPP)!r}); sys.argv = ['convert_hf_to_gguf.py', *{args!r}]; "
        f"import convert_hf_to_gguf as c; c.{cls}.set_vocab = c.TextModel._set_vocab_llama_hf; c.main()"
    )
    return [sys.executable, "-c", code]


def convert(name: str) -> dict:
    GGUF_DIR.mkdir(exist_ok=True)
    outputs = {}
    env = dict(os.environ, PYTHONPATH=str(LLAMACPP / "gguf-py"))
    with tempfile.TemporaryDirectory(prefix="hffix-") as tmp:
        d = assemble(name, Path(tmp) / name)
        if needs_sentencepiece_model(d):
            write_sentencepiece_model(d)
        for outtype in OUT_TYPES:
            out = GGUF_DIR / f"{name}-{outtype}.gguf"
            out.unlink(missing_ok=True)
            run = subprocess.run(converter_command(name, d, outtype, out), capture_output=True, text=True, env=env)
            if run.returncode != 0:
                tail = [line for line in run.stderr.splitlines() if line.strip()][-3:]
                outputs[outtype] = {"refused": "\n".join(tail)}
                print(f"{name} {outtype}: the converter refused: {tail[-1] if tail else run.returncode}", file=sys.stderr)
                continue
            outputs[outtype] = {"gguf": str(out), **describe(out)}
            print(f"{name} {outtype}: {len(outputs[outtype]['tensors'])} tensors", file=sys.stderr)
    return outputs


def main() -> None:
    names = sys.argv[1:] or sorted(p.name for p in HF_FIXTURES.iterdir() if p.is_dir())
    for name in names:
        outputs = convert(name)
        with tempfile.TemporaryDirectory(prefix="hffix-") as tmp:
            synthetic_sp = needs_sentencepiece_model(assemble(name, Path(tmp) / name))
        ref = {
            "name": name,
            "converter": f"convert_hf_to_gguf.py of llama.cpp {llamacpp_commit()} ({os.environ.get('LLAMACPP_WHICH', 'the checkout bench/.peer' + chr(39) + 's node-llama-cpp runs')}), "
            "on the checkpoint plus its tokenizer assembled in a temporary directory",
            "command": f"python convert_hf_to_gguf.py DIR --outtype TYPE --outfile {name}-TYPE.gguf",
            "arraysNote": f"metadata arrays of more than {ARRAY_INLINE} items: their length and the sha256 of their bytes as stored "
            "in the GGUF after the item type and count (strings: u64 length, then UTF-8 bytes, for each)",
            "tensorsNote": "ne: the GGUF's dimensions, innermost first; sha256 of the tensor's data bytes",
            **(
                {
                    "vocabNote": f"the converter's {VOCAB_AS_LLAMA[name]}.set_vocab (byte-level BPE only) was replaced by "
                    "TextModel._set_vocab_llama_hf for this checkpoint's SentencePiece tokenizer (scripts/hf-fixtures-llamacpp-convert.py)"
                }
                if name in VOCAB_AS_LLAMA
                else {}
            ),
            **(
                {
                    "tokenizerModelNote": "llama.cpp's Phi-3 converter reads only tokenizer.model: the directory it converted held one "
                    "written by this script from tokenizer.json's vocabulary (pieces in id order, BPE scores -id), so the "
                    "tokenizer arrays below are not a reference for a real Phi-3 tokenizer"
                }
                if synthetic_sp
                else {}
            ),
            "outputs": {k: {kk: vv for kk, vv in v.items() if kk != "gguf"} for k, v in outputs.items()},
        }
        path = REFERENCES / f"{name}.llamacpp-convert.json"
        path.write_text(json.dumps(ref, indent=1, ensure_ascii=False) + "\n")
        f32 = outputs.get("f32", {}).get("gguf")
        # with MXFP4 experts, convert's auto output is the converter's bf16 one: llama.cpp's ids from it too
        mxfp4 = (json.loads((HF_FIXTURES / name / "config.json").read_text()).get("quantization_config") or {}).get("quant_method") == "mxfp4"
        bf16 = outputs.get("bf16", {}).get("gguf") if mxfp4 else None
        if bf16:
            run = subprocess.run(["node", str(ROOT / "scripts" / "hf-fixtures-llamacpp-ids.mjs"), name, bf16, "bf16"], capture_output=True, text=True)
            sys.stderr.write(run.stderr[-2000:])
        if f32 and not (REFERENCES / f"{name}.transformers.json").exists():
            # no transformers reference: the engine's own run of llama.cpp's GGUF is the one ours must match
            run = subprocess.run(["node", str(ROOT / "scripts" / "hf-fixtures-engine-ids.mjs"), name, f32], capture_output=True, text=True)
            sys.stderr.write(run.stderr[-2000:])
        if f32:
            run = subprocess.run(["node", str(ROOT / "scripts" / "hf-fixtures-llamacpp-ids.mjs"), name, f32], capture_output=True, text=True)
            sys.stderr.write(run.stderr[-2000:])
            if run.returncode != 0:
                errors = [line for line in run.stderr.splitlines() if "error" in line.lower()][:3]
                ref["llamacpp"] = {"failed": "node-llama-cpp could not run the f32 GGUF: " + " | ".join(errors)}
                path.write_text(json.dumps(ref, indent=1, ensure_ascii=False) + "\n")
        print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
