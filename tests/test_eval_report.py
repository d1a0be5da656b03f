"""report.html in headless Chromium: the viewer renders, filtering works, dialogue markup stays text.
Also `sead report RUN_DIR` on a tiny training run."""

import json
import shutil
from contextlib import contextmanager

from sead.cli.main import main
from sead.dialogue import Episode, read_rollouts
from sead.eval.report import write_eval_report

EVIL = "<script>window.__pwned = 1</script><b>bold?</b>"


@contextmanager
def chromium_page(path):
    """A headless Chromium page on a local file. Opened only after the asyncio work of a test is done:
    Playwright's sync API keeps an event loop running in this thread while it is open."""
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium")
    assert chromium, "Debian's chromium is missing: scripts/test.sh installs it (apt-get install chromium)"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page()
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(path.as_uri())
        yield page
        assert not errors, errors
        browser.close()


def test_viewer_renders_filters_and_keeps_script_as_text(tmp_path, restaurant):
    out = tmp_path / "ev"
    assert (
        main(["eval", "scripted:reference", f"eval.out_dir={out}", f"eval.testset_dir={tmp_path}", "eval.limit=12"])
        == 0
    )
    folder = out / "scripted-reference"
    results = json.loads((folder / "results.json").read_text())
    episodes = [Episode.from_dict(r) for r in read_rollouts(folder / "dialogues.jsonl")]
    first = episodes[0]
    first.turns[0].user.reply = EVIL  # as if the simulator had written markup
    write_eval_report(folder, "scripted-reference", results, episodes, restaurant.space)
    html = (folder / "report.html").read_text()
    assert EVIL not in html  # never raw in the page
    kinds = results["funnel"]["concerns"]  # the reference agent meets voiced concerns in 12 calls
    assert kinds and "Concerns by kind" in html
    for kind, c in kinds.items():
        assert f"<td>{kind}</td>" in html and f"{c['answered']} / {c['voiced']} (" in html

    with chromium_page(folder / "report.html") as page:
        check_viewer(page, episodes)


def check_viewer(page, episodes):
    first = episodes[0]
    page.wait_for_selector(".dialogue-row")
    successes = sum(e.success for e in episodes)
    assert page.locator(".dialogue-row").count() == 12
    assert page.inner_text("#filter-count") == "12 of 12 dialogues"
    page.select_option("#filter-outcome", "success")
    assert page.locator(".dialogue-row").count() == successes
    page.select_option("#filter-outcome", "failure")
    assert page.locator(".dialogue-row").count() == 12 - successes
    page.select_option("#filter-outcome", "")
    coop = str(first.profile.values["cooperation"])
    page.select_option("#filter-dim-cooperation", coop)
    assert page.locator(".dialogue-row").count() == sum(str(e.profile.values["cooperation"]) == coop for e in episodes)
    behaviour = first.profile.behaviours[0]
    page.select_option("#filter-dim-cooperation", "")
    page.select_option("#filter-behaviour", behaviour)
    assert page.locator(".dialogue-row").count() == sum(behaviour in e.profile.behaviours for e in episodes)
    page.select_option("#filter-behaviour", "")
    page.locator(".dialogue-row").first.click()  # the first dialogue, whose user reply holds the markup
    assert page.locator(".user-text").first.inner_text() == EVIL
    assert page.evaluate("window.__pwned") is None and page.locator("#dialogue-detail b").count() == 0
    assert page.locator(".plots img").count() == 5  # 2 heat maps, CR per value, end reasons, funnel


def test_training_report_draws_the_curves_of_a_run(tmp_path):
    from sead.config import load_config
    from sead.trainer.loop import train

    run = train(load_config(["preset=tiny", "trainer.iterations=2", f"run_dir={tmp_path / 'run'}"]))
    assert main(["report", str(run)]) == 0
    with chromium_page(run / "report.html") as page:
        titles = page.locator(".plots figcaption").all_inner_texts()
        assert {
            "reward",
            "training CR",
            "validation CR, ACK and CAR (95% CI)",
            "controller: trust sampling shares",
        } <= set(titles)
        rows = page.locator("table.summary tr").count()
        assert rows == 1 + 3  # header + validation before training and after each of the 2 iterations
        assert page.locator(".dialogue-row").count() > 0
    assert main(["report", str(tmp_path)]) == 2  # not a run directory: a clear error


def test_report_opens_with_a_readable_setup_and_plots_show_zero_cr(tmp_path):
    from sead.eval.plots import cr_by_value_figure

    out = tmp_path / "ev"
    assert (
        main(["eval", "scripted:sop_ignoring", f"eval.out_dir={out}", f"eval.testset_dir={tmp_path}", "eval.limit=6"])
        == 0
    )
    folder = out / "scripted-sop_ignoring"
    results = json.loads((folder / "results.json").read_text())
    assert results["metrics"]["CR"]["mean"] == 0.0  # the SOP-ignoring floor completes nothing here
    with chromium_page(folder / "report.html") as page:
        setup = dict(r.split("\t", 1) for r in page.locator("table.setup tr").all_inner_texts())
        assert set(setup) >= {"agent", "decoding", "user simulator", "test set", "dialogue limits", "dialogues"}
        assert setup["user simulator"].startswith("scripted: rules ")
        assert "6 of " in setup["test set"] and results["settings"]["testset"]["hash"] in setup["test set"]
        assert "{" not in page.inner_text("body").split("Metrics")[0]  # no raw JSON above the metrics
        assert "format error" not in setup["dialogue limits"]  # the agent's feedback text stays in results.json
        assert page.locator("figcaption", has_text="SOP funnel").count() == 1  # the scripted user reports stages
        monitors = page.locator("table.summary", has_text="flagged").inner_text()
        assert "words_per_reply" in monitors and results["hack_monitors"]["flagged"]  # the floor is flagged
        lost = page.locator("table.summary", has_text="share of failed").locator("tr").all_inner_texts()[1:]
        lost_to = results["funnel"]["lost_to"]
        assert {r.split("\t")[0]: int(r.split("\t")[1]) for r in lost} == lost_to
        assert sum(lost_to.values()) >= results["counts"]["failed"] == 6  # every lost call is placed at least once
    fig = cr_by_value_figure(results["cr_by_state"])
    for ax, dim in zip(fig.axes, results["cr_by_state"]["dimensions"]):
        labels = [t.get_text() for t in ax.texts]
        per_value = results["cr_by_state"]["per_value"][dim]
        assert labels == [f"0.00\nn={s['n']}" for s in per_value.values()]  # every zero is drawn and labelled
        assert ax.get_ylim()[0] < 0  # the zero line is inside the axes, not on its edge
