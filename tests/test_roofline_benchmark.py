"""benchmarks/roofline.py end to end in its --quick mode on the tiny model: every figure is there, positive, and
set against a finite roofline. No timing is asserted (tests are not timers)."""

import json
import math

from benchmark_scripts import load_benchmark

from sead.models import decode_kernel


def positive(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def test_quick_run_reports_every_figure_against_its_roofline(tiny_model_dir, tmp_path, monkeypatch):
    out = tmp_path / "roofline.json"
    roofline = load_benchmark("roofline")
    decided_before_timing, split_timing = [], roofline.split_timing

    def first_timing_after_kernels(*args, **kwargs):  # a kernel built inside a timed call counts its compile
        decided_before_timing.append(decode_kernel.kernel.cache_info().currsize)
        return split_timing(*args, **kwargs)

    monkeypatch.setattr(roofline, "split_timing", first_timing_after_kernels)
    decode_kernel.kernel.cache_clear()
    roofline.main(["--quick", "--model", str(tiny_model_dir), "--out", str(out)])
    result = json.loads(out.read_text())
    assert decided_before_timing[0] == len(decode_kernel.KERNELS)
    assert result["machine"]["kernels"] == decode_kernel.build_all()
    assert out.with_suffix(".png").stat().st_size > 0

    machine = result["machine"]
    assert machine["cpu"]["model"] and set(machine["cpu"]["flags"]) >= {"avx2", "avx512f", "avx512_bf16", "amx_bf16"}
    assert positive(machine["bandwidth_gb_s"]) and machine["threads"] >= 1
    assert set(machine["matmul_gflop_s"]) == {"float32", "bfloat16"}
    assert all(positive(v) for v in machine["matmul_gflop_s"].values())
    assert machine["uptime_before"] and machine["uptime_after"]

    assert sorted((r["dtype"], r["rows"]) for r in result["runs"]) == [
        ("bfloat16", 1),
        ("bfloat16", 8),
        ("float32", 1),
        ("float32", 8),
    ]
    new = result["settings"]["new_tokens"]
    for run in result["runs"]:
        for name in ("sead", "sead_forward", "sead_unpacked", "generate"):
            decode, prefill = run["decode"][name], run["prefill"][name]
            assert decode["new_tokens"] == run["rows"] * new, (run["dtype"], run["rows"], name)  # no early stop
            assert 0 < decode["in_forward"] <= 1 and positive(prefill["s"])  # the decode steps lie inside the decode
            assert positive(decode["tok_s"]) and positive(decode["of_roofline"])
            assert positive(prefill["prompt_tok_s"]) and positive(prefill["of_roofline"])
        for phase in ("decode", "prefill"):
            assert positive(run[phase]["roofline"]["tok_s"]) and run[phase]["roofline"]["bound"] in {
                "memory",
                "compute",
            }
        assert run["prompt_tokens_mean"] > 1000  # the real SOP prompt, not a stand-in

    # bf16 twice: in bf16 weights, and as the trainer runs it (fp32 master weights under bf16 autocast)
    assert sorted((t["dtype"], t["weights"]) for t in result["training"]) == [
        ("bfloat16", "bfloat16"),
        ("bfloat16", "float32"),
        ("float32", "float32"),
    ]
    for t in result["training"]:
        assert positive(t["tok_s"]) and positive(t["gflop_s"]) and positive(t["of_roofline"])
        assert t["agent_tokens"] > 0 and t["shared_prompt"] > 1000


def test_random_weights_keep_the_architecture_and_tokenizer_and_draw_new_weights(tiny_model_dir):
    """--random-weights: for a machine (a GPU box) the real weights cannot be copied to."""
    from safetensors.torch import load_file

    roofline = load_benchmark("roofline")
    src = tiny_model_dir
    dst = roofline.random_weights_folder(src, seed=1)
    try:
        assert json.loads((dst / "config.json").read_text()) | {"dtype": None} == json.loads(
            (src / "config.json").read_text()
        ) | {"dtype": None}
        assert (dst / "tokenizer.json").read_bytes() == (src / "tokenizer.json").read_bytes()
        old, new = load_file(src / "model.safetensors"), load_file(dst / "model.safetensors")
        assert old.keys() == new.keys() and all(old[k].shape == new[k].shape for k in old)
        assert any(not (old[k] == new[k]).all() for k in old if old[k].ndim == 2)  # drawn anew, not copied
    finally:
        import shutil

        shutil.rmtree(dst)


def test_a_gpu_run_on_a_machine_without_one_says_so(tiny_model_dir, monkeypatch, capsys):
    import pytest
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit):
        load_benchmark("roofline").main(["--quick", "--device", "cuda", "--model", str(tiny_model_dir)])
    assert "torch sees no GPU" in capsys.readouterr().err


