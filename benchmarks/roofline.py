"""How close SEAD gets to this machine's limits with SmolLM2-135M: decoding, prefill, training forward + backward.

One run measures the machine (CPU and its flags, memory read bandwidth, matmul rate per dtype), derives the
roofline of each workload from it, and measures SEAD beside plain transformers `generate()` on the same batch:
- decode, per step: max(bytes / bandwidth, flops / matmul rate), bytes = the weights plus every row's KV cache
  at its real length, flops = 2 x parameters per row plus attention over that cache; tok/s = rows / that time;
- prefill: the same for running every row's whole prompt (dense: the SOP prompt once per row). SEAD runs the
  prompt the rows share once, so its prompt tok/s can pass 1x this roofline; its `work` figures count what it ran;
- training forward + backward (`masked_logprobs`, a batch like benchmarks/train_step.py's): the flops it does
  (about 6 x parameters per token: the shared prompt runs once, but with gradient, since every row's attention
  reads its keys and values) / the matmul rate; in each dtype's own weights, and for bf16 also as the trainer
  runs it (fp32 master weights under bf16 autocast).
Rows are the restaurant SOP prompt in the chat template plus a different short conversation each (built with
the runner's ChatTokens), greedy, end-of-turn never stopping a row. Prefill and decode are told apart by timing
every forward call (decode = the last new-tokens - 1 forwards, one token per row each, and what runs between).

    .venv/bin/python benchmarks/roofline.py [--rows 1 8 32 64 128] [--dtypes float32 bfloat16] [--new-tokens 32]
        [--model smollm2|/hf/folder] [--device cpu|cuda] [--random-weights] [--llama-cpp] [--quick]
        [--out benchmarks/roofline.json]  (a PNG is written beside it)

`--llama-cpp` also measures what a CPU user would reach for instead: one llama.cpp stream (llama-cpp-python,
`pip install -r requirements_peers.txt`, which builds llama.cpp) decoding the same first prompt greedily from the
packaged GGUF (the Q4_1 file SEAD's CPU model is converted from) on as many threads as torch uses; every decode
figure is then also given as a multiple of that stream.

With `--device cuda` the same run measures a GPU: its memory bandwidth and matmul rate, SEAD's sampling and
training forward + backward on it (every clock read waits for the GPU). `--random-weights` keeps the model's
architecture and tokenizer (an HF folder's config.json and tokenizer files are enough) and draws its weights at
random, for a machine the weights cannot be copied to; rows decode greedily and never stop early, so the work timed
is the real model's.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import shutil
import subprocess
import tempfile
import time
from contextlib import contextmanager, nullcontext
from pathlib import Path
from types import SimpleNamespace

import torch
from rich.console import Console
from rich.table import Table

from sead.config import build_scenario, load_config
from sead.dialogue import AgentRequest, ChatTokens
from sead.models import decode_kernel
from sead.models.decode_loop import DecodeLoop
from sead.models.loading import ModelConfig, load_model
from sead.models.precision import Precision, cpu_info, cpu_line
from sead.plots.record import write_record
from sead.policy.hf import HFPolicy, common_prefix_length
from sead.policy.settings import SamplingConfig
from sead.progress import progress_bar
from sead.timing import timed
from sead.trainer.batching import shared_prompt_length
from sead.trainer.estimators import Sequence
from sead.trainer.scoring import masked_logprobs

console = Console()
OPENING = "<response>Hello, this is Alex from the delivery platform. Am I speaking with the owner?</response>"
USER_LINES = (
    "Who is this?|I'm busy, make it quick.|What does it cost me?|Is this some kind of scam?|We already use another "
    "delivery app.|Can you call back after the lunch rush?|How did you get this number?|Okay, go on, I'm listening."
).split("|")
CURVES = (
    ("roofline", "roofline", "k--"),
    ("sead", "SEAD HFPolicy.sample", "o-"),
    ("sead_forward", "SEAD, decoding through the model's forward", "v--"),
    ("sead_unpacked", "SEAD, weights not packed", "^:"),
    ("sead_eager", "SEAD, no CUDA graph", "^:"),
    ("generate", "generate()", "s-"),
)
# sead_forward: decoding steps through the transformers forward instead of SEAD's written-out step (DecodeStep);
# sead_unpacked (CPU): the same sampling with F.linear (no oneDNN packs); sead_eager (GPU): the written-out step
# launched op by op instead of replayed as a CUDA graph (`sead.models.decode_loop`)
ARMS = ("sead", "sead_forward", "sead_unpacked", "generate")
GPU_ARMS = ("sead", "sead_forward", "sead_eager", "generate")
# what the third arm switches off, as a ratio column: (arm, column title)
AGAINST = {"sead_unpacked": "packed/unpacked", "sead_eager": "graph/eager"}
COLUMN = {"sead": "SEAD", "sead_forward": "SEAD via forward", "sead_unpacked": "SEAD unpacked"}
COLUMN |= {"sead_eager": "SEAD no graph", "generate": "generate()"}


def arms_for(device: torch.device) -> tuple[str, ...]:
    """oneDNN packs exist on a CPU only, CUDA graphs on a GPU only: the third arm takes away the device's own."""
    return GPU_ARMS if device.type == "cuda" else ARMS


