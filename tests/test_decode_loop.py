"""Decoding a sampling call through `DecodeLoop`: on a CPU its steps run eagerly (the forward's own bits:
test_decode_step.py); on a GPU one CUDA graph per call, replayed, gives the eager steps' tokens, and tokens are picked
on the device from each row's own randomness.

The GPU tests need a CUDA device; CI has none, and they run where one is lent (docs/gpus.md says where). The
CPU tests pin the torch symbols the graph path calls in the pinned torch, the loop's bookkeeping, and that
`trainer.cuda_graph` / `eval.cuda_graph` reach the policies."""

import inspect
from types import SimpleNamespace

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from sead.dialogue import AgentRequest
from sead.models.attention import use_gqa_attention
from sead.models.decode_loop import DecodeLoop
from sead.policy.hf import HFPolicy
from sead.policy.sampling import pick_tokens
from sead.policy.settings import SamplingConfig

GPU = torch.cuda.is_available()
needs_gpu = pytest.mark.skipif(not GPU, reason="needs a CUDA device (run on a lent GPU machine)")
TOK = SimpleNamespace(eos_token_id=0, pad_token_id=0)
GREEDY, NUCLEUS = SamplingConfig(temperature=0.0), SamplingConfig(temperature=1.0, top_p=0.9)


def llama(device="cpu", dtype=torch.float32) -> LlamaForCausalLM:
    """A random Llama with grouped key/value heads, no tokenizer needed (the GPU machine has no GGUF)."""
    torch.manual_seed(0)
    conf = LlamaConfig(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
    )
    model = LlamaForCausalLM(conf).to(device=device, dtype=dtype).eval()
    use_gqa_attention(model)
    return model


def requests(rows=4, new=12, seed=0):
    """A shared 24-token prefix (the SOP prompt's place) and a different tail per row; token 0 (end of turn) never
    appears in a prompt."""
    prefix = list(range(1, 25))
    return [AgentRequest(prefix + [30 + r, 40 + r * 3, 50], [], new, seed=seed + r) for r in range(rows)]


def play(policy, turns=3, rows=4):
    """Several turns whose prompts extend the last (the turn cache serves each turn's earlier part)."""
    reqs, outs = requests(rows), []
    for t in range(turns):
        got = policy.sample(reqs)
        outs.append([(o.token_ids, o.logprobs) for o in got])
        reqs = [
            AgentRequest([*r.prompt_ids, *o.token_ids, 60 + t], [], r.max_new_tokens, seed=r.seed + 10)
            for r, o in zip(reqs, got)
        ]
    return outs


def test_the_graph_path_calls_torch_s_cuda_graph_api_as_pinned():
    """The symbols `DecodeLoop._capture` uses, with the keywords it passes, exist in the torch the lock pins."""
    assert inspect.isclass(torch.cuda.CUDAGraph) and callable(torch.cuda.CUDAGraph.replay)
    assert "capture_error_mode" in inspect.signature(torch.cuda.graph.__init__).parameters
    assert callable(torch.cuda.Stream.wait_stream) and callable(torch.cuda.stream)
    assert callable(torch.cuda.current_stream)


def test_on_a_cpu_the_loop_runs_eagerly_and_keeps_its_bookkeeping():
    """Each call unmasks the column it writes, moves every row one position on, and writes that column only."""
    model = llama()
    policy = HFPolicy(model, TOK, GREEDY, turn_cache_mb=0, cuda_graph=True)
    seen = []
    call = DecodeLoop.__call__

    def spy(self, tokens):
        column, positions = int(self.column), self.positions.clone()
        out = call(self, tokens)
        seen.append((column, positions, self.attn[:, column].all().item(), self.graph))
        return out

    DecodeLoop.__call__ = spy
    try:
        got = policy.sample(requests(rows=2, new=5))
    finally:
        DecodeLoop.__call__ = call
    steps = max(len(o.token_ids) for o in got) - 1
    assert len(seen) == steps >= 1
    columns = [c for c, *_ in seen]
    assert columns == list(range(columns[0], columns[0] + steps))
    for (_, before, unmasked, graph), (_, after, _, _) in zip(seen, seen[1:]):
        assert torch.equal(after, before + 1) and unmasked and graph is None


@needs_gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("sampling", [GREEDY, NUCLEUS])
def test_graph_replays_give_the_eager_steps_tokens(dtype, sampling):
    model = llama("cuda", dtype)
    graphed = play(HFPolicy(model, TOK, sampling, cuda_graph=True))
    eager = play(HFPolicy(model, TOK, sampling, cuda_graph=False))
    assert [[t for t, _ in turn] for turn in graphed] == [[t for t, _ in turn] for turn in eager]
    for g, e in zip(graphed, eager):
        for (_, lp_g), (_, lp_e) in zip(g, e):
            assert lp_g == pytest.approx(lp_e, abs=1e-5)


