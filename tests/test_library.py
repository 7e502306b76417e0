"""Unit tests of the support library (no kernel)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

import icmlbook
from icmlbook import batch, chapters, session, tiers, widgets


def test_import_is_light():
    code = ("import sys, icmlbook; heavy = [m for m in ('torch', 'matplotlib', 'ipywidgets', "
            "'papermill') if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_lazy_exports_and_unknown_attribute():
    assert icmlbook.start is session.start
    assert icmlbook.ParameterError is tiers.ParameterError
    with pytest.raises(AttributeError):
        icmlbook.no_such_thing  # noqa: B018


# -- tiers -------------------------------------------------------------------
def test_pick_falls_back_to_smaller_tier():
    assert tiers.pick("full", smoke={"n": 1}, default={"n": 2}).n == 2
    assert tiers.pick("smoke", smoke={"n": 1}, default={"n": 2}).n == 1
    with pytest.raises(ValueError, match="no config"):
        tiers.pick("smoke", default={"n": 2})
    with pytest.raises(ValueError, match="unknown tier keys"):
        tiers.pick("smoke", smoke={}, huge={})
    with pytest.raises(ValueError, match="tier must be one of"):
        tiers.pick("huge", smoke={})


def test_seed_everything_is_deterministic():
    import random

    import numpy as np
    import torch

    tiers.seed_everything(7)
    a = (random.random(), np.random.rand(), torch.rand(1).item())
    tiers.seed_everything(7)
    assert a == (random.random(), np.random.rand(), torch.rand(1).item())


def test_configure_torch_cpu_one_thread():
    import torch

    assert tiers.configure_torch("default") == "cpu"
    assert torch.get_num_threads() == 1


def test_freed_memory_is_kept_where_glibc_allows():
    import platform

    applied = tiers.keep_freed_memory()
    if platform.system() == "Linux" and platform.libc_ver()[0] == "glibc":
        assert applied


# -- parameter checks (tiers) ----------------------------------------------
@pytest.mark.parametrize("call, message", [
    (lambda: tiers.check_tier("huge"), "tier must be one of smoke, default, full"),
    (lambda: tiers.check_seed(-1), r"seed must be in \[0, "),
    (lambda: tiers.check_int("n", 2.5), "n must be an integer"),
    (lambda: tiers.check_int("n", True), "n must be an integer"),
    (lambda: tiers.check_int("n", 0, 1, 5), r"n must be in \[1, 5\]; got 0"),
    (lambda: tiers.check_range("a", "x"), "a must be a number"),
    (lambda: tiers.check_range("a", float("nan")), "a must be finite"),
    (lambda: tiers.check_range("a", 0.0, 0.0, 1.0, lo_open=True), r"a must be in \(0.0, 1.0\]"),
    (lambda: tiers.check_range("a", 2.0, None, 1.0), r"a must be in \[-inf, 1.0\]"),
    (lambda: tiers.check_choice("m", "z", ["a", "b"]), "m must be one of 'a', 'b'; got 'z'"),
])
def test_parameter_errors_are_clear(call, message):
    with pytest.raises(tiers.ParameterError, match=message):
        call()


def test_parameter_checks_pass_good_values_silently():
    # they return None, so a validation cell ending in a check shows no output
    assert tiers.check_range("a", 1, 0, 1) is None
    assert tiers.check_int("n", 3, 1, 5) is None
    assert tiers.check_choice("m", "a", ["a"]) is None
    assert tiers.check_tier("smoke") is None and tiers.check_seed(0) is None


# -- session and claims ------------------------------------------------------
def test_claims_enforced_at_default(capsys):
    run = session.start("99_test", tier="default", seed=0, torch=False)
    assert run.claim("good", 0.0123, "<=", 0.015, "a claim that holds", versus="ablation", against="a")
    assert not run.claim("bad", 3.0, ">=", 5.0, "a claim that fails", versus="ablation", against="a")
    with pytest.raises(session.ClaimFailed, match=r"bad \(measured 3, needs >= 5\)"):
        run.verdict()
    out = capsys.readouterr().out
    assert "1/2 paper claims hold (tier default: enforced)" in out
    table = out[out.index("paper claims\n"):]
    assert "0.0123" not in table  # the verdict table prints no measured values


def test_claims_recorded_not_enforced_at_smoke(capsys):
    run = session.start("99_test", tier="smoke", seed=1, torch=False)
    run.claim("bad", float("nan"), "<=", 1.0, "NaN never passes", versus="ablation", against="a")
    run.verdict()  # does not raise
    rec = run.record()
    assert rec["status"] == "recorded" and rec["claims"][0]["passed"] is False
    assert "recorded, not enforced" in capsys.readouterr().out


def test_claim_validation():
    run = session.start("99_test", tier="smoke", seed=0, torch=False)
    with pytest.raises(ValueError, match="op must be one of"):
        run.claim("x", 1, "==", 1, "", versus="ablation", against="a")
    with pytest.raises(ValueError, match="versus must be one of"):
        run.claim("x", 1, "<=", 1, "")
    run.claim("x", 1, "<=", 1, "", versus="ablation", against="a")
    with pytest.raises(ValueError, match="declared twice"):
        run.check("x", 1, "<=", 1, "")
    with pytest.raises(ValueError, match="no claims"):
        session.start("99_test", tier="smoke", seed=0, torch=False).verdict()


def test_record_is_json_and_complete():
    import numpy as np

    run = session.start("99_test", tier="default", seed=3, params={"alpha": np.float64(0.1)},
                        torch=False)
    run.claim("c", np.float32(0.5), "<", 1, "statement", versus="ablation", against="a")
    run.metric("curve", np.arange(3))
    rec = json.loads(json.dumps(run.record()))
    assert rec["chapter"] == "99_test" and rec["tier"] == "default" and rec["seed"] == 3
    assert rec["params"] == {"alpha": 0.1} and rec["metrics"] == {"curve": [0, 1, 2]}
    assert rec["status"] == "passed" and rec["peak_rss_mb"] > 0 and rec["seconds"] >= 0
    assert set(rec["claims"][0]) == {"name", "statement", "value", "op", "threshold", "passed",
                                     "kind", "versus", "against", "strength", "provenance",
                                     "strict", "strict_passed"}
    assert rec["findings"] == [] and rec["headlines"] == [] and rec["verdict"] is None
    assert rec["claims"][0]["kind"] == "paper"


def test_paper_claims_and_checks_print_in_two_sections(capsys):
    run = session.start("99_test", tier="default", seed=0, torch=False)
    run.claim("vs ablation", 0.5, "<=", 1.0, "s", versus="ablation", against="no ingredient")
    run.claim("vs baseline", 2.0, ">=", 1.0, "s", versus="baseline", against="the best rival")
    run.check("identity", 1e-12, "<=", 1e-9, "s")
    run.verdict()
    out = capsys.readouterr().out
    table = out[out.index("paper claims\n"):]
    assert table.index("vs baseline") < table.index("checks\n") < table.index("identity")
    assert "2/2 paper claims and 1/1 checks hold (tier default: enforced)" in out
    assert "[check] identity" in out
    kinds = [(c["kind"], c["versus"]) for c in run.record()["claims"]]
    assert kinds == [("paper", "ablation"), ("paper", "baseline"), ("check", None)]
    with pytest.raises(ValueError, match="versus must be one of"):
        run.claim("x", 1, "<=", 1, "s", versus="rival", against="y")
    with pytest.raises(ValueError, match="against must name"):
        run.claim("y", 1, "<=", 1, "s", versus="baseline")


def test_a_failed_check_is_enforced_like_a_claim():
    run = session.start("99_test", tier="full", seed=0, torch=False)
    run.claim("ok", 1, "<=", 2, "s", versus="baseline", against="b")
    run.check("identity", 1e-3, "<=", 1e-9, "s")
    with pytest.raises(session.ClaimFailed, match="identity"):
        run.verdict()


def test_tier_rules_are_one_table_read_by_the_rest():
    from icmlbook import batch as runner

    assert tiers.TIERS == ("smoke", "default", "full")
    assert [t for t in tiers.TIERS if tiers.RULES[t].enforce_claims] == ["default", "full"]
    assert tiers.RULES["smoke"].exercise_widgets and not tiers.RULES["default"].exercise_widgets
    assert tiers.RULES["full"].cuda and not tiers.RULES["default"].cuda
    assert tiers.RULES["full"].cell_timeout_s is None
    assert runner.RULES is tiers.RULES
    # no import cycle: tiers imports nothing from the package
    src = (Path(tiers.__file__)).read_text()
    assert "from icmlbook" not in src and "import icmlbook" not in src


# -- results and the report --------------------------------------------------
def test_margins_point_inwards():
    from icmlbook.results import margin

    assert margin(0.8, "<=", 1.0) == pytest.approx(0.2)
    assert margin(1.2, "<=", 1.0) == pytest.approx(-0.2)
    assert margin(3.0, ">=", 2.0) == 1.0 and margin(float("nan"), ">=", 2.0) == -float("inf")


def _fake_book(tmp_path, rows):
    import pandas as pd

    root = tmp_path / "book_root"
    (root / "book").mkdir(parents=True)
    (root / "results").mkdir()
    (root / "_toc.yml").write_text("format: jb-book\nroot: book/intro\nparts:\n"
                                   "  - caption: II. Uncertainty\n    chapters:\n"
                                   "      - file: book/ch05_conformal_betting\n"
                                   "      - file: book/ch06_density_softmax\n")
    for stem in ("ch05_conformal_betting", "ch06_density_softmax"):
        (root / "book" / f"{stem}.py").write_text(
            "# %% [markdown]\n# # A title\n\n# %% tags=[\"parameters\"]\ntier = 'default'"
            "  # t\nseed = 0  # s\n")
    pd.DataFrame(rows).to_csv(root / "results" / "ch05_conformal_betting.csv", index=False)
    return root


def _rows(values, kind="paper", name="c", op="<=", threshold=1.0):
    from icmlbook.results import split_of

    return [{"seed": s, "split": split_of(s), "kind": kind,
             "versus": "baseline" if kind == "paper" else None, "name": name, "value": v,
             "op": op, "threshold": threshold, "passed": v <= threshold, "strength": None,
             "provenance": None, "strict": None, "strict_passed": None, "seconds": 1.0,
             "peak_mb": 100.0, "code_hash": "abc"} for s, v in enumerate(values)]


def test_summary_counts_passes_and_worst_margin(tmp_path):
    import pandas as pd

    from icmlbook.results import summary

    df = pd.DataFrame(_rows([0.5] * 9 + [1.2]) + _rows([0.0] * 10, "check", "k", "<=", 1e-9))
    df["strength"] = df["strength"].astype(float)  # empty text read through pandas: NaN
    t = summary(df)
    assert list(t["kind"]) == ["paper", "check"]
    assert list(t["strength"]) == ["-", "-"] and t.iloc[1]["isolates"] == "-"
    paper = t.iloc[0]
    assert paper["passed"] == "9/10" and paper["worst margin"] == pytest.approx(-0.2)
    assert paper["calibration"] == "9/10" and "confirmation" not in paper
    assert paper["max"] == 1.2 and paper["worst margin %"] == pytest.approx(-20.0)


def test_report_renders_swept_and_unswept_chapters(tmp_path):
    from icmlbook import report

    root = _fake_book(tmp_path, _rows([0.5] * 10) + _rows([0.0] * 10, "check", "k", "<=", 1e-9))
    page = report.render(root)
    assert "**1 of 1 paper claims** in 1 swept chapter hold on every committed seed" in page
    assert "**0 reproduced**" in page and "| verdict pending |" in page
    assert "**1 of 1 checks**" in page and "Not swept yet (1 chapter): [06]" in page
    assert page.count("<td style=") == 20 and "icmlbook-heatmap" in page
    assert report.write(root).read_text() == page


def test_results_file_is_checked_before_it_is_written(tmp_path):
    from icmlbook import results
    from icmlbook.chapters import list_chapters
    from icmlbook.batch import tidy

    root = _fake_book(tmp_path, _rows([0.5] * 10))
    ch05 = list_chapters(root)[0]
    df = tidy([])
    with pytest.raises(ValueError, match="need 0-9"):
        results.write_results(ch05, df)


def test_read_record_takes_the_last():
    mime = session.RECORD_MIME
    nb = {"cells": [
        {"cell_type": "code", "outputs": [{"output_type": "display_data",
                                           "data": {mime: {"n": 1}, "text/plain": "x"}}]},
        {"cell_type": "markdown"},
        {"cell_type": "code", "outputs": [{"output_type": "display_data",
                                           "data": {mime: json.dumps({"n": 2})}}]},
    ]}
    assert session.read_record(nb) == {"n": 2}
    assert session.read_record({"cells": []}) is None


# -- progress ----------------------------------------------------------------
def test_progress_headless_prints_a_few_lines(monkeypatch, capsys):
    monkeypatch.setenv("ICMLBOOK_HEADLESS", "1")
    bar = widgets.progress(range(100), desc="train", lines=4)
    total = 0
    for i in bar:
        bar.set_postfix(loss=1.0 / (i + 1))
        total += i
    assert total == sum(range(100))
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 4 and lines[-1].startswith("train: 100/100") and "loss=0.01" in lines[-1]


def test_progress_interactive_uses_tqdm(monkeypatch):
    monkeypatch.delenv("ICMLBOOK_HEADLESS", raising=False)
    bar = widgets.progress(range(3), desc="x")
    assert list(bar) == [0, 1, 2]
    assert type(bar).__module__.startswith("tqdm")


# -- widgets -----------------------------------------------------------------
def test_extremes_of_each_control_kind():
    import ipywidgets as W

    assert widgets.extremes(W.IntSlider(value=3, min=1, max=9)) == [1, 9]
    assert widgets.extremes(W.FloatLogSlider(value=1, base=10, min=-2, max=2)) == [0.01, 100.0]
    assert widgets.extremes(W.Dropdown(options=[("a", 1), ("b", 2)])) == [1, 2]
    assert widgets.extremes(W.Checkbox(value=True)) == [True, False]
    assert widgets.extremes(W.SelectMultiple(options=["x", "y"])) == [("x",), ("x", "y")]


def test_extreme_settings_visit_every_extreme():
    import ipywidgets as W

    controls = {"a": W.IntSlider(min=0, max=5), "m": W.Dropdown(options=["p", "q", "r"])}
    settings = widgets.extreme_settings(controls)
    assert {s["a"] for s in settings} == {0, 5}
    assert {s["m"] for s in settings} == {"p", "q", "r"}


def test_explore_exercises_extremes_and_reports_failures():
    import ipywidgets as W

    seen = []

    def update(n, mode):
        seen.append((n, mode))
        if n == 10 and mode == "b":
            raise ValueError("boom at the corner")

    class Run:
        tier = "smoke"
        widget_seconds = None

    controls = {"n": W.IntSlider(value=5, min=0, max=10), "mode": W.Dropdown(options=["a", "b"])}
    with pytest.raises(RuntimeError, match="boom at the corner"):
        widgets.explore(update, controls, run=Run())
    assert (0, "a") in seen and (10, "b") in seen
    assert seen[0] == (5, "a")  # the default view is drawn first and kept
    assert controls["n"].value == 5 and controls["mode"].value == "a"  # defaults restored

    ok = Run()
    widgets.explore(lambda n, mode: None, {"n": W.IntSlider(value=1, min=0, max=2),
                                            "mode": W.Dropdown(options=["a"])}, run=ok)
    assert ok.widget_seconds is not None


def test_explore_exercise_still_draws_every_figure():
    """Extremes are drawn out of sight without a layout engine, but drawn: an error
    that only appears when a figure is drawn (bad mathtext here) still fails."""
    import ipywidgets as W
    import matplotlib.pyplot as plt

    def update(n):
        fig, ax = plt.subplots(layout="constrained")
        ax.set_title("$\\frac{1}$" if n == 2 else f"n = {n}")
        plt.show()

    class Run:
        tier = "smoke"
        widget_seconds = None

    with pytest.raises(RuntimeError, match="the widget failed at"):
        widgets.explore(update, {"n": W.IntSlider(value=1, min=0, max=2)}, run=Run())
    assert plt.show.__module__ == "matplotlib.pyplot"  # the real show is back
    assert not plt.get_fignums()


def test_skip_iri_grammar_keeps_notebook_validation():
    code = ("from icmlbook.chapters import skip_iri_grammar; skip_iri_grammar(); "
            "import nbformat; nbformat.validate(nbformat.v4.new_notebook()); "
            "import sys; assert sys.modules['rfc3987_syntax'] is None")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parents[1])


def test_explore_live_redraws_on_change(monkeypatch):
    import ipywidgets as W

    monkeypatch.setenv("ICMLBOOK_HEADLESS", "0")
    calls = []
    slider = W.IntSlider(value=2, min=0, max=4)
    widgets.explore(lambda k: calls.append(k), {"k": slider})
    slider.value = 3  # a reader moves the slider: the callback runs again
    assert calls == [2, 3] and slider.continuous_update is False


def test_explore_renders_once_headless_when_not_smoke():
    import ipywidgets as W

    calls = []
    run = type("Run", (), {"tier": "default", "widget_seconds": None})()
    widgets.explore(lambda k: calls.append(k), {"k": W.IntSlider(value=2, min=0, max=4)}, run=run)
    assert calls == [2]


# -- plot and nn -------------------------------------------------------------
def test_use_style_sets_modest_dpi():
    import matplotlib as mpl

    icmlbook.use_style(dpi=70)
    assert mpl.rcParams["figure.dpi"] == 70 and mpl.rcParams["savefig.dpi"] == 70
    icmlbook.use_style()
    assert mpl.rcParams["figure.dpi"] == 100


def test_smoke_sketches_figures_and_the_other_tiers_do_not():
    import matplotlib as mpl

    from icmlbook import plot

    try:
        icmlbook.start("05_conformal_betting", tier="smoke", torch=False)
        icmlbook.use_style()
        assert plot._SKETCH and not mpl.rcParams["figure.constrained_layout.use"]
        plot.sketch_figures(False)
        icmlbook.start("05_conformal_betting", tier="default", torch=False)
        icmlbook.use_style()
        assert mpl.rcParams["figure.constrained_layout.use"]
    finally:
        plot.sketch_figures(False)
        icmlbook.use_style()


def test_method_styles_fixed_and_distinct():
    from icmlbook import plot

    names = [f"m{i}" for i in range(10)]
    styles = icmlbook.method_styles(*names)
    assert list(styles) == names and styles["m0"]["label"] == "m0"
    pairs = {(s["color"], s["linestyle"]) for s in styles.values()}
    assert len(pairs) == 10  # no two methods look the same
    assert [styles[n]["color"] for n in names[:7]] == plot.PALETTE
    # the same method keeps its style however many methods follow it
    assert icmlbook.method_styles("a", "b")["b"] == {**icmlbook.method_styles("a", "b", "c")["b"]}
    assert plot.COLOUR_NAMES[styles["m1"]["color"]] == "red"
    with pytest.raises(ValueError, match="named twice: a"):
        icmlbook.method_styles("a", "b", "a")


@pytest.mark.parametrize("lo, hi", [(0.3, 0.9), (0.05, 2.0), (1e-6, 1.0), (2.0, 3.0)])
def test_log_axis_labels_do_not_overlap(lo, hi):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    icmlbook.use_style()
    fig, ax = plt.subplots(figsize=(3, 2.5))
    ax.plot([0, 1], [lo, hi])
    icmlbook.log_axis(ax, "y")
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    boxes = [t.get_window_extent(renderer) for t in ax.get_yticklabels()
             if t.get_text() and t.get_visible()
             and lo * 0.999 <= t.get_position()[1] <= hi * 1.001]
    assert boxes, "at least one labelled tick in range"
    for a, b in zip(boxes, boxes[1:]):
        assert not a.overlaps(b)
    plt.close(fig)
    with pytest.raises(ValueError, match="axis must be"):
        icmlbook.log_axis(ax, "z")


def test_mlp_shapes():
    import torch

    net = icmlbook.MLP(3, [8, 8], 2, act=torch.nn.Tanh)
    assert net(torch.zeros(5, 3)).shape == (5, 2)
    assert sum(isinstance(m, torch.nn.Tanh) for m in net) == 2



def _train_twice(make_torch, make_ours, steps=25, no_grad_first=(), schedule=None):
    """Train one MLP with torch.optim and its copy with icmlbook.Adam; True if the
    parameters end bit for bit equal."""
    import copy

    import torch

    torch.manual_seed(0)
    a = icmlbook.MLP(5, [16, 16], 3)
    b = copy.deepcopy(a)
    opt_a, opt_b = make_torch(a.parameters()), make_ours(b.parameters())
    x, y = torch.randn(64, 5), torch.randint(0, 3, (64,))
    for step in range(steps):
        for net, opt in ((a, opt_a), (b, opt_b)):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(net(x), y).backward()
            for i, p in enumerate(net.parameters()):
                if i in no_grad_first and step < 5:
                    p.grad = None  # this parameter starts counting its steps later
            torch.nn.utils.clip_grad_norm_(net.parameters(), 0.5)
            if schedule is not None:
                if opt is opt_a:
                    opt.param_groups[0]["lr"] = schedule(step)
                else:
                    opt.lr = schedule(step)
            opt.step()
    return all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


def test_adam_trains_to_the_same_bits_as_torch_optim():
    import math

    import torch

    assert _train_twice(lambda p: torch.optim.Adam(p, lr=3e-3),
                        lambda p: icmlbook.Adam(p, lr=3e-3))
    assert _train_twice(lambda p: torch.optim.Adam(p, lr=3e-3, weight_decay=1e-3),
                        lambda p: icmlbook.Adam(p, lr=3e-3, weight_decay=1e-3),
                        no_grad_first=(1,))
    cosine = lambda s: 3e-3 * 0.5 * (1 + math.cos(math.pi * s / 25))  # noqa: E731
    assert _train_twice(
        lambda p: torch.optim.AdamW(p, lr=3e-3, weight_decay=0.05, betas=(0.5, 0.99)),
        lambda p: icmlbook.Adam(p, lr=3e-3, weight_decay=0.05, betas=(0.5, 0.99),
                                decoupled=True), schedule=cosine)
    # and a broken variant is caught: plain L2 decay is not AdamW's decoupled decay
    assert not _train_twice(lambda p: torch.optim.AdamW(p, lr=3e-3, weight_decay=0.05),
                            lambda p: icmlbook.Adam(p, lr=3e-3, weight_decay=0.05))


def test_adam_does_not_import_dynamo():
    code = ("import sys, torch, icmlbook\n"
            "p = torch.nn.Parameter(torch.ones(3)); p.grad = torch.ones(3)\n"
            "icmlbook.Adam([p]).step()\n"
            "assert 'torch._dynamo' not in sys.modules\n")
    subprocess.run([sys.executable, "-c", code], check=True)


# -- chapters ----------------------------------------------------------------
def test_parse_parameters_and_coerce():
    src = "tier = 'default'  # which tier\nseed = 0  # the seed\nlr = 0.1\nflag = True  # f\n"
    p = chapters.parse_parameters(src)
    assert list(p) == ["tier", "seed", "lr", "flag"]
    assert p["tier"].comment == "which tier" and p["lr"].default == 0.1
    assert batch.coerce("2", 0.1) == 2.0 and isinstance(batch.coerce("2", 0.1), float)
    assert batch.coerce("false", True) is False
    assert batch.coerce("3", "default") == "3"
    assert batch.coerce("abc", 1) == "abc"  # left for the chapter's check to reject
    with pytest.raises(ValueError, match="literal default"):
        chapters.parse_parameters("x = compute()")
    above = chapters.parse_parameters("a = 1  # one\n\n# a long comment\n# in two lines\nb = 2\n"
                                      "c = 3\n")
    assert above["a"].comment == "one" and above["b"].comment == "a long comment in two lines"
    assert above["c"].comment == ""


def test_resolve_chapters():
    chs = chapters.list_chapters()
    ch05 = chapters.resolve("5", chs)
    assert ch05.slug == "conformal_betting"
    for name in ("05", "conformal_betting", "05_conformal_betting", "ch05_conformal_betting",
                 "book/ch05_conformal_betting.py"):
        assert chapters.resolve(name, chs) is ch05
    with pytest.raises(LookupError, match="valid chapters: .*05 \\(conformal_betting\\)"):
        chapters.resolve("99", chs)


def test_validate_runs_the_chapters_own_checks():
    ch05 = chapters.resolve("5", chapters.list_chapters())
    assert batch.validate(ch05, {"alpha": "0.2"}) == {"alpha": 0.2}
    with pytest.raises(tiers.ParameterError, match="no parameter 'nope'"):
        batch.validate(ch05, {"nope": 1})
    with pytest.raises(tiers.ParameterError, match=r"alpha must be in \(0.0, 0.5\]"):
        batch.validate(ch05, {"alpha": "0.9"})


def test_runner_clean_strips_noise():
    import nbformat

    from icmlbook.batch import clean

    nb = nbformat.v4.new_notebook()
    nb.metadata["papermill"] = {"x": 1}
    cell = nbformat.v4.new_code_cell("1")
    cell.metadata.update({"papermill": {}, "execution": {}, "tags": []})
    keep = nbformat.v4.new_code_cell("2")
    keep.metadata["tags"] = ["parameters"]
    nb.cells = [cell, keep]
    clean(nb)
    assert "papermill" not in nb.metadata and dict(cell.metadata) == {}
    assert keep.metadata["tags"] == ["parameters"]


def test_bench_report_flags_over_budget():
    row = {"chapter": "05 x", "tier": "smoke", "ok": True, "seconds": 20.0, "budget": 15.0,
           "peak_mb": 200.0, "widget_s": 0.3, "nb_mb": 0.3, "committed_mb": 0.3,
           "claims": "5/5", "error": None}
    assert batch._over_budget(row)
    assert not batch._over_budget({**row, "seconds": 10.0})
    assert batch._over_budget({**row, "seconds": 10.0, "peak_mb": 2000.0})
    assert batch._over_budget({**row, "seconds": 10.0, "committed_mb": 2.0})
    lines = batch._bench_table([row, {**row, "seconds": 10.0}])
    assert lines[-2].endswith("| no |") and lines[-1].endswith("| yes |")


def test_code_statements_ignore_layout_not_code():
    def fp(source):
        return "\n".join(chapters.code_statements(source))
    a = "x = f(1, 2)  # Eq. 3\ny = 'ab'"
    assert fp(a) == fp("# Eq. 3\nx = f(\n    1,\n    2,\n)\ny = ('a'\n     \"b\")")
    assert fp(a) != fp("x = f(1, 3)\ny = 'ab'")
    assert fp(a) != fp("x = f(1, 2)\ny = 'abc'")
    assert fp("%matplotlib inline") == "%matplotlib inline"  # not Python: as written
    assert "type_params" not in fp("def g():\n    pass")  # same text on every Python


def test_code_hash_ignores_where_the_code_is_cut_into_cells(tmp_path):
    from icmlbook.chapters import Chapter

    def chapter(cells):
        py = tmp_path / "book" / "ch99_x.py"
        py.parent.mkdir(exist_ok=True)
        py.write_text("".join(f"# %%\n{c}\n\n" for c in cells))
        return Chapter("99", "x", "I. Test", tmp_path)

    one = chapter(["x = 1\ny = f(x)  # Eq. 2\nz = g(y)"]).code_hash
    assert one == chapter(["x = 1\n# Eq. 2\ny = f(x)", '"""prose"""\nz = g(y)']).code_hash
    assert one != chapter(["x = 1\ny = f(x)\nz = g(x)"]).code_hash
    assert one != chapter(["x = 1\nz = g(y)\ny = f(x)"]).code_hash


def test_code_statements_ignore_docstrings():
    def fp(source):
        return "\n".join(chapters.code_statements(source))
    assert fp('def f():\n    """One line."""\n    return 1') == fp(
        'def f():\n    """Two\n    lines."""\n    return 1')
    assert fp('def f():\n    """Doc."""') == fp("def f():\n    pass")


def _fresh_python(code):
    """Run ``code`` in a new interpreter at the repository root (so that what it imports
    can be checked in sys.modules); its stdout, after asserting it exited cleanly."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=Path(__file__).parents[1])
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_across_seeds_at_smoke_prints_the_table_without_pandas(tmp_path):
    # the smoke tier keeps to its budget: the table is text and pandas is never imported
    rows = _rows([0.5] * 9 + [1.2]) + _rows([0.0] * 10, "check", "k", "<=", 1e-9)
    root = _fake_book(tmp_path, rows)
    code = ("import sys; from types import SimpleNamespace; import icmlbook; "
            "t = icmlbook.across_seeds(SimpleNamespace(chapter='05_conformal_betting', "
            f"tier='smoke'), root={str(root)!r}); "
            "assert 'pandas' not in sys.modules, 'pandas imported'; "
            "print('PASSED', t[0]['passed'], t[1]['kind'])")
    out = _fresh_python(code)
    assert "PASSED 9/10 check" in out
    assert "strip plot of these values is drawn at the default tier" in out
    table = out.splitlines()[1:4]  # header, the paper claim, the check
    assert table[0].split()[:3] == ["kind", "claim", "isolates"]
    assert table[1].startswith("paper  c ") and "9/10" in table[1]