def arms_of(run: dict) -> list[str]:
    """The arms one batch was measured with."""
    return [k for k in run["decode"] if k != "roofline"]


REPLY = "<response>Sure, let me help you claim the credit.</response><stage>1</stage><status>0</status>"


# -- the machine ---------------------------------------------------------------------------------------------
def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def synchronizer(device: torch.device):
    """What makes a clock read wait for the device's queued work (nothing on a CPU)."""
    return torch.cuda.synchronize if device.type == "cuda" else None


def accelerator_info(device: torch.device) -> dict | None:
    if device.type != "cuda":
        return None
    props = torch.cuda.get_device_properties(device)
    return {
        "name": props.name,
        "memory_gb": props.total_memory / 1e9,
        "multiprocessors": props.multi_processor_count,
        "capability": f"{props.major}.{props.minor}",
        "cuda": torch.version.cuda,
    }


def probe_machine(dtypes: list[str], matmul_n: int, mib: int, device: torch.device) -> dict:
    return {
        "bandwidth_gb_s": bandwidth_gb_s(mib, device),
        "matmul_gflop_s": {d: matmul_gflop_s(matmul_n, getattr(torch, d), device) for d in dtypes},
    }


def bandwidth_gb_s(mib: int, device: torch.device, repeats: int = 5) -> float:
    """Memory read bandwidth: a sum over a tensor far larger than the caches, best of `repeats`."""
    x = torch.ones(mib * 2**20 // 4, device=device)
    x.sum()
    return x.numel() * 4 / timed(x.sum, repeats, synchronizer(device)) / 1e9


def matmul_gflop_s(n: int, dtype: torch.dtype, device: torch.device, repeats: int = 4) -> float:
    a, b = (torch.randn(n, n, device=device).to(dtype) for _ in range(2))
    a @ b
    return 2 * n**3 / timed(lambda: a @ b, repeats, synchronizer(device)) / 1e9


def source_folder(model: str) -> Path:
    if model == "smollm2":
        from sead.models.smollm import model_dir

        return model_dir()
    return Path(model)


def random_weights_folder(src: Path, seed: int = 0) -> Path:
    """A temporary HF folder with `src`'s config, tokenizer and chat template, and random weights of that
    architecture drawn from `seed`."""
    from transformers import AutoConfig, AutoModelForCausalLM

    if not (src / "config.json").is_file():
        raise SystemExit(f"--random-weights: {src} has no config.json")
    dst = Path(tempfile.mkdtemp(prefix="sead-random-weights-"))
    for f in src.iterdir():
        if f.is_file() and not f.name.endswith((".safetensors", ".bin", ".gguf", ".index.json")):
            shutil.copy(f, dst)
    torch.manual_seed(seed)
    AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(src)).save_pretrained(dst)
    return dst


# -- the model's arithmetic --------------------------------------------------------------------------------------
class Shape:
    def __init__(self, model):
        c = model.config
        self.params = sum(p.numel() for p in model.parameters())  # a tied head counts once
        self.elem = next(model.parameters()).element_size()
        embed, head = model.get_input_embeddings().weight, model.get_output_embeddings().weight
        self.head_flops = 2 * head.numel()  # per position it scores
        self.trunk_flops = 2 * (self.params - embed.numel() - (head.numel() if head is not embed else 0))
        head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
        self.attn_flops = 4 * c.num_hidden_layers * c.num_attention_heads * head_dim  # per query, per key
        self.kv_bytes = 2 * c.num_hidden_layers * c.num_key_value_heads * head_dim * self.elem  # per position

    def forward(self, tokens: float, context: float, scored: float) -> float:
        """Flops of `tokens` positions attending to `context` keys on average, `scored` of them through the head."""
        return self.trunk_flops * tokens + self.attn_flops * tokens * context + self.head_flops * scored


