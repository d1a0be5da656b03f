"""SEAD's compiled kernels (`csrc/`): each built once per machine, cached, loaded on first use.

- `single_query_attention`: a decoding step's attention over each row's own keys and values. With torch's operators
  it is two batched matmuls of 3 query rows each plus an fp32 softmax between them; the kernel reads the keys and
  values once per row and key/value head and skips the positions a row does not use.
- `small_rows_linear`: a linear layer at the rows of a decoding step, from a weight packed once
  (`pack_small_rows`): at 1-8 rows it streams the weight at 0.75-0.8 of the machine's measured bandwidth (oneDNN:
  about 0.5), at 32-64 rows it runs at 0.9-1.0 of the machine's bf16 matmul rate (oneDNN: 0.7-0.85).
- `decode_layers`: every decoder layer of a decoding step in one call (up to 128 rows), from the two kernels above
  and AVX-512 loops for the norms, rotary turn, cache write, residuals and SiLU: none of the ~35 operator calls a
  layer that dominate a step at few rows.

- `causal_attention`: the attention of training forwards, forward and backward (`training_attention.py`): sequences
  packed into one row, each causal over its own positions after a shared prompt, no mask, at about 2.5x torch's
  CPU flash kernel given the mask.

These four need AVX512-BF16: they serve bf16 work, the precision SEAD picks on such CPUs. Elsewhere on x86 (AVX2
and FMA: AMD Zen 2/3, most Intel client parts) SEAD computes in fp32, and two more serve its decoding:

- `small_rows_linear_fp32`: the small-rows linear in fp32, from a weight packed once (`pack_small_rows_fp32`);
- `decode_layers_fp32`: every decoder layer of an fp32 decoding step in one call, the fp32 counterpart of
  `decode_layers`.

Each needs a C++ compiler; their measurements are in docs/performance.md.

Built with the system's compiler against torch's headers in a private temporary folder (no lock that a killed
process could leave behind), then renamed into `$SEAD_CACHE_DIR/kernels/` under a name keyed on the source, the
compiler call and torch's version, so a stale or foreign build is never loaded. Anything that fails (no compiler,
another CPU, a file that does not load) leaves a warning and torch's operators. `SEAD_DECODE_KERNEL=0` turns them all
off.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import subprocess
import sys
import tempfile
import threading
import warnings
from pathlib import Path

import torch

from sead.cache_dir import sead_cache_dir
from sead.models.precision import cpu_flags

CSRC = Path(__file__).parent / "csrc"
ISAS = {  # instruction set -> (compiler flags, the /proc/cpuinfo names of what they use)
    "avx512_bf16": (
        ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mavx512bf16", "-mfma"],
        ("avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_bf16"),
    ),
    "avx2": (["-mavx2", "-mfma"], ("avx2", "fma")),
}
KERNELS = {  # name -> (what for, instruction set)
    "single_query_attention": ("decoding attention", "avx512_bf16"),
    "small_rows_linear": ("small-rows linear", "avx512_bf16"),
    "decode_layers": ("fused decoding step", "avx512_bf16"),
    "causal_attention": ("training attention", "avx512_bf16"),
    "small_rows_linear_fp32": ("fp32 small-rows linear", "avx2"),
    "decode_layers_fp32": ("fused fp32 decoding step", "avx2"),
}
ISA_OF_DTYPE = {"bfloat16": "avx512_bf16", "float32": "avx2"}  # the kernels that serve a compute dtype
_PREBUILDS: dict[str, threading.Thread] = {}  # name -> its background build (`prebuild`)
OPERATOR = {"causal_attention": "causal_attention_forward"}  # the operator a library is known by, where not its name
ENV = "SEAD_DECODE_KERNEL"
BUILD_TIMEOUT_S = 300  # a compiler that hangs must not hang the run: past this, torch's operators


def cache_root() -> Path:
    return sead_cache_dir() / "kernels"


def build_key(name: str) -> str:
    """What a library depends on: its source and the shared headers, the compiler call (flags, torch's headers) and
    torch's version."""
    text = b"".join(p.read_bytes() for p in [CSRC / f"{name}.cpp", *sorted(CSRC.glob("*.h"))])
    text += " ".join(compile_command(name, Path("-"))).encode() + torch.__version__.encode()
    return hashlib.sha256(text).hexdigest()[:16]


def cpu_supports(isa: str = "avx512_bf16") -> bool:
    """The CPU runs code built for `isa` (one of `ISAS`)."""
    return set(ISAS[isa][1]) <= cpu_flags()


def offered(isa: str = "avx512_bf16") -> bool:
    """The kernels of `isa` are offered here: not switched off (`SEAD_DECODE_KERNEL=0`) and the CPU runs them."""
    return os.environ.get(ENV, "1") != "0" and cpu_supports(isa)


def compile_command(name: str, output: Path) -> list[str]:
    """The compiler call that builds kernel `name` into `output`. OpenMP as torch's own (`at::parallel_for` then runs
    on torch's thread team): the library's `libgomp.so.1` is torch's, already loaded in the process."""
    from torch.utils.cpp_extension import include_paths, library_paths

    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    cmd = [
        os.environ.get("CXX", "c++"),
        "-O3",
        *ISAS[KERNELS[name][1]][0],
        "-fopenmp",
        "-fPIC",
        "-shared",
        "-std=c++20",
    ]
    cmd += [f"-D_GLIBCXX_USE_CXX11_ABI={abi}", *(f"-I{p}" for p in include_paths())]
    cmd += [str(CSRC / f"{name}.cpp"), "-o", str(output)]
    for lib in library_paths():
        cmd += [f"-L{lib}", f"-Wl,-rpath,{lib}"]
    return [*cmd, "-lc10", "-ltorch_cpu"]


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _build(name: str, target: Path) -> None:
    """Compile into a fresh temporary folder, then rename the library to `target` and its sha256 beside it: a build
    cut short leaves nothing another process could load, and a file changed since (truncated, overwritten), whose
    loading could crash the process rather than raise, is told apart by its digest before it is loaded."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="build-", dir=target.parent) as tmp:
        built = Path(tmp) / target.name
        done = subprocess.run(compile_command(name, built), capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
        if done.returncode:
            raise RuntimeError(f"the compiler failed (exit {done.returncode}): {done.stderr.strip()[-2000:]}")
        digest = Path(tmp) / "sha256"
        digest.write_text(_digest(built))
        os.replace(built, target)
        os.replace(digest, _digest_file(target))


def _digest_file(target: Path) -> Path:
    return target.with_suffix(".sha256")


def _intact(target: Path) -> bool:
    """The library is there and is the file its build wrote."""
    digest = _digest_file(target)
    return target.exists() and digest.exists() and digest.read_text().strip() == _digest(target)


@functools.cache
def kernel(name: str):
    """`torch.ops.sead.<name>` (one of `KERNELS`), built and loaded on first call; None where it cannot be used
    here. Decided once per process."""
    return _load(name)


def build_all() -> dict[str, bool]:
    """Every kernel built (or loaded from the cache) now, name -> usable here: for a caller that times the first
    call after this, which would otherwise include a compile (~15 s a kernel on a machine's first run)."""
    return {name: kernel(name) is not None for name in KERNELS}


def usable_for(dtype: str) -> dict[str, bool]:
    """The kernels that serve `dtype` work (bf16: the AVX512-BF16 ones; float32: the AVX2 ones), name -> usable
    here, each built now where it was not yet."""
    isa = ISA_OF_DTYPE.get(dtype)
    return {name: kernel(name) is not None for name, (_, needs) in KERNELS.items() if needs == isa}


def prebuild(dtype: str) -> None:
    """Compile the kernels that serve `dtype` work in background threads, one per kernel: the compiler is a
    subprocess, so the builds run beside the model's loading and conversion instead of before the first dialogue.
    A kernel's first use waits for its build rather than starting another; a build that fails is tried again
    there, and warns there."""
    isa = ISA_OF_DTYPE.get(dtype)
    if isa is None or not offered(isa):
        return
    for name, (_, needs) in KERNELS.items():
        target = _target(name)
        if needs == isa and name not in _PREBUILDS and _registered(name) is None and not _intact(target):
            _PREBUILDS[name] = threading.Thread(target=_try_build, args=(name, target), daemon=True)
            _PREBUILDS[name].start()


def _try_build(name: str, target: Path) -> None:
    with contextlib.suppress(Exception):  # the first use builds again and says why it could not
        _announce(name, target)
        _build(name, target)


def _announce(name: str, target: Path) -> None:
    print(f"[sead] building the {KERNELS[name][0]} kernel in {target.parent} (once, ~15 s)", file=sys.stderr)


def _target(name: str) -> Path:
    return cache_root() / f"{name}-{build_key(name)}.so"


def single_query_attention():
    return kernel("single_query_attention")


def small_rows_linear():
    return kernel("small_rows_linear")


def decode_layers():
    return kernel("decode_layers")


def small_rows_linear_fp32():
    return kernel("small_rows_linear_fp32")


def decode_layers_fp32():
    return kernel("decode_layers_fp32")


def causal_attention():
    """The module of `causal_attention_forward` / `_backward`, or None."""
    return kernel("causal_attention") and torch.ops.sead


def pack_small_rows(weight: torch.Tensor) -> torch.Tensor:
    """`weight` (out, in) in `small_rows_linear`'s layout, zero-padded to whole blocks and pairs: blocks of 32 output
    features, each input pair by pair as two groups of 16 outputs x 2 inputs, (blocks, pairs, 2, 16, 2)."""
    out, inputs = weight.shape
    blocks, pairs = -(-out // 32), -(-inputs // 2)
    padded = weight.detach().new_zeros((blocks * 32, pairs * 2))
    padded[:out, :inputs] = weight.detach()
    return padded.view(blocks, 2, 16, pairs, 2).permute(0, 3, 1, 2, 4).contiguous()


def pack_small_rows_fp32(weight: torch.Tensor) -> torch.Tensor:
    """`weight` (out, in) in `small_rows_linear_fp32`'s layout, zero-padded to whole blocks: blocks of 16 output
    features, input by input, (blocks, in, 16)."""
    out, inputs = weight.shape
    blocks = -(-out // 16)
    padded = weight.detach().new_zeros((blocks * 16, inputs))
    padded[:out] = weight.detach()
    return padded.view(blocks, 16, inputs).transpose(1, 2).contiguous()


def _operator(name: str):
    return getattr(torch.ops.sead, OPERATOR.get(name, name))


def _registered(name: str):
    """The operator, if a library of this process registered it already."""
    try:
        return _operator(name)
    except (AttributeError, RuntimeError):
        return None


def _load(name: str):
    if not offered(KERNELS[name][1]):
        return None
    if (op := _registered(name)) is not None:
        return op
    if (building := _PREBUILDS.get(name)) is not None:
        building.join()
    target = _target(name)
    try:
        if not _intact(target):
            _announce(name, target)
            _build(name, target)
        torch.ops.load_library(str(target))
        return _operator(name)
    except Exception as e:  # noqa: BLE001 - any failure means torch's own operators, which are always correct
        warnings.warn(f"the {KERNELS[name][0]} kernel is not used ({type(e).__name__}: {e}); "
                      f"torch's operators take its place", stacklevel=2)  # fmt: skip
        return None
