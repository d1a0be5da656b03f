"""benchmarks/sampling.py on the tiny model: every sampler decodes every row (`--before`: one from git), and the
transformers peer draws from the same nucleus as SEAD's (two ways to one distribution). No timing is asserted."""

import json

import pytest
import torch
from benchmark_scripts import load_benchmark
from test_policy_sampling import reference_nucleus, three_kinds_of_row

from sead.policy.settings import SamplingConfig


def test_the_record_holds_every_setting_and_every_sampler(tiny_model_dir, tmp_path):
    out = tmp_path / "sampling.json"
    bench = load_benchmark("sampling")
    bench.main(
        ["--model", str(tiny_model_dir), "--rows", "1", "3", "--new-tokens", "4", "--repeats", "1"]
        + ["--before", "HEAD", "--out", str(out)]
    )
    record = json.loads(out.read_text())
    assert record["cpu"]["model"] and out.with_suffix(".png").stat().st_size > 0
    settings = {(r["temperature"], r["top_p"], r["rows"]) for r in record["runs"]}
    assert settings == {(t, p, n) for t, p in bench.SETTINGS for n in (1, 3)}
    for run in record["runs"]:
        for name in ("sead", "transformers", "before"):  # before: the sampler as committed at HEAD
            assert run[name]["steps"] == 4 and run[name]["sampler_ms_per_step"] > 0
        assert run["over_before"]["sampler"] > 0


def test_the_transformers_peer_draws_from_the_same_nucleus():
    logits = three_kinds_of_row(vocab=2000)
    pick = load_benchmark("sampling").transformers_pick
    cfg = SamplingConfig(temperature=1.0, top_p=0.9)
    allowed = [reference_nucleus(row, cfg.top_p) for row in logits]
    gens = [torch.Generator().manual_seed(s) for s in range(3)]
    seen = [set() for _ in allowed]
    for _ in range(300):
        tok, logp = pick(logits, gens, cfg)
        for s, t in zip(seen, tok.tolist()):
            s.add(t)
    assert all(s <= a for s, a in zip(seen, allowed))
    assert len(seen[2]) > 100  # the flat row's draws spread over its wide nucleus
    assert logp.tolist() == torch.log_softmax(logits, -1).gather(1, tok[:, None])[:, 0].tolist()


def test_an_unknown_revision_is_named_in_the_error():
    with pytest.raises(SystemExit, match="no-such-rev:sead/policy/sampling.py failed"):
        load_benchmark("sampling").sampler_at("no-such-rev")