def roofline(flops: float, nbytes: float, bw: float, rate: float) -> dict:
    t_bw, t_fl = nbytes / (bw * 1e9), flops / (rate * 1e9)
    return {"s": max(t_bw, t_fl), "bound": "memory" if t_bw >= t_fl else "compute", "memory_s": t_bw, "compute_s": t_fl}


# -- measuring SEAD and generate() ---------------------------------------------------------------------------------
def clock(sync=None) -> float:
    """time.perf_counter(), after `sync` (if any) has waited for a GPU's queued work."""
    if sync:
        sync()
    return time.perf_counter()


@contextmanager
def forward_clock(model, sync=None):
    """Collects (start, end) of every forward call of `model`, and of every decoding step SEAD runs without one
    (`DecodeLoop`, eager or a graph's replay), into the list it yields; each read of the clock first waits for the
    GPU (`sync`), so that each call's time is its own."""
    calls, starts = [], []
    hooks = [
        model.register_forward_pre_hook(lambda *_: starts.append(clock(sync))),
        model.register_forward_hook(lambda *_: calls.append((starts.pop(), clock(sync)))),
    ]
    step = DecodeLoop.__call__

    def timed_step(self, *args, **kwargs):
        start = clock(sync)
        out = step(self, *args, **kwargs)
        calls.append((start, clock(sync)))
        return out

    DecodeLoop.__call__ = timed_step
    try:
        yield calls
    finally:
        DecodeLoop.__call__ = step
        for h in hooks:
            h.remove()


def split_timing(model, run, steps: int, repeats: int, budget_s: float = 20.0) -> dict:
    """Best of up to `repeats` calls (one more only while under `budget_s` in all). A call's last `steps` forwards
    are its decoding steps (one token per row each): decode = from the end of the forward before them to the
    return, prefill = everything before."""
    best, spent = None, 0.0
    sync = synchronizer(model.device)
    for _ in range(repeats):
        if spent > budget_s:
            break
        with forward_clock(model, sync) as calls:
            t0 = time.perf_counter()
            tokens = run()
            t1 = clock(sync)
        spent += t1 - t0
        prefill_end = calls[-steps - 1][1]
        out = {"new_tokens": tokens, "prefill_s": prefill_end - t0, "decode_s": t1 - prefill_end}
        out["decode_forward_share"] = sum(e - s for s, e in calls[-steps:]) / out["decode_s"]
        if best is None or t1 - t0 < best["prefill_s"] + best["decode_s"]:
            best = out
    return best


# -- the peer: one llama.cpp stream ------------------------------------------------------------------------------
REPO = Path(__file__).resolve().parents[1]
LLAMA_CPP_PIN = "requirements_peers.txt"  # in REPO
PEER_TARGET, PEER_TARGET_ROWS = 4.0, 32  # the target: batched generation at >= 32 rows >= 4x one llama.cpp stream


def llama_cpp_class():
    """llama-cpp-python's `Llama`, or an exit that says how to install it (a build of llama.cpp, minutes)."""
    try:
        from llama_cpp import Llama
    except ImportError:
        raise SystemExit(
            f"--llama-cpp needs llama-cpp-python: .venv/bin/python -m pip install -r {LLAMA_CPP_PIN} "
            "(it compiles llama.cpp; several minutes on 2 cores)"
        ) from None
    return Llama


def llama_cpp_stream(
    gguf: Path, prompt: list[int], new: int, threads: int, repeats: int, flash_attn: bool = False
) -> dict:
    """One greedy stream: the prompt's ids (SmolLM2's vocabulary, the GGUF's own) evaluated in one batch, then
    `new` tokens sampled one forward each, never stopping early. Prefill = until the first token, decode = the
    `new` - 1 tokens after it; best of `repeats`. Each repeat starts from an empty cache (`reset`), so no prefix is
    reused. `flash_attn`: llama.cpp's fused attention (off by default in llama-cpp-python)."""
    llm = llama_cpp_class()(
        model_path=str(gguf),
        n_ctx=len(prompt) + new + 8,
        n_batch=512,
        n_threads=threads,
        n_threads_batch=threads,
        verbose=False,
        flash_attn=flash_attn,
    )
    best = None
    for _ in range(repeats):
        llm.reset()
        tokens = llm.generate(prompt, temp=0.0, reset=True)
        t0 = time.perf_counter()
        next(tokens)
        t1 = time.perf_counter()
        for _ in range(new - 1):
            next(tokens)
        t2 = time.perf_counter()
        tokens.close()
        if best is None or t2 - t0 < best["prefill_s"] + best["decode_s"]:
            best = {"prefill_s": t1 - t0, "decode_s": t2 - t1}
    return {
        "gguf": gguf.name,
        "version": llama_cpp_version(),
        "threads": threads,
        "flash_attn": flash_attn,
        "prompt_tokens": len(prompt),
        "new_tokens": new,
        **best,
        "decode_tok_s": (new - 1) / best["decode_s"],
        "prompt_tok_s": len(prompt) / best["prefill_s"],
    }


