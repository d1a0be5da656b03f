from pathlib import Path

from setuptools import find_packages, setup


def requirements(name):
    return [l.split("#")[0].strip() for l in Path(name).read_text().splitlines() if l.split("#")[0].strip()]


setup(
    name="sead",
    version="0.1.0",
    description="Multi-turn RL for SOP-driven service dialogue agents against a simulated user",
    long_description=Path("README.md").read_text() if Path("README.md").exists() else "",
    long_description_content_type="text/markdown",
    python_requires=">=3.11,<3.13",  # asyncio.timeout
    packages=find_packages(include=["sead", "sead.*"]),
    install_requires=requirements("requirements.txt"),
    package_data={"sead.eval": ["templates/*.j2"], "sead.models": ["csrc/*.cpp", "csrc/*.h"]},
    # playwright drives Debian's chromium (scripts/test.sh installs it) in the report test; no browser download.
    extras_require={
        "test": ["pytest>=8", "pytest-asyncio>=0.23", "pytest-timeout>=2.3", "playwright>=1.45", "ruff>=0.8"],
        # The multi-GPU backend (sead/verl_backend). verl-core adds what its trainer imports;
        # never the cpu/vllm/fsdp extras here: they pin another torch build.
        "verl": ["verl[verl-core]==0.9.1"],
    },
    # verl loads the adapter's registrations (agent loop, trainer mode) in every process that imports verl.
    entry_points={"console_scripts": ["sead=sead.cli.main:main"], "verl.plugins": ["sead=sead.verl_backend.plugin"]},
)
