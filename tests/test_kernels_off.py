"""Where SEAD's C++ kernels cannot be built (an ARM CPU such as Apple silicon or Graviton has no x86 intrinsics;
a machine without a compiler), torch's operators take their place. Run with the kernels switched off, the suite's
decoding and training checks pass as they do with them, against the same references."""

import os
import subprocess
import sys
from pathlib import Path

from sead.models import decode_kernel

ROOT = Path(__file__).resolve().parent.parent
CHECKS = [  # decoding: the written-out step, its fp32 form, the fused layers; training: the update and its attention
    "tests/test_decode_step.py",
    "tests/test_decode_fp32.py",
    "tests/test_decode_layers.py",
    "tests/test_trainer_update.py",
    "tests/test_training_attention.py",
]


def test_decoding_and_training_checks_pass_with_the_kernels_off(tmp_path):
    env = {**os.environ, decode_kernel.ENV: "0", "SEAD_CACHE_DIR": str(tmp_path / "cache")}
    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            "from sead.models import decode_kernel as k; print(sorted(n for n in k.KERNELS if k.kernel(n)))",
        ],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert loaded.stdout.strip() == "[]"  # nothing built or loaded: the operators' paths are what runs
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *CHECKS],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]  # 0: tests ran (5 if none), none failed