def fastest_llama_cpp_stream(gguf: Path, prompt: list[int], new: int, threads: int, repeats: int) -> dict:
    """The peer at its best for this workload: llama.cpp's attention with and without its fused kernel, the faster
    decode kept (the other's figures beside it)."""
    tried = [llama_cpp_stream(gguf, prompt, new, threads, repeats, flash_attn=fa) for fa in (False, True)]
    best = max(tried, key=lambda t: t["decode_tok_s"])
    return {**best, "tried": [{k: t[k] for k in ("flash_attn", "decode_tok_s", "prompt_tok_s")} for t in tried]}


def against_peer(run: dict, peer: dict) -> None:
    """Each arm's decode rate at this row count as a multiple of the one llama.cpp stream."""
    for name in arms_of(run):
        run["decode"][name]["x_llama_cpp"] = run["decode"][name]["tok_s"] / peer["decode_tok_s"]


def llama_cpp_version() -> str:
    from importlib.metadata import version

    return version("llama-cpp-python")


def row_prompts(tok, sop: str, rows: int) -> list[list[int]]:
    """The SOP prompt in the chat template, the agent's opening and a different user reply per row, as the
    episode runner renders them."""
    prompts = []
    for i in range(rows):
        chat = ChatTokens(tok, sop)
        chat.add_agent(tok(OPENING, add_special_tokens=False)["input_ids"] + [tok.eos_token_id])
        chat.add_user(f"<user_reply>{USER_LINES[i % len(USER_LINES)]} (call {i})</user_reply>")
        prompts.append(list(chat.prompt_ids))
    return prompts


def measure_rows(model, tok, shape: Shape, prompts, new: int, repeats: int) -> dict:
    """SEAD and generate() on one batch, cold (nothing cached), and the workload's size for its rooflines: the
    arms of `arms_for` the model's device."""
    rows, lens = len(prompts), [len(p) for p in prompts]
    weights = shape.params * shape.elem
    ctx = [n + new / 2 for n in lens]  # every row's cache at its mean length over the decode
    shared = common_prefix_length(prompts, min(lens) - 1)
    width = max(lens)
    result = {
        "rows": rows,
        "prompt_tokens_mean": sum(lens) / rows,
        "cost": {
            "decode_step": [shape.forward(rows, sum(ctx) / rows, rows), weights + sum(ctx) * shape.kv_bytes],
            "prefill_dense": [sum(shape.forward(n, n / 2, 1) for n in lens), weights + sum(lens) * shape.kv_bytes],
            "prefill_work": {  # what each runs: SEAD the shared prompt once, then every row's own tokens
                "sead": shape.forward(shared, shared / 2, 1)
                + shape.forward(rows * (width - shared), (shared + width) / 2, rows),
                "generate": shape.forward(rows * width, width / 2, rows),
            },
        },
        "decode": {},
        "prefill": {},
    }
    no_eos = SimpleNamespace(eos_token_id=-1, pad_token_id=tok.pad_token_id)  # every row decodes `new` tokens
    requests = [AgentRequest(p, [], new, seed=i) for i, p in enumerate(prompts)]

    def sead(pack: bool = True, step: bool = True, graph: bool = True) -> int:
        sampling = SamplingConfig(temperature=0.0)
        policy = HFPolicy(
            model, no_eos, sampling, turn_cache_mb=0, pack_weights=pack, fast_decode=step, cuda_graph=graph
        )
        return sum(len(o.token_ids) for o in policy.sample(requests))  # nothing cached yet

    ids = torch.full((rows, width), tok.pad_token_id, dtype=torch.long)
    attn = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, width - len(p) :], attn[i, width - len(p) :] = torch.tensor(p), 1
    ids, attn = ids.to(model.device), attn.to(model.device)

    def generate() -> int:
        """transformers as it comes: its own `sdpa` attention, not the one SEAD registers."""
        kw = {"max_new_tokens": new, "min_new_tokens": new, "do_sample": False, "pad_token_id": tok.pad_token_id}
        own = model.config._attn_implementation
        model.set_attn_implementation("sdpa")
        try:
            return model.generate(input_ids=ids, attention_mask=attn, **kw).numel() - ids.numel()  # min: no stop
        finally:
            model.set_attn_implementation(own)

    arms = {
        "sead": sead,
        "sead_forward": lambda: sead(step=False),
        "sead_unpacked": lambda: sead(pack=False),
        "sead_eager": lambda: sead(graph=False),
        "generate": generate,
    }
    for name in arms_for(model.device):
        run = arms[name]
        t = split_timing(model, run, new - 1, repeats)
        decode = {"tok_s": rows * (new - 1) / t["decode_s"], "s": t["decode_s"], "steps": new - 1}
        result["decode"][name] = decode | {"new_tokens": t["new_tokens"], "in_forward": t["decode_forward_share"]}
        result["prefill"][name] = {"prompt_tok_s": sum(lens) / t["prefill_s"], "s": t["prefill_s"]}
    return result