def test_digits_are_scikit_learns_without_importing_it():
    code = ("import sys, numpy as np, icmlbook; X, y = icmlbook.digits(); "
            "assert 'sklearn' not in sys.modules; "
            "from sklearn.datasets import load_digits; X2, y2 = load_digits(return_X_y=True); "
            "assert np.array_equal(X, X2) and np.array_equal(y, y2); "
            "assert X.dtype == X2.dtype and y.dtype == y2.dtype; print('EQUAL', X.shape)")
    assert "EQUAL (1797, 64)" in _fresh_python(code)


def test_seconds_in_turns_alternates_takes_medians_and_keeps_the_rng():
    import torch

    calls, ticks = [], iter(range(100))
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    out = icmlbook.seconds_in_turns(
        {"a": lambda: calls.append("a") or torch.rand(5),
         "b": lambda: calls.append("b")},
        reps=3, clock=lambda: next(ticks) ** 2)
    assert calls == ["a", "b"] * 3
    # clock readings 0, 1, 4, 9, 16, ...: "a" took 1, 9, 17 and "b" 5, 13, 21
    assert out == {"a": 9.0, "b": 13.0}
    assert torch.equal(torch.rand(3), expected)  # the global RNG is where it was


# -- named streams, findings, headlines and the verdict rule ------------------------------
def test_named_streams_are_reproducible_and_independent():
    from icmlbook import session

    a = session.start("99_test", tier="smoke", seed=3, torch=False)
    b = session.start("99_test", tier="smoke", seed=4, torch=False)
    c = session.start("98_other", tier="smoke", seed=3, torch=False)
    assert a.rng("data").random() == a.rng("data").random()
    assert a.stream_seed("data") != a.stream_seed("init")
    assert a.stream_seed("data") != b.stream_seed("data") != c.stream_seed("data")
    assert 0 <= a.stream_seed("x") < 2**63


