"""The packaged SmolLM2 GGUF converts to a tokenizer whose end of turn is right, whatever transformers made of it,
and a cached conversion is reused only when the same inputs made it and it still passes the check."""

import json
import shutil

import pytest

from sead.models import smollm


def test_converted_tokenizer_ends_turns_with_the_ggufs_eos(smollm_tokenizer):
    declared = smollm.gguf_special_ids(smollm.locate_gguf())
    assert declared["eos"] == 2  # <|im_end|> in the file itself
    assert smollm_tokenizer.eos_token == "<|im_end|>" and smollm_tokenizer.eos_token_id == declared["eos"]
    assert smollm_tokenizer.pad_token_id == declared["padding"]
    assert smollm_tokenizer.bos_token_id != smollm_tokenizer.eos_token_id
    assert smollm.turn_closer_id(smollm_tokenizer) == smollm_tokenizer.eos_token_id
    smollm.check_tokenizer(smollm_tokenizer, declared)


def test_provenance_names_what_made_the_folder():
    import transformers

    rec = json.loads((smollm.tokenizer_dir() / smollm.PROVENANCE).read_text())
    assert rec["transformers"] == transformers.__version__
    assert rec["gguf"] == smollm.GGUF_FILE and rec["gguf_bytes"] == smollm.locate_gguf().stat().st_size


def test_fix_repairs_the_eos_that_transformers_5_10_gives(smollm_tokenizer):
    tok = smollm_tokenizer.__class__.from_pretrained(smollm.tokenizer_dir())
    tok.eos_token = "<|im_start|>"  # what the 5.10 GGUF conversion produced
    declared = smollm.gguf_special_ids(smollm.locate_gguf())
    with pytest.raises(RuntimeError, match="does not close assistant turns"):
        smollm.check_tokenizer(tok, declared)
    smollm.fix_special_tokens(tok, declared)
    smollm.check_tokenizer(tok, declared)
    assert tok.eos_token == "<|im_end|>"


def test_fix_refuses_a_gguf_whose_eos_is_not_the_turn_closer(smollm_tokenizer):
    tok = smollm_tokenizer.__class__.from_pretrained(smollm.tokenizer_dir())
    with pytest.raises(RuntimeError, match="GGUF's eos id 1"):
        smollm.fix_special_tokens(tok, {"eos": 1})


@pytest.fixture
def cache(tmp_path, monkeypatch, smollm_tokenizer):
    """A private cache holding a copy of the good conversion; rebuilding copies it again and counts the builds."""
    good = smollm.tokenizer_dir()
    monkeypatch.setenv("SEAD_CACHE_DIR", str(tmp_path))
    builds = []

    def build(gguf, declared, out):
        builds.append(out)
        shutil.copytree(good, out)
        (out / smollm.PROVENANCE).unlink()
        return smollm_tokenizer.__class__.from_pretrained(out)

    monkeypatch.setattr(smollm, "_build_tokenizer", build)
    shutil.copytree(good, smollm.cache_dir() / "tokenizer")
    return smollm.cache_dir() / "tokenizer", builds


def test_a_current_checked_folder_is_reused_without_reading_the_gguf_again(cache, monkeypatch):
    folder, builds = cache

    def no_reading(gguf):
        raise AssertionError("the GGUF was read again: seconds on every start")

    monkeypatch.setattr(smollm, "gguf_special_ids", no_reading)
    assert smollm.tokenizer_dir() == folder and builds == []


@pytest.mark.parametrize("change", ["transformers", "converter", "no_provenance"])
def test_a_folder_from_other_inputs_is_converted_again(cache, change):
    folder, builds = cache
    rec_path = folder / smollm.PROVENANCE
    if change == "no_provenance":  # a folder from before provenance, or one whose writer died mid-way
        rec_path.unlink()
    else:
        rec = json.loads(rec_path.read_text())
        rec[change] = "0.0.1"
        rec_path.write_text(json.dumps(rec))
    assert smollm.tokenizer_dir() == folder and len(builds) == 1
    gguf = smollm.locate_gguf()
    assert json.loads(rec_path.read_text()) == {
        **smollm.provenance(gguf),
        smollm.SPECIAL_IDS: smollm.gguf_special_ids(gguf),
    }


def test_a_folder_that_fails_the_check_is_converted_again(cache):
    folder, builds = cache
    conf = json.loads((folder / "tokenizer_config.json").read_text())
    conf["eos_token"] = "<|im_start|>"  # the bad eos that green caches hid on other machines
    (folder / "tokenizer_config.json").write_text(json.dumps(conf))
    smollm.tokenizer_dir()
    assert len(builds) == 1
    assert smollm.load_tokenizer().eos_token == "<|im_end|>"
