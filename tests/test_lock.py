"""requirements.lock is what every script installs: it must satisfy the declared ranges, and the environment the
tests run in must be exactly the lock (so a test can never pass on a version users do not get)."""

import re
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent


def locked() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.\-]+)(\[[^\]]*\])?==(\S+)", line)
        if m:
            pins[canonicalize_name(m.group(1))] = m.group(3)
    return pins


def declared() -> list[Requirement]:
    """requirements.txt plus setup.py's test and verl extras, as setup.py reads them."""
    lines = [line.split("#")[0].strip() for line in (ROOT / "requirements.txt").read_text().splitlines()]
    reqs = [Requirement(line) for line in lines if line]
    setup = (ROOT / "setup.py").read_text()
    for extra in ("test", "verl"):
        body = re.search(rf'"{extra}": \[([^\]]*)\]', setup).group(1)
        reqs += [Requirement(s) for s in re.findall(r'"([^"]+)"', body)]
    return reqs


def test_every_declared_range_is_met_by_the_lock():
    pins = locked()
    assert len(pins) > 50 and "transformers" in pins and "verl" in pins
    for req in declared():
        name = canonicalize_name(req.name)
        if name == "torch":  # installed by pip from the CPU build, left out of the lock on purpose
            assert str(req.specifier) == "==2.13.0"
            continue
        assert name in pins, f"{req} is declared but not locked: run bash scripts/lock.sh"
        assert req.specifier.contains(pins[name], prereleases=True), f"lock has {name}=={pins[name]}, wants {req}"


def test_the_running_environment_is_the_lock():
    wrong = {}
    for name, pin in locked().items():
        try:
            have = version(name)
        except PackageNotFoundError:
            have = None
        if have != pin:
            wrong[name] = (have, pin)
    assert not wrong, f"installed vs locked: {wrong}; rerun scripts/test.sh (it installs the lock)"
    assert version("torch").split("+")[0] == "2.13.0"
