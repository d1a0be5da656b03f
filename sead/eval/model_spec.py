"""What `sead eval MODEL` accepts, resolved before any dialogue runs so a typo fails in a second, not an hour in.

RUN_DIR                       a training run: its newest complete checkpoint
RUN_DIR/checkpoints/step_N    one checkpoint of a run
/path/to/hf_model             any local HF model folder (config.json + weights)
openai:MODEL@URL              an OpenAI-compatible chat endpoint (API baselines), e.g.
                              openai:gpt-4o@https://api.openai.com/v1
scripted:reference            the scripted SOP-following agent (an upper reference; no model)
scripted:sop_ignoring         the scripted agent that ignores the SOP (a floor)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from sead.errors import SEADInputError
from sead.policy.registry import SCRIPTED_AGENTS

WEIGHT_FILES = ("*.safetensors", "pytorch_model*.bin")


@dataclass(frozen=True)
class ModelSpec:
    kind: str  # hf | openai | scripted
    spec: str  # as the user wrote it
    name: str  # folder name of its results and row label of the comparison table
    path: Path | None = None
    model: str | None = None
    url: str | None = None

    def to_dict(self) -> dict:
        return {
            "kind": self.kind,
            "spec": self.spec,
            "name": self.name,
            "path": str(self.path) if self.path else None,
            "model": self.model,
            "url": self.url,
        }


def parse_model_spec(spec: str) -> ModelSpec:
    if spec.startswith("openai:"):
        model, sep, url = spec[len("openai:") :].rpartition("@")
        if not sep or not model or not re.match(r"https?://", url):
            raise SEADInputError(f"bad endpoint spec {spec!r}; write openai:MODEL@http://host:port/v1")
        return ModelSpec("openai", spec, _safe(model), model=model, url=url.rstrip("/"))
    if spec.startswith("scripted:"):
        which = spec[len("scripted:") :]
        if which not in SCRIPTED_AGENTS:
            raise SEADInputError(f"unknown scripted agent {which!r}; choose one of {', '.join(SCRIPTED_AGENTS)}")
        return ModelSpec("scripted", spec, f"scripted-{which}", model=which)
    path = Path(spec).expanduser()
    if not path.exists():
        raise SEADInputError(
            "no such model: not a folder, and not openai:MODEL@URL or scripted:NAME (see `sead eval --help`)", path=path
        )
    folder, name = _model_folder(path.resolve())
    return ModelSpec("hf", spec, _safe(name), path=folder)


def _model_folder(path: Path) -> tuple[Path, str]:
    """The HF folder to load and a readable name, for a run, a checkpoint or a plain model folder."""
    from sead.run.checkpoints import checkpoint_problem, latest_checkpoint
    from sead.run.layout import CheckpointFolder, RunLayout

    if RunLayout(path).checkpoints_dir.is_dir():
        found = latest_checkpoint(path)
        if found is None:
            raise SEADInputError("this run holds no complete checkpoint (nothing to evaluate yet)", path=path)
        return _checked(CheckpointFolder(found[0]).model), f"{path.name}-{found[0].name}"
    if CheckpointFolder(path).model.is_dir():  # one checkpoint folder, held to its manifest as a resume holds it
        problem = checkpoint_problem(path)
        if problem is not None:
            raise SEADInputError(
                f"this checkpoint does not verify: {problem}. Name the run directory to evaluate its newest "
                "checkpoint that does, or its model/ folder to load those weights as they are",
                path=path,
            )
        return _checked(CheckpointFolder(path).model), f"{path.parent.parent.name}-{path.name}"
    return _checked(path), path.name


def _checked(folder: Path) -> Path:
    if not (folder / "config.json").is_file():
        raise SEADInputError("not an HF model folder (no config.json)", path=folder)
    if not any(next(folder.glob(pattern), None) for pattern in WEIGHT_FILES):
        raise SEADInputError(
            "the folder has a config.json but no weights (*.safetensors or pytorch_model*.bin)", path=folder
        )
    return folder


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "model"