def test_findings_and_the_verdict_rule(capsys):
    from icmlbook import session
    from icmlbook.verdicts import combine, grade

    run = session.start("99_test", tier="default", seed=0, torch=False)
    run.claim("ratio", 0.8, "<=", 0.9, "s", versus="ablation", against="a",
              strength="superiority", provenance="a priori")
    run.claim("tie", 1.02, "<=", 1.05, "s", versus="baseline", against="b",
              strength="non-inferiority", provenance="calibrated", strict=1.0)
    with pytest.raises(ValueError, match="strict"):
        run.claim("x", 1, "<=", 2, "s", versus="baseline", against="b",
                  strength="non-inferiority")
    assert run.finding("beats UCB1", 1.3, "<=", 1.0, paper="p", shows="s") is False
    run.headline("h1", "the paper says", "Table 1", claims=["ratio"])
    run.headline("h2", "the paper says", "Fig. 2", claims=["tie"], findings=["beats UCB1"])
    run.verdict()
    out = capsys.readouterr().out
    assert "findings (recorded, not enforced)" in out and "PARTLY" in out
    rec = run.record()
    assert rec["claims"][1]["strict_passed"] is False and rec["status"] == "passed"
    assert [h["verdict"] for h in rec["verdict"]["headlines"]] == ["reproduced", "partly"]
    h = {"name": "h", "testable": True, "claims": [], "findings": ["f"]}
    assert grade(h, {}, {"f": False})[0] == "not reproduced"
    assert grade(h, {}, {"f": None})[0] == "partly"
    verdict, reason = grade(h, {}, {"f": True})  # findings alone never reproduce a headline
    assert verdict == "partly" and "findings only" in reason
    assert grade({**h, "testable": False, "why": "w"}, {}, {})[0] == "not testable"
    assert combine(["reproduced", "not testable"]) == "reproduced"
    assert combine(["not reproduced", "not testable"]) == "not reproduced"
    assert combine(["reproduced", "not reproduced"]) == "partly"


