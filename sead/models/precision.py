"""Which floating-point precision the model computes in, chosen per machine, and the machine it was chosen on.

`model.dtype=auto` takes bf16 where the hardware does bf16 arithmetic natively (a CUDA GPU that supports it, a CPU
with AVX-512 BF16 or AMX: roughly 2x fp32's matmul rate and half the bytes per decoding step) and fp32 elsewhere
(without native support, bf16 on a CPU is emulated and slower than fp32). Training never keeps bf16 weights: an
update of lr 1e-5 is below bf16's resolution and would be lost in rounding. So when the compute precision is
half, the trainer keeps fp32 master weights, trains under autocast, and samples rollouts from a half-precision
copy refreshed after every update; the sampled tokens' log-probs then differ slightly from the trainer's, which
the update corrects with truncated importance sampling and logs as `rollout_kl` (`sead.trainer.rollout_correction`).
"""

from __future__ import annotations

import contextlib
import copy
import os
import platform
from dataclasses import dataclass
from pathlib import Path

import torch

from sead.errors import SEADInputError
from sead.models.weights import weights_version

BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")  # /proc/cpuinfo names of native bf16 arithmetic
REPORTED_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", *BF16_CPU_FLAGS, "amx_tile")


def _cpuinfo_fields() -> dict[str, str]:
    """The first CPU's fields in Linux /proc/cpuinfo (empty elsewhere)."""
    fields: dict[str, str] = {}
    cpuinfo = Path("/proc/cpuinfo")
    for line in cpuinfo.read_text().splitlines() if cpuinfo.exists() else []:
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return fields


def cpu_flags(fields: dict[str, str] | None = None) -> set[str]:
    """The CPU's instruction-set flags, by their /proc/cpuinfo names."""
    return set((fields if fields is not None else _cpuinfo_fields()).get("flags", "").split())


def cpu_info() -> dict:
    """The CPU's model name and the instruction-set flags that decide the fast paths (Linux /proc/cpuinfo)."""
    fields = _cpuinfo_fields()
    flags = cpu_flags(fields)
    return {
        "model": fields.get("model name", platform.processor()),
        "family_model": f"{fields.get('cpu family', '?')}/{fields.get('model', '?')}",
        "cpus": os.cpu_count(),
        "flags": {f: f in flags for f in REPORTED_FLAGS},
    }


def cpu_line(cpu: dict) -> str:
    """`cpu_info()` in one line, as benchmarks print the CPU they ran on."""
    flags = " ".join(f for f, on in cpu["flags"].items() if on) or "none of " + " ".join(cpu["flags"])
    return f"{cpu['model']} (family/model {cpu['family_model']}, {cpu['cpus']} CPUs; {flags})"


def native_bf16(device: str) -> bool:
    dev = torch.device(device)
    if dev.type == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    if dev.type == "cpu":
        return any(cpu_info()["flags"][f] for f in BF16_CPU_FLAGS)
    return False


def compute_dtype(requested: str, device: str) -> str:
    """`model.dtype` resolved: 'auto' becomes bfloat16 where native, float32 elsewhere."""
    if requested != "auto":
        return requested
    return "bfloat16" if native_bf16(device) else "float32"


@dataclass(frozen=True)
class Precision:
    """compute: what forwards run in (rollouts, and training matmuls under autocast); the trained weights are
    always fp32 (`master`)."""

    compute: str
    requested: str
    device: str
    master = "float32"

    @classmethod
    def for_training(cls, requested: str, device: str) -> Precision:
        compute = compute_dtype(requested, device)
        if compute == "float16":  # fp16 gradients underflow without loss scaling, which this trainer does not do
            raise SEADInputError(
                "float16 training is not supported (no loss scaling); use bfloat16, float32 or auto "
                "(float16 is fine for evaluation)",
                field="model.dtype",
            )
        return cls(compute, requested, device)

    @property
    def mixed(self) -> bool:
        return self.compute != self.master

    def autocast(self):
        """Forwards of the master weights in the compute precision (a no-op when they are the same)."""
        if not self.mixed:
            return contextlib.nullcontext()
        return torch.autocast(torch.device(self.device).type, dtype=getattr(torch, self.compute))

    def describe(self) -> str:
        why = f"model.dtype={self.requested}" + (
            f", native bf16 on {self.device}: {'yes' if native_bf16(self.device) else 'no'}"
            if self.requested == "auto"
            else ""
        )
        train = f"fp32 master weights, {self.compute} autocast" if self.mixed else self.compute
        return f"rollouts {self.compute}, training {train} ({why})"

    def record(self) -> dict:
        """What a run writes down: the choice, why, the machine it was made on, the compiled kernels that serve the
        compute precision there and how the tensor threads wait (`sead.threads`)."""
        from sead.models import decode_kernel  # it reads the CPU's flags from here
        from sead.threads import POLICY_ENV, SPIN_ENV

        on_cpu = torch.device(self.device).type == "cpu"
        return {
            "requested": self.requested,
            "compute": self.compute,
            "master": self.master,
            "device": self.device,
            "native_bf16": native_bf16(self.device),
            "cpu": cpu_info(),
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
            "openmp": {k: os.environ.get(k) for k in (SPIN_ENV, POLICY_ENV)},
            "kernels": decode_kernel.usable_for(self.compute) if on_cpu else {},
        }


class RolloutWeights:
    """The model rollouts sample from: the trained model itself, or (mixed precision) a compute-precision copy
    of it, refreshed whenever the master weights have changed since the last copy."""

    def __init__(self, master, precision: Precision):
        self.master = master
        self.model = master
        self._copied = None
        if precision.mixed:
            self.model = copy.deepcopy(master).to(getattr(torch, precision.compute)).eval().requires_grad_(False)
            self._copied = weights_version(master)

    def refresh(self) -> bool:
        """Copy the master weights if they changed; True when it copied."""
        if self.model is self.master or weights_version(self.master) == self._copied:
            return False
        with torch.no_grad():
            self.model.load_state_dict(self.master.state_dict())
        self._copied = weights_version(self.master)
        return True
