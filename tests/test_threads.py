"""SEAD's OpenMP wait setting (sead/threads.py): set on `import sead` before torch loads, unless the environment
already chose one; recorded in machine.json."""

import subprocess
import sys

from sead.models.precision import Precision


def spin_in_fresh_process(env: dict) -> str:
    code = "import os, sead, torch; print(os.environ.get('GOMP_SPINCOUNT'), os.environ.get('OMP_WAIT_POLICY'))"
    clean = {k: v for k, v in __import__("os").environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    done = subprocess.run([sys.executable, "-c", code], env=clean | env, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def test_import_sead_sets_a_short_spin_unless_the_environment_chose_a_wait_policy():
    assert spin_in_fresh_process({}) == "1000 None"
    assert spin_in_fresh_process({"GOMP_SPINCOUNT": "50"}) == "50 None"
    assert spin_in_fresh_process({"OMP_WAIT_POLICY": "ACTIVE"}) == "None ACTIVE"


def test_machine_json_records_the_wait_setting_and_the_kernels_of_the_compute_precision():
    record = Precision.for_training("float32", "cpu").record()
    assert set(record["openmp"]) == {"GOMP_SPINCOUNT", "OMP_WAIT_POLICY"}
    assert set(record["kernels"]) == {"small_rows_linear_fp32", "decode_layers_fp32"}
