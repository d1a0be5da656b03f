"""The line each training step prints."""

from __future__ import annotations

from sead.run.steps import StepRecord


def fmt(x) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def step_line(step: int, total: int, r: StepRecord) -> str:
    u, t = r.update, r.time
    if not r.dialogues and "imitation_nll" in u:  # the anchor's control: nothing played
        return f"step {step}/{total}  imitation NLL {u['imitation_nll']:.4f}  grad {u['grad_norm']:.3f}  " + (
            f"update {t['update_s']:.0f}s"
        )
    update = (
        "update skipped (no group with differing rewards)"
        if "skipped" in u
        else f"kl {u['kl']:.4f}  entropy {u['entropy']:.3f}  clip {u['clip_frac']:.3f}  grad {u['grad_norm']:.3f}"
    )
    return (
        f"step {step}/{total}  reward {r.reward:.3f}  CR {fmt(r.CR)}  "
        + (f"ACK {fmt(r.ACK)}  " if r.ACK is not None else "")
        + f"turns {fmt(r.turns)}  "
        + (f"branches CR {fmt(b['CR'])}  " if (b := u.get("branches")) else "")
        + f"{update}  gen {r.gen_tokens_per_s:.1f} tok/s  "
        f"rollout {t['rollout_s']:.0f}s"
        + (f" (branches {t['branches_s']:.0f}s)" if "branches_s" in t else "")
        + f" update {t['update_s']:.0f}s"
        + (f"  | controller: {r.controller_update}" if r.controller_update else "")
        + (
            f"  | hack monitors flag: {', '.join(flagged)}"
            if (flagged := (r.hack_monitors or {}).get("flagged"))
            else ""
        )
    )
