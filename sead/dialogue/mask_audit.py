"""Show which tokens of an episode are trained (mask 1) and which are context only, so a user can check."""

from __future__ import annotations

import html
from pathlib import Path

from rich.text import Text

from sead.dialogue.rollout_log import read_rollouts
from sead.run.layout import RunLayout


def find_rollout_file(path: str | Path) -> Path:
    """A rollout JSONL file, or the last step's rollout log of a run directory."""
    path = Path(path)
    if path.is_dir():
        layout = RunLayout(path)
        logs = layout.rollout_files()
        if not logs:
            raise FileNotFoundError(
                f"{path}: no training rollouts in {layout.rollouts_dir.name}/; is this a run directory?"
            )
        return logs[-1]
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file or directory")
    return path


def load_record(path: str | Path, index: int) -> dict:
    records = list(read_rollouts(find_rollout_file(path)))
    if not records:
        raise ValueError(f"{path}: the rollout log is empty")
    if not -len(records) <= index < len(records):
        raise IndexError(f"{path}: episode {index} requested but the log holds {len(records)}")
    record = records[index]
    if not record.get("segments"):
        raise ValueError(f"{path}: episode {index} carries no token ids (written without a tokenizer)")
    return record


def spans(ids: list[int], mask: list[int]) -> list[tuple[bool, list[int]]]:
    """Consecutive runs of equal mask value."""
    out: list[tuple[bool, list[int]]] = []
    for i, m in zip(ids, mask):
        if out and out[-1][0] == bool(m):
            out[-1][1].append(i)
        else:
            out.append((bool(m), [i]))
    return out


def render_terminal(record: dict, tokenizer) -> Text:
    text = Text()
    for n, seg in enumerate(record["segments"]):
        text.append(f"\n=== segment {n} ({sum(seg['mask'])} trained / {len(seg['ids'])} tokens) ===\n", style="bold")
        for trained, ids in spans(seg["ids"], seg["mask"]):
            piece = tokenizer.decode(ids, skip_special_tokens=False)
            text.append(piece, style="bold black on green" if trained else "dim")
    return text


def render_html(record: dict, tokenizer) -> str:
    parts = []
    for n, seg in enumerate(record["segments"]):
        parts.append(f"<h3>segment {n}: {sum(seg['mask'])} trained of {len(seg['ids'])} tokens</h3><pre>")
        for trained, ids in spans(seg["ids"], seg["mask"]):
            cls = "trained" if trained else "masked"
            parts.append(f'<span class="{cls}">{html.escape(tokenizer.decode(ids, skip_special_tokens=False))}</span>')
        parts.append("</pre>")
    outcome = html.escape(f"{record.get('end_reason')} (success={record.get('success')})")
    return (
        "<!doctype html><meta charset='utf-8'><title>SEAD mask audit</title><style>"
        "body{font-family:sans-serif;margin:2em} pre{white-space:pre-wrap;font-size:13px}"
        ".trained{background:#b6f2b6} .masked{color:#777}</style>"
        f"<h2>Mask audit: episode {html.escape(str(record.get('meta', {}).get('episode_id', '')))}, {outcome}</h2>"
        "<p><span class='trained'>green: trained (sampled by the agent)</span> · "
        "<span class='masked'>grey: context only (prompt, user turns, template glue, "
        "a branch's replayed agent turns)</span></p>" + "".join(parts)
    )