def score_rows(run: dict, bw: float, rate: float) -> None:
    """Each figure as a fraction of its roofline, from the machine's best measured bandwidth and matmul rate."""
    step, dense = roofline(*run["cost"]["decode_step"], bw, rate), roofline(*run["cost"]["prefill_dense"], bw, rate)
    run["decode"]["roofline"] = {"tok_s": run["rows"] / step["s"], **step}
    run["prefill"]["roofline"] = {"tok_s": run["prompt_tokens_mean"] * run["rows"] / dense["s"], **dense}
    for name in arms_of(run):
        d, p = run["decode"][name], run["prefill"][name]
        d["of_roofline"] = d["tok_s"] / run["decode"]["roofline"]["tok_s"]
        p["of_roofline"] = p["prompt_tok_s"] / run["prefill"]["roofline"]["tok_s"]
        p["work_gflop_s"] = run["cost"]["prefill_work"]["generate" if name == "generate" else "sead"] / p["s"] / 1e9
        p["work_of_matmul"] = p["work_gflop_s"] / rate


def measure_training(model, tok, shape: Shape, prompts, repeats: int, autocast=nullcontext) -> dict:
    """`masked_logprobs` + backward, as the trainer runs a micro-batch: the shared prompt once (with gradient:
    the backward goes through it to the weights that made its keys and values), every row's own tokens, the LM
    head only where agent tokens are predicted. `autocast`: the context the forward runs in (the trainer's
    `Precision.autocast` over fp32 master weights)."""
    reply = tok(REPLY, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    seqs = []
    for p in prompts:
        mask = torch.zeros(len(p) + len(reply), dtype=torch.long)
        mask[len(p) :] = 1
        seqs.append(Sequence(torch.tensor(p + reply), mask, 1.0))

    def step():
        model.zero_grad(set_to_none=True)
        with autocast():
            logps = torch.cat(masked_logprobs(model, seqs, 1.0).logps)
        logps.sum().backward()

    seconds = timed(step, repeats, synchronizer(model.device))
    model.zero_grad(set_to_none=True)
    shared = shared_prompt_length(seqs)
    agent = sum(int(s.mask.sum()) for s in seqs)
    # the work the result needs, each row at its own length (padding, where a path pads, is not credited); backward
    # ~ 2 x forward for both parts (an upper bound by the prompt's last layer after its keys and values)
    own = [(len(s.ids) - shared, int(s.mask.sum())) for s in seqs]
    flops = 3 * (shape.forward(shared, shared / 2, 0) + sum(shape.forward(n, shared + n / 2, a) for n, a in own))
    tokens = sum(len(s.ids) for s in seqs)
    sizes = {"rows": len(seqs), "tokens": tokens, "agent_tokens": agent, "shared_prompt": shared, "flops": flops}
    return sizes | {"s": seconds, "tok_s": tokens / seconds, "gflop_s": flops / seconds / 1e9}


def score_training(t: dict, rate: float) -> None:
    t["roofline_tok_s"] = t["tokens"] / (t["flops"] / (rate * 1e9))
    t["of_roofline"] = t["gflop_s"] / rate


# -- output ------------------------------------------------------------------------------------------------------
def device_line(m: dict) -> str:
    """The CPU, and the GPU where the run measured one."""
    gpu = m.get("accelerator")
    if not gpu:
        return cpu_line(m["cpu"])
    return (
        f"{gpu['name']} ({gpu['memory_gb']:.0f} GB, {gpu['multiprocessors']} SMs, compute {gpu['capability']}, "
        f"CUDA {gpu['cuda']}); host {cpu_line(m['cpu'])}"
    )


def machine_line(m: dict) -> str:
    rates = ", ".join(f"{d} {r:,.0f}" for d, r in m["matmul_gflop_s"].items())
    return (
        f"{device_line(m)}; torch {m['torch']}, {m['threads']} threads; read bandwidth "
        f"{m['bandwidth_gb_s']:,.1f} GB/s; matmul {m['matmul_n']}^3 GFLOP/s: {rates}"
    )


def add_rows(table: Table, columns: tuple[str, ...], rows: list[list[str]]) -> Table:
    for col in columns:
        table.add_column(col, justify="right")
    for row in rows:
        table.add_row(*row)
    return table


def print_tables(result: dict) -> None:
    def fx(v: float, frac: float) -> str:
        return f"{v:,.1f} ({frac:.2f}x)"

    runs, arms = result["runs"], result["settings"]["arms"]
    names = [COLUMN[k] for k in arms]
    third = arms[2]  # what the device's own fast path is measured against
    decode = [
        [r["dtype"], str(r["rows"]), f"{r['prompt_tokens_mean']:.0f}"]
        + [fx(r["decode"][k]["tok_s"], r["decode"][k]["of_roofline"]) for k in arms]
        + [f"{r['decode']['sead']['tok_s'] / r['decode'][k]['tok_s']:.2f}x" for k in ("sead_forward", third)]
        + [f"{r['decode']['roofline']['tok_s']:,.1f}", r["decode"]["roofline"]["bound"]]
        + [f"{100 * r['decode'][k]['in_forward']:.0f} %" for k in ("sead", "generate")]
        for r in runs
    ]
    columns = (
        *("dtype", "rows", "prompt", *names),
        *("step/forward", AGAINST[third], "roofline", "bound"),
        *("SEAD in fwd", "gen() in fwd"),
    )
    console.print(add_rows(Table(title="decode tok/s (x roofline)", title_justify="left"), columns, decode))
    prefill = [
        [r["dtype"], str(r["rows"])]
        + [fx(r["prefill"][k]["prompt_tok_s"], r["prefill"][k]["of_roofline"]) for k in arms]
        + [f"{r['prefill']['roofline']['tok_s']:,.0f}", r["prefill"]["roofline"]["bound"]]
        + [fx(r["prefill"][k]["work_gflop_s"], r["prefill"][k]["work_of_matmul"]) for k in arms]
        for r in runs
    ]
    columns = ("dtype", "rows", *names, "dense roofline", "bound", *(f"{n}: GFLOP/s" for n in names))
    title = "prefill prompt tok/s (x dense roofline); GFLOP/s of the work each ran (x matmul rate)"
    console.print(add_rows(Table(title=title, title_justify="left"), columns, prefill))
    train = [
        [t["dtype"], t["weights"], str(t["rows"]), str(t["tokens"]), f"{t['s']:.2f}", f"{t['tok_s']:,.0f}"]
        + [f"{t['roofline_tok_s']:,.0f}", fx(t["gflop_s"], t["of_roofline"])]
        for t in result["training"]
    ]
    columns = ("dtype", "weights", "rows", "tokens", "s", "tok/s", "roofline tok/s", "GFLOP/s (x matmul)")
    console.print(add_rows(Table(title="training forward + backward", title_justify="left"), columns, train))
    if peer := result.get("llama_cpp"):
        title = (
            f"decode tok/s against one llama.cpp stream ({peer['decode_tok_s']:,.1f} tok/s, {peer['gguf']}, "
            f"{peer['threads']} threads); target: >= {PEER_TARGET:g}x at >= {PEER_TARGET_ROWS} rows"
        )
        against = [
            [r["dtype"], str(r["rows"])] + [fx(r["decode"][k]["tok_s"], r["decode"][k]["x_llama_cpp"]) for k in arms]
            for r in runs
        ]
        console.print(add_rows(Table(title=title, title_justify="left"), ("dtype", "rows", *names), against))


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dtypes = result["settings"]["dtypes"]
    fig, axes = plt.subplots(1, len(dtypes), figsize=(5.5 * len(dtypes), 4.2), squeeze=False, sharey=True)
    for ax, dtype in zip(axes[0], dtypes):
        runs = [r for r in result["runs"] if r["dtype"] == dtype]
        rows = [r["rows"] for r in runs]
        for key, label, style in CURVES:
            if key in runs[0]["decode"]:
                ax.plot(rows, [r["decode"][key]["tok_s"] for r in runs], style, label=label)
        if peer := result.get("llama_cpp"):
            ax.axhline(peer["decode_tok_s"], color="tab:red", lw=1, label="one llama.cpp stream")
            ax.axhline(
                PEER_TARGET * peer["decode_tok_s"], color="tab:red", lw=1, ls=":", label=f"{PEER_TARGET:g}x that"
            )
        ax.set_xscale("log", base=2)
        ax.set_xticks(rows, [str(n) for n in rows])
        ax.set_yscale("log")
        ax.set_xlabel("rows decoded together")
        ax.set_title(f"{dtype}, {result['settings']['new_tokens']} new tokens")
        ax.grid(alpha=0.3, which="both")
    axes[0][0].set_ylabel("decode tok/s")
    axes[0][0].legend(fontsize=8)
    machine = result["machine"]
    on = (machine.get("accelerator") or {}).get("name") or machine["cpu"]["model"]
    fig.suptitle(f"{result['model']['label']} decode on {on}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2", help="'smollm2' (the packaged model) or a local HF folder")
    ap.add_argument("--rows", type=int, nargs="+", help="batch sizes to decode (default 1 8 32 64 128)")
    ap.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"], choices=["float32", "bfloat16"])
    ap.add_argument("--new-tokens", type=int, help="tokens decoded per row (default 32)")
    ap.add_argument("--train-rows", type=int, default=4)
    ap.add_argument("--repeats", type=int, help="best of this many calls, while a measurement is short (3)")
    ap.add_argument("--device", default="cpu", help="cpu, or cuda to measure a GPU")
    ap.add_argument(
        "--random-weights",
        action="store_true",
        help="--model's architecture and tokenizer with random weights (for a machine its weights cannot reach)",
    )
    ap.add_argument(
        "--llama-cpp", action="store_true", help="also one llama.cpp stream on the packaged GGUF, the CPU peer"
    )
    ap.add_argument("--quick", action="store_true", help="smoke test: rows 1 and 8, 8 tokens, small probes")
    ap.add_argument("--out", type=Path, default=Path(__file__).with_name("roofline.json"))
    args = ap.parse_args(argv)
    rows = args.rows or ([1, 8] if args.quick else [1, 8, 32, 64, 128])
    new = args.new_tokens or (8 if args.quick else 32)
    repeats = args.repeats or (1 if args.quick else 3)
    if new < 2:
        ap.error("--new-tokens must be at least 2 (one from the prefill, at least one decoding step)")
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: torch sees no GPU on this machine")
    gpu = device.type == "cuda"
    if args.llama_cpp:
        if args.model != "smollm2" or args.random_weights:
            ap.error("--llama-cpp runs the packaged GGUF: compare it with --model smollm2 (its own weights)")
        llama_cpp_class()  # missing: said now, not after the measurements
    matmul_n, mib = (512, 64) if args.quick else ((8192, 4096) if gpu else (2048, 1024))
    torch.manual_seed(0)

    machine = {"cpu": cpu_info(), "torch": torch.__version__, "threads": torch.get_num_threads()}
    machine["accelerator"] = accelerator_info(device)
    if not gpu:  # else a fresh cache compiles them inside the first timed call (once 1.4 tok/s at one row)
        with console.status("SEAD's CPU kernels (built once per machine, ~15 s each)"):
            machine["kernels"] = decode_kernel.build_all()
    machine["uptime_before"] = uptime()
    console.print(f"[bold]Device:[/] {device_line(machine)}\n{machine['uptime_before']}")
    probes = [probe_machine(args.dtypes, matmul_n, mib, device)]  # again at the end: the limit is the best seen
    sop = build_scenario(load_config([])).agent_system_prompt()
    model_path = random_weights_folder(source_folder(args.model)) if args.random_weights else None
    runs, training, peer = [], [], None
    if args.llama_cpp:
        from sead.models.smollm import load_tokenizer, locate_gguf

        tok = load_tokenizer()  # the GGUF's own vocabulary, as SEAD reads it
        with console.status("one llama.cpp stream"):
            peer = fastest_llama_cpp_stream(
                locate_gguf(), row_prompts(tok, sop, 1)[0], new, torch.get_num_threads(), repeats
            )
        console.print(
            f"llama.cpp {peer['version']}, one stream, {peer['threads']} threads, flash attention "
            f"{'on' if peer['flash_attn'] else 'off'} (the faster): decode {peer['decode_tok_s']:.1f} "
            f"tok/s, prompt {peer['prompt_tok_s']:.0f} tok/s ({peer['prompt_tokens']} tokens)"
        )
    with progress_bar(console) as progress:
        task = progress.add_task("measuring", total=len(args.dtypes) * (sum(r + 4 for r in rows) + 8))
        for dtype in args.dtypes:
            if model_path:
                preset = {"preset": "path", "path": str(model_path)}
            else:
                preset = {"preset": "smollm2"} if args.model == "smollm2" else {"preset": "path", "path": args.model}
            model, tok, label = load_model(ModelConfig(**preset, dtype=dtype, device=args.device))
            prompts = row_prompts(tok, sop, max(max(rows), args.train_rows))
            shape = Shape(model)
            for n in rows:
                progress.update(task, description=f"{dtype}, {n} rows")
                runs.append({"dtype": dtype, **measure_rows(model, tok, shape, prompts[:n], new, repeats)})
                d, third = runs[-1]["decode"], arms_for(device)[2]
                progress.console.print(
                    f"{dtype} {n:>3} rows: decode tok/s SEAD {d['sead']['tok_s']:.1f} "
                    f"(via forward {d['sead_forward']['tok_s']:.1f}, {third} {d[third]['tok_s']:.1f}), "
                    f"generate() "
                    f"{d['generate']['tok_s']:.1f}; prefill s SEAD {runs[-1]['prefill']['sead']['s']:.1f}, "
                    f"generate() {runs[-1]['prefill']['generate']['s']:.1f}"
                )
                progress.advance(task, n + 4)
            progress.update(task, description=f"{dtype}, training")
            train_prompts = prompts[: args.train_rows]
            training.append({"dtype": dtype, "weights": dtype, **measure_training(model, tok, shape, train_prompts, 2)})
            del model
            gc.collect()
            precision = Precision.for_training(dtype, args.device)
            if precision.mixed:  # as the trainer runs it: fp32 master weights, the matmuls in `dtype`
                model, _, _ = load_model(ModelConfig(**preset, dtype=precision.master, device=args.device))
                t = measure_training(model, tok, shape, train_prompts, 2, precision.autocast)  # same flops
                training.append({"dtype": dtype, "weights": precision.master, **t})
                del model
                gc.collect()
            progress.advance(task, 8)
    if model_path:
        shutil.rmtree(model_path)
        label = f"random weights, architecture of {args.model}"
    probes.append(probe_machine(args.dtypes, matmul_n, mib, device))
    machine["uptime_after"] = uptime()
    machine["probes"] = probes
    machine["bandwidth_gb_s"] = max(p["bandwidth_gb_s"] for p in probes)
    machine["matmul_n"] = matmul_n
    machine["matmul_gflop_s"] = {d: max(p["matmul_gflop_s"][d] for p in probes) for d in args.dtypes}
    for run in runs:
        score_rows(run, machine["bandwidth_gb_s"], machine["matmul_gflop_s"][run["dtype"]])
        if peer:
            against_peer(run, peer)
    for t in training:
        score_training(t, machine["matmul_gflop_s"][t["dtype"]])
    result = {
        "date": datetime.date.today().isoformat(),
        "machine": machine,
        "model": {"label": label, "params": shape.params, "kv_bytes_per_token_fp32": shape.kv_bytes * 4 // shape.elem},
        "settings": {
            **{"rows": rows, "dtypes": args.dtypes, "new_tokens": new, "repeats": repeats, "quick": args.quick},
            **{"device": args.device, "random_weights": args.random_weights, "arms": list(arms_for(device))},
        },
        "runs": runs,
        "training": training,
        "llama_cpp": peer,
    }
    console.print(f"[bold]{machine_line(machine)}[/]")
    print_tables(result)
    console.print(f"load before: {machine['uptime_before']}\nload after:  {machine['uptime_after']}")
    console.print(f"wrote {args.out} and {write_record(result, args.out, plot)}")
    return result


if __name__ == "__main__":
    main()