@needs_gpu
def test_one_capture_per_call_and_one_replay_per_step(monkeypatch):
    captures, replays = [], []
    capture, replay = DecodeLoop._capture, torch.cuda.CUDAGraph.replay
    monkeypatch.setattr(DecodeLoop, "_capture", lambda self: captures.append(1) or capture(self))
    monkeypatch.setattr(torch.cuda.CUDAGraph, "replay", lambda self: replays.append(1) or replay(self))
    policy = HFPolicy(llama("cuda"), TOK, GREEDY, turn_cache_mb=0)
    got = policy.sample(requests(rows=3, new=10))
    steps = max(len(o.token_ids) for o in got) - 1  # the first token comes from the prompt's forward
    assert len(captures) == 1 and len(replays) == steps >= 2
    policy.sample(requests(rows=5, new=10))  # other shapes: captured anew
    assert len(captures) == 2


@needs_gpu
def test_graphs_follow_weight_updates_between_calls():
    model = llama("cuda")
    graphed, eager = HFPolicy(model, TOK, NUCLEUS), HFPolicy(model, TOK, NUCLEUS, cuda_graph=False)
    before = play(graphed, turns=1)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1.5)
    after = play(graphed, turns=1)
    assert after != before
    assert [[t for t, _ in turn] for turn in after] == [[t for t, _ in turn] for turn in play(eager, turns=1)]


@needs_gpu
def test_a_row_s_tokens_do_not_depend_on_its_batch_on_a_gpu():
    model = llama("cuda")
    reqs = requests(rows=6, new=16)
    together = HFPolicy(model, TOK, NUCLEUS, turn_cache_mb=0).sample(reqs)
    alone = [HFPolicy(model, TOK, NUCLEUS, turn_cache_mb=0).sample([r])[0] for r in reqs]
    assert [o.token_ids for o in together] == [o.token_ids for o in alone]


@needs_gpu
@pytest.mark.parametrize("sampling", [GREEDY, NUCLEUS, SamplingConfig(temperature=1.0, top_p=1.0, top_k=20)])
def test_sampling_on_the_gpu_draws_the_cpu_s_tokens(sampling):
    """The same uniform numbers (the CPU generators'), the same tokens; log-probs within float rounding. Rows from
    flat (a nucleus of thousands: the GPU sorts them whole, the CPU bins them) to peaked (the top token alone)."""
    flatness = torch.linspace(0.3, 4.0, 64)[:, None]
    logits = torch.randn(64, 4096, generator=torch.Generator().manual_seed(3)) * flatness
    logits[:8, 7] += 40  # rows whose most likely token holds nearly all the mass: the nucleus's short way
    gens = lambda: [torch.Generator().manual_seed(i) for i in range(64)]  # noqa: E731
    tok_cpu, lp_cpu = pick_tokens(logits, gens(), sampling)
    tok_gpu, lp_gpu = pick_tokens(logits.cuda(), gens(), sampling)
    assert tok_gpu.device.type == "cuda"
    assert torch.equal(tok_gpu.cpu(), tok_cpu)
    assert torch.allclose(lp_gpu.cpu(), lp_cpu, atol=1e-5)


@needs_gpu
def test_the_gpu_s_greedy_tokens_are_the_cpu_s_in_fp32():
    """The GPU's fp32 decoding against the CPU's, greedy: the same tokens on this model (no near ties)."""
    cpu, gpu = llama(), llama("cuda")  # the same seed: the same weights
    want = play(HFPolicy(cpu, TOK, GREEDY), turns=2)
    got = play(HFPolicy(gpu, TOK, GREEDY), turns=2)
    assert [[t for t, _ in turn] for turn in got] == [[t for t, _ in turn] for turn in want]


@pytest.mark.parametrize("on", [True, False])
def test_the_config_switch_reaches_the_trainer_s_and_eval_s_policies(on, tiny_model_dir, tmp_path, monkeypatch):
    """`trainer.cuda_graph` and `eval.cuda_graph` (true by default) are what the policies they build sample with."""
    from sead.cli.main import main
    from sead.config import load_config
    from sead.eval.settings import EvalConfig
    from sead.trainer.loop import Trainer
    from sead.trainer.schema import TrainerConfig

    assert TrainerConfig().cuda_graph and EvalConfig().cuda_graph
    trainer = Trainer(load_config(["preset=tiny", f"run_dir={tmp_path}", f"trainer.cuda_graph={str(on).lower()}"]))
    try:
        assert trainer.policy.cuda_graph is on and trainer.val_policy.cuda_graph is on
    finally:
        trainer.logger.close()
    made = []
    init = HFPolicy.__init__

    def spy(self, *args, **kwargs):
        init(self, *args, **kwargs)
        made.append(self.cuda_graph)

    monkeypatch.setattr(HFPolicy, "__init__", spy)
    flag = f"eval.cuda_graph={str(on).lower()}"
    out = [f"eval.out_dir={tmp_path / 'eval'}", f"eval.testset_dir={tmp_path / 'sets'}", "eval.limit=1"]
    assert main(["eval", str(tiny_model_dir), flag, "eval.device=cpu", "eval.max_turns=1", *out]) == 0
    assert made == [on]
