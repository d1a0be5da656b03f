"""benchmarks/roofline.py end to end in its --quick mode on the tiny model: every figure is there, positive, and
set against a finite roofline. No timing is asserted (tests are not timers)."""

import json
import math

from benchmark_scripts import load_benchmark


def positive(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def test_quick_run_reports_every_figure_against_its_roofline(tiny_model_dir, tmp_path):
    out = tmp_path / "roofline.json"
    load_benchmark("roofline").main(["--quick", "--model", str(tiny_model_dir), "--out", str(out)])
    result = json.loads(out.read_text())
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
        for name in ("sead", "sead_unpacked", "generate"):
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

    assert sorted(t["dtype"] for t in result["training"]) == ["bfloat16", "float32"]
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