def test_solution_check_asserts_at_every_tier(capsys):
    from icmlbook import solution_check

    solution_check("ratio", 2.1, ">=", 2.0)
    assert "solution check holds" in capsys.readouterr().out
    with pytest.raises(AssertionError, match="ratio"):
        solution_check("ratio", 1.9, ">=", 2.0)


def test_confirmation_seeds_and_findings_are_summarised_apart():
    import pandas as pd

    from icmlbook.results import summary, verdict_across

    rows = _rows([0.5] * 20) + _rows([1.5] * 5 + [0.5] * 15, "finding", "f")
    t = summary(pd.DataFrame(rows))
    assert list(t["kind"]) == ["paper", "finding"]
    assert t.iloc[0]["calibration"] == "10/10" and t.iloc[0]["confirmation"] == "10/10"
    assert t.iloc[1]["calibration"] == "5/10"
    meta = {"headlines": [{"name": "h", "testable": True, "claims": ["c"], "findings": ["f"]}]}
    v = verdict_across(pd.DataFrame(rows).to_dict("records"), meta)
    assert v["paper"] == "partly" and "some seeds" in v["headlines"][0]["reason"]


# -- the package's map: three groups, imports one way, no cycle ---------------------------
def _imports():
    import ast

    pkg = Path(icmlbook_dir())
    graph = {}
    for path in sorted(pkg.glob("*.py")):
        if path.stem == "__init__":
            continue
        deps = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("icmlbook."):
                deps.add(node.module.split(".")[1])
            elif isinstance(node, ast.Import):
                deps |= {a.name.split(".")[1] for a in node.names
                         if a.name.startswith("icmlbook.")}
        graph[path.stem] = deps - {path.stem}
    return graph


def icmlbook_dir():
    import icmlbook

    return Path(icmlbook.__file__).parent


def test_imports_point_from_tools_to_models_to_kit_without_cycles():
    import icmlbook

    graph = _imports()
    group = {m: g for g, mods in icmlbook.GROUPS.items() for m in mods}
    assert set(group) == set(graph), "every module belongs to exactly one group"
    order = list(icmlbook.GROUPS)
    for mod, deps in graph.items():
        for dep in deps:
            assert order.index(group[dep]) <= order.index(group[mod]), (
                f"{mod} ({group[mod]}) imports {dep} ({group[dep]}): an upward import")
    seen, stack = set(), []

    def visit(m):
        assert m not in stack, f"import cycle: {' -> '.join(stack + [m])}"
        if m in seen:
            return
        stack.append(m)
        for d in graph[m]:
            visit(d)
        stack.pop()
        seen.add(m)

    for m in graph:
        visit(m)


def test_the_readme_map_matches_the_code():
    import re

    import icmlbook

    readme = (Path(icmlbook_dir()).parent / "README.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| (kit|models|tools) \| `(\w+)` \|", readme, re.M)
    assert sorted(rows) == sorted((g, m) for g, mods in icmlbook.GROUPS.items() for m in mods)
