"""Reports a person reads: an evaluation opens with its findings and a glossary; several models get a chart and a
paired test per pair; a training report shows every validation point and says plainly when nothing trained."""

import html
import json
import re

from sead.cli.main import main
from sead.dialogue.rollout_log import read_rollouts
from sead.metrics import GLOSSARY
from sead.stats import mcnemar_exact, wilson_interval


def _text(path) -> str:
    """The page's text as a reader sees it: tags dropped, entities decoded."""
    return html.unescape(re.sub(r"<[^>]+>", " ", path.read_text()))


def _eval(tmp_path, *agents):
    argv = ["eval", *agents, "eval.limit=6", f"eval.out_dir={tmp_path / 'ev'}", f"eval.testset_dir={tmp_path}"]
    assert main(argv) == 0
    return tmp_path / "ev"


def test_an_evaluation_opens_with_its_findings_and_a_glossary(tmp_path):
    folder = _eval(tmp_path, "scripted:reference") / "scripted-reference"
    results = json.loads((folder / "results.json").read_text())
    page = (folder / "report.html").read_text()
    c = results["counts"]
    lo, hi = wilson_interval(c["completed"], c["evaluated"])
    first = f"scripted-reference completed {c['completed']} of {c['evaluated']} dialogues with the scripted user: "
    headline = page.split('<div class="headline">')[1].split("</div>")[0]
    assert html.unescape(headline).startswith(f"<p>{first}CR {c['completed'] / c['evaluated']:.1%} (95% CI {lo:.1%}")
    assert "SOP stages on average" in headline  # the scripted user reports what it acknowledged
    assert page.index('class="headline"') < page.index('class="glossary"') < page.index("<h2>Setup</h2>")
    text = _text(folder / "report.html")
    for name in ("CR", "ACK", "CAR", "UPA", "95% CI"):
        assert f"<th>{name}</th>" in page.split('<table class="glossary">')[1].split("</table>")[0]
    assert GLOSSARY["CR"] in text


def test_models_compared_get_a_chart_and_an_exact_paired_test(tmp_path):
    out = _eval(tmp_path, "scripted:reference", "scripted:sop_ignoring")
    done = {
        name: {r["meta"]["episode_id"]: r["success"] for r in read_rollouts(out / name / "dialogues.jsonl")}
        for name in ("scripted-reference", "scripted-sop_ignoring")
    }
    a, b = done.values()
    only_a = sum(a[k] and not b[k] for k in a)
    only_b = sum(b[k] and not a[k] for k in a)
    md = (out / "comparison.md").read_text().splitlines()
    at = md.index("Paired tests: the same test dialogues, model A against model B (exact McNemar test on CR)")
    row = [cell.strip() for cell in md[at + 4].strip("|").split("|")]
    assert row[:2] == ["scripted-reference", "scripted-sop_ignoring"]
    assert row[2:7] == [
        str(len(a)),
        str(sum(a[k] and b[k] for k in a)),
        str(only_a),
        str(only_b),
        str(sum(not a[k] and not b[k] for k in a)),
    ]
    assert row[7] == f"{100 * (only_a - only_b) / len(a):+.1f}" and row[8] == f"{mcnemar_exact(only_a, only_b):.3g}"
    assert only_a > 0  # the reference completes calls the SOP-ignoring floor loses: a difference to test
    assert (out / "comparison.png").stat().st_size > 0
    page = (out / "comparison.html").read_text()
    assert "data:image/png;base64," in page and 'class="glossary"' in page


def test_a_run_that_made_no_training_step_says_so_and_shows_base_and_warm_up(tmp_path):
    run = tmp_path / "run"
    argv = [
        "train",
        "preset=tiny",
        "trainer.iterations=0",  # measure only: validation, no RL step
        "trainer.warmup.dialogues=2",
        "trainer.warmup.max_turns=2",
        "trainer.validation.before_warmup=true",
        f"run_dir={run}",
    ]
    assert main(argv) == 0
    assert main(["report", str(run)]) == 0
    page = (run / "report.html").read_text()
    headline = html.unescape(page.split('<div class="headline">')[1].split("</div>")[0])
    assert "This run made no training step" in headline and "warm-up" in headline
    table = page.split("Validation at every point")[1].split("</table>")[0]
    points = re.findall(r"<tr><td>([^<]+)</td>", table)
    assert points == ["base model", "after warm-up"]
    assert "<th>ACK</th>" in table  # the user side, beside CR
    assert "validation CR, ACK and CAR (95% CI)" in page
