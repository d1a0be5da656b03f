"""`sead --version` prints the one version the package and its installer declare."""

import re
from pathlib import Path

import sead
from sead.cli.main import main

ROOT = Path(__file__).resolve().parents[1]


def test_version_prints_the_package_version(capsys):
    assert main(["--version"]) == 0
    out = capsys.readouterr().out
    assert out == f"sead {sead.__version__}\n"
    assert re.fullmatch(r"sead \d+\.\d+\.\d+\n", out)


def test_the_package_and_setup_py_declare_the_same_version():
    declared = re.search(r'version="([^"]+)"', (ROOT / "setup.py").read_text()).group(1)
    assert declared == sead.__version__


def test_version_is_listed_in_the_usage_and_is_not_a_command(capsys):
    assert main(["--help"]) == 0
    assert "sead --version" in capsys.readouterr().out
    assert main(["--version", "extra"]) == 2  # only the flag alone prints the version