class FakeLlama:
    """llama-cpp-python's `Llama` as roofline.py uses it (0.3.36: the constructor's keywords, `reset`, `generate`
    yielding one id per forward and never stopping by itself); records what it was asked."""

    made: list = []

    def __init__(self, **kw):
        self.kw, self.resets, self.prompts, self.pulled = kw, 0, [], 0
        FakeLlama.made.append(self)

    def reset(self):
        self.resets += 1

    def generate(self, tokens, temp, reset):
        assert temp == 0.0 and reset
        self.prompts.append(list(tokens))
        while True:
            self.pulled += 1
            yield 7


def test_one_llama_cpp_stream_is_greedy_from_an_empty_cache_and_never_stops_early(monkeypatch, tmp_path):
    import sys
    import types

    roofline = load_benchmark("roofline")
    monkeypatch.setitem(sys.modules, "llama_cpp", types.SimpleNamespace(Llama=FakeLlama))
    monkeypatch.setattr(roofline, "llama_cpp_version", lambda: "0.3.36")
    FakeLlama.made.clear()
    gguf = tmp_path / "m.gguf"
    peer = roofline.llama_cpp_stream(gguf, [1, 2, 3, 4], new=6, threads=2, repeats=3)

    (llm,) = FakeLlama.made
    assert llm.kw["model_path"] == str(gguf) and llm.kw["n_threads"] == llm.kw["n_threads_batch"] == 2
    assert llm.kw["n_ctx"] >= 4 + 6 and llm.kw["verbose"] is False and llm.kw["flash_attn"] is False
    assert llm.resets == 3 and llm.prompts == [[1, 2, 3, 4]] * 3  # every repeat from an empty cache
    assert llm.pulled == 3 * 6  # `new` tokens each: the first (after the prompt) and new - 1 decoded
    assert peer["new_tokens"] == 6 and peer["prompt_tokens"] == 4 and peer["threads"] == 2
    assert positive(peer["decode_tok_s"]) and positive(peer["prompt_tok_s"])
    assert math.isclose(peer["decode_tok_s"], 5 / peer["decode_s"])


def test_the_peer_is_llama_cpp_at_its_faster_attention(monkeypatch):
    roofline = load_benchmark("roofline")
    rates = {False: 80.0, True: 95.0}
    monkeypatch.setattr(
        roofline,
        "llama_cpp_stream",
        lambda *a, flash_attn: {"flash_attn": flash_attn, "decode_tok_s": rates[flash_attn], "prompt_tok_s": 1.0},
    )
    peer = roofline.fastest_llama_cpp_stream(None, [1], 4, 2, 1)
    assert peer["flash_attn"] is True and peer["decode_tok_s"] == 95.0
    assert [t["decode_tok_s"] for t in peer["tried"]] == [80.0, 95.0]


def test_decode_rates_are_set_against_the_llama_cpp_stream():
    roofline = load_benchmark("roofline")
    rates = {"sead": 600.0, "sead_forward": 450.0, "sead_unpacked": 300.0, "generate": 30.0}
    run = {"decode": {k: {"tok_s": v} for k, v in rates.items()}}
    roofline.against_peer(run, {"decode_tok_s": 150.0})
    assert [run["decode"][k]["x_llama_cpp"] for k in roofline.ARMS] == [4.0, 3.0, 2.0, 0.2]


def test_llama_cpp_missing_or_against_another_model_is_named(monkeypatch, tiny_model_dir, capsys):
    import sys

    import pytest

    roofline = load_benchmark("roofline")
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # import fails as if not installed
    with pytest.raises(SystemExit, match="requirements_peers.txt"):
        roofline.main(["--quick", "--llama-cpp"])
    with pytest.raises(SystemExit):
        roofline.main(["--quick", "--llama-cpp", "--model", str(tiny_model_dir)])
    assert "compare it with --model smollm2" in capsys.readouterr().err
    pin = (roofline.REPO / roofline.LLAMA_CPP_PIN).read_text()
    assert "llama-cpp-python==0.3.36" in pin  # the version whose API the fake above mirrors
