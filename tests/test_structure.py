"""Structure of the book: table of contents, pairs in sync, committed notebooks clean."""
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import jupytext
import nbformat
import pytest
import yaml
from helpers import BOOK, ROOT

from icmlbook.chapters import list_chapters
from icmlbook.session import read_record

# Fixed chapter numbers and slugs (the design; see README's chapter table).
SLUGS = {
    "01": "representation_universality", "02": "smooth_tchebycheff",
    "03": "riemannian_descent", "04": "federated_bandits", "05": "conformal_betting",
    "06": "density_softmax", "07": "bilevel_positions", "08": "skew_kl_distillation",
    "09": "degeneration_free_rl", "10": "score_matching_gans", "11": "diffusion_backdoors",
    "12": "efficient_gan_editing", "13": "modality_alignment",
    "14": "causal_time_series_adaptation", "15": "multitask_grouping", "16": "marl_influence",
    "17": "in_context_posterior_sampling", "18": "routing_moe", "19": "spike_distance",
}
PARTS = {"I": ("01", "04"), "II": ("05", "06"), "III": ("07", "09"), "IV": ("10", "12"),
         "V": ("13", "15"), "VI": ("16", "18"), "VII": ("19", "19")}
MAX_NOTEBOOK_BYTES = int(1.5 * 2**20)
NOISE_KEYS = {"papermill", "execution", "ExecuteTime"}

SOURCES = sorted(BOOK.glob("ch*.py"))
CHAPTERS = list_chapters(ROOT)
IDS = [c.stem for c in CHAPTERS]


def test_toc_and_sources_agree():
    in_toc = {c.stem for c in CHAPTERS}
    on_disk = {p.stem for p in SOURCES}
    assert in_toc == on_disk, f"only in _toc.yml: {in_toc - on_disk}; only in book/: {on_disk - in_toc}"
    assert len(IDS) == len(set(IDS))
    assert CHAPTERS, "no chapters"


def test_numbers_slugs_and_parts_are_the_fixed_ones():
    for ch in CHAPTERS:
        assert SLUGS.get(ch.number) == ch.slug, f"{ch.stem}: chapter {ch.number} is {SLUGS.get(ch.number)}"
        roman = ch.part.split(".")[0]
        lo, hi = PARTS[roman]
        assert lo <= ch.number <= hi, f"{ch.stem} is listed under part {ch.part}"
    numbers = [c.number for c in CHAPTERS]
    assert numbers == sorted(numbers), "chapters out of order in _toc.yml"


def test_every_notebook_has_its_source():
    for nb in BOOK.glob("ch*.ipynb"):
        assert nb.with_suffix(".py").exists(), f"{nb.name} has no .py source"


@pytest.mark.parametrize("ch", CHAPTERS, ids=IDS)
def test_pair_in_sync(ch):
    assert ch.ipynb.exists(), f"{ch.ipynb.name} is missing: run `make execute CH={ch.number}`"
    src = jupytext.read(ch.py)
    nb = nbformat.read(ch.ipynb, as_version=4)
    a = [(c.cell_type, c.source.strip()) for c in src.cells]
    b = [(c.cell_type, c.source.strip()) for c in nb.cells]
    assert a == b, f"{ch.stem}: .py and .ipynb differ: re-run `make execute CH={ch.number}`"
    tags_a = [c.metadata.get("tags", []) for c in src.cells]
    tags_b = [c.metadata.get("tags", []) for c in nb.cells]
    assert tags_a == tags_b, f"{ch.stem}: cell tags differ between .py and .ipynb"


@pytest.mark.parametrize("ch", CHAPTERS, ids=IDS)
def test_parameters_and_validation_cells(ch):
    params = ch.parameters
    assert params["tier"].default == "default" and params["seed"].default == 0
    for p in params.values():
        assert p.comment, f"{ch.stem}: parameter {p.name} has no one-line comment"
    assert ch.cell("validate") is not None, f"{ch.stem}: no cell tagged 'validate'"
    first_code = next(c for c in ch.notebook.cells if c.cell_type == "code")
    assert "parameters" in first_code.metadata.get("tags", []), "parameters must be the first code cell"


@pytest.mark.parametrize("ch", CHAPTERS, ids=IDS)
def test_kernelspec(ch):
    for nb in (jupytext.read(ch.py), nbformat.read(ch.ipynb, as_version=4)):
        assert nb.metadata.get("kernelspec", {}).get("name") == "python3"


# The HTML book's code column holds about 88 characters at 1280 px; book/ruff.toml
# sets that limit for the chapters' code cells.
@pytest.mark.parametrize("ch", CHAPTERS, ids=IDS)
def test_code_lines_fit_the_html_code_column(ch):
    ruff = Path(sys.executable).with_name("ruff")
    out = subprocess.run([str(ruff if ruff.exists() else "ruff"), "check", "--select", "E501",
                          "--output-format", "concise", "--no-cache", str(ch.ipynb)],
                         cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


# One colour per method for a whole chapter (CONVENTIONS, Figures): a chapter declares
# its methods once with icmlbook.method_styles and draws them from that; other marks are
# black, white or grey.
COLOUR_KEYWORDS = {"color", "c", "colors", "facecolor", "edgecolor", "mfc", "mec",
                   "markerfacecolor", "markeredgecolor", "ecolor"}
NEUTRAL = re.compile(r"^(k|black|w|white|none|grey|gray|0?\.\d+|1(\.0)?)$")


def _literal_colours(source):
    """(line, colour) of every literal colour in code: colour keywords given a string,
    and matplotlib format strings naming a cycle colour ("C1--")."""
    import ast

    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        for kw in node.keywords:
            if kw.arg in COLOUR_KEYWORDS and isinstance(kw.value, ast.Constant) \
                    and isinstance(kw.value.value, str):
                found.append((node.lineno, kw.value.value))
        for arg in node.args:
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str) \
                    and re.fullmatch(r"C\d[-.:o^sv*+x]*", arg.value):
                found.append((node.lineno, arg.value))
    return found


@pytest.mark.parametrize("ch", CHAPTERS, ids=IDS)
def test_figures_take_colours_from_the_chapter_style(ch):
    code = [c.source for c in ch.notebook.cells if c.cell_type == "code"]
    assert any("method_styles(" in src for src in code), "declare the methods' styles"
    bad = [(i, line, colour) for i, src in enumerate(code)
           for line, colour in _literal_colours(src) if not NEUTRAL.match(colour)]
    assert not bad, f"literal colours (code cell, line, colour): {bad}"


@pytest.mark.parametrize("ch", CHAPTERS, ids=IDS)
def test_committed_notebook_is_clean_executed_and_small(ch):
    raw = ch.ipynb.read_bytes()
    assert len(raw) <= MAX_NOTEBOOK_BYTES, f"{ch.ipynb.name} is {len(raw) / 2**20:.2f} MB"
    nb = nbformat.read(ch.ipynb, as_version=4)
    nbformat.validate(nb)
    assert "papermill" not in nb.metadata
    for i, cell in enumerate(nb.cells):
        assert not NOISE_KEYS & set(cell.metadata), f"cell {i}: papermill/nbclient metadata"
        assert cell.metadata.get("tags", None) != [], f"cell {i}: empty tags"
        if cell.cell_type == "code":
            assert cell.execution_count is not None, f"cell {i} was not executed"
            errors = [o for o in cell.outputs if o.output_type == "error"]
            assert not errors, f"cell {i} has an error output"
    checked = [c for c in nb.cells if c.cell_type == "code" and "NBVAL_CHECK_OUTPUT" in c.source]
    assert checked, "the verdict cell must carry # NBVAL_CHECK_OUTPUT"


@pytest.mark.parametrize("ch", CHAPTERS, ids=IDS)
def test_committed_record_is_default_seed0_and_passes(ch):
    rec = read_record(ch.ipynb)
    assert rec is not None, "no icmlbook record: end the chapter with run.finish()"
    assert rec["tier"] == "default" and rec["seed"] == 0
    assert rec["status"] == "passed", rec["claims"]
    assert len(rec["claims"]) >= 2


def _requirements(specs):
    out = {}
    for spec in specs:
        m = re.match(r"^\s*([A-Za-z0-9_.\-]+)\s*(.*)$", spec)
        out[m.group(1).lower().replace("_", "-")] = m.group(2).replace(" ", "")
    return out


def test_environment_yml_matches_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pip_deps = _requirements(project["dependencies"])
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    conda = [d for d in env["dependencies"] if isinstance(d, str)]
    pip_section = [d for d in env["dependencies"] if isinstance(d, dict)]
    assert pip_section and "-e ." in pip_section[0]["pip"], "environment.yml must pip install -e ."
    conda_deps = _requirements(conda)
    conda_deps.pop("python"), conda_deps.pop("pip")
    if "pytorch-cpu" in conda_deps:
        conda_deps["torch"] = conda_deps.pop("pytorch-cpu")
    assert conda_deps == pip_deps
    assert "conda-forge" in env["channels"]


def test_toc_and_config():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    assert toc["format"] == "jb-book" and toc["root"] == "book/intro"
    cfg = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert cfg["execute"]["execute_notebooks"] == "off"
    assert cfg["only_build_toc_files"] is True
    assert cfg["launch_buttons"]["notebook_interface"] == "jupyterlab"
    assert (ROOT / "jupytext.toml").read_text().count('formats = "ipynb,py:percent"') == 1


def test_intro_links_every_landed_chapter():
    intro = (BOOK / "intro.md").read_text()
    for ch in CHAPTERS:
        assert f"({ch.stem}.ipynb)" in intro, f"intro.md does not link {ch.stem}"


def test_ci_calls_make_test():
    assert "make test" in (ROOT / ".ci" / "run").read_text()
    readme = (ROOT / "README.md").read_text()
    assert "make test" in readme and "make book" in readme


# -- claims a reader can trust (paper claims apart from checks, named thresholds,
#    committed results) ---------------------------------------------------------------------
# Every chapter is held to every rule below: named thresholds, paper claims apart from
# checks, results over calibration and confirmation seeds, the paper's verdict with its
# findings, worked solutions and named random streams.
CLAIM_CALLS = ("claim", "check")


def _claim_calls(ch):
    """(cell index, ast.Call) of every run.claim / run.check in the chapter's code."""
    import ast

    calls = []
    for i, cell in enumerate(ch.notebook.cells):
        if cell.cell_type != "code":
            continue
        for node in ast.walk(ast.parse(cell.source)):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in CLAIM_CALLS and isinstance(node.func.value, ast.Name)
                    and node.func.value.id == "run"):
                calls.append((i, node))
    return calls


def _threshold_arg(call):
    for kw in call.keywords:
        if kw.arg == "threshold":
            return kw.value
    return call.args[3] if len(call.args) > 3 else None


@pytest.mark.parametrize("ch", CHAPTERS, ids=IDS)
def test_thresholds_are_named_constants_declared_before_the_claims(ch):
    import ast

    cells = ch.notebook.cells
    where = [i for i, c in enumerate(cells) if "thresholds" in c.metadata.get("tags", [])]
    assert len(where) == 1, f"{ch.stem}: needs exactly one cell tagged 'thresholds'"
    names = ch.thresholds
    assert names, f"{ch.stem}: the thresholds cell declares no constants"
    for name, t in names.items():
        assert name.isupper(), f"{ch.stem}: threshold {name} is not an ALL_CAPS constant"
        assert t.comment, f"{ch.stem}: threshold {name} has no one-line provenance comment"
    calls = _claim_calls(ch)
    assert calls, f"{ch.stem}: no run.claim / run.check calls"
    for i, call in calls:
        assert i > where[0], f"{ch.stem}: a claim in cell {i} comes before the thresholds cell"
        arg = _threshold_arg(call)
        base = arg.value if isinstance(arg, ast.Subscript) else arg
        assert isinstance(base, ast.Name) and base.id in names, (
            f"{ch.stem} cell {i}: the threshold of run.{call.func.attr}(...) must be a constant "
            f"of the thresholds cell, not {ast.unparse(arg) if arg is not None else 'missing'}")
    used = {(_threshold_arg(c).value if isinstance(_threshold_arg(c), ast.Subscript)
             else _threshold_arg(c)).id for _, c in calls}
    # a constant may also serve a claim's strict version or a finding's reference
    for cell in cells:
        if cell.cell_type == "code":
            used |= {n.id for n in ast.walk(ast.parse(cell.source)) if isinstance(n, ast.Name)
                     and n.id in names and isinstance(n.ctx, ast.Load)}
    assert not set(names) - used, f"{ch.stem}: thresholds declared but unused: {set(names) - used}"


@pytest.mark.parametrize("ch", CHAPTERS, ids=IDS)
def test_paper_claims_isolate_something_and_checks_are_apart(ch):
    rec = read_record(ch.ipynb)
    kinds = [c["kind"] for c in rec["claims"]]
    assert "unsorted" not in kinds, f"{ch.stem}: every run.claim needs versus= and against="
    paper = [c for c in rec["claims"] if c["kind"] == "paper"]
    assert len(paper) >= 2, f"{ch.stem}: at least two paper claims"
    sorts = {c["versus"] for c in paper}
    assert sorts <= {"ablation", "baseline"} and sorts, f"{ch.stem}: versus {sorted(sorts)}"
    # one against an ablation and one against a baseline; a chapter whose comparison of
    # one kind did not reproduce records it as a finding instead of keeping a claim bent
    # to pass (the verdict then says so)
    assert sorts == {"ablation", "baseline"} or rec.get("findings"), (
        f"{ch.stem}: paper claims need at least one against an ablation and one against a "
        f"baseline (or findings recording the one that did not reproduce); found "
        f"{sorted(sorts)}")


@pytest.mark.parametrize("ch", CHAPTERS, ids=IDS)
def test_results_file_is_current(ch):
    from icmlbook.results import (CALIBRATION_SEEDS, CONFIRMATION_SEEDS, REFRESH, read_results,
                                  read_sidecar)

    df = read_results(ch)
    refresh = REFRESH.format(number=ch.number)
    assert df is not None, f"{ch.stem}: no results/{ch.results_file.name}; run `{refresh}`"
    assert set(df["code_hash"]) == {ch.code_hash}, (
        f"{ch.stem}: the chapter's code changed after its results were made; run `{refresh}`, "
        f"then `make execute CH={ch.number}` and `icmlbook report`")
    seeds = tuple(sorted(set(df["seed"])))
    full = CALIBRATION_SEEDS + CONFIRMATION_SEEDS
    assert seeds == full, f"{ch.stem}: results need calibration and confirmation seeds 0-19"
    enforced = df[df["kind"] != "finding"]
    failing = enforced[~enforced["passed"].astype(bool)]
    assert failing.empty, (f"{ch.stem}: every claim and check must hold on every committed "
                           "seed; failing: "
                           + "; ".join(f"{r.name} at seed {r.seed}" for r in failing.itertuples()))
    rec = read_record(ch.ipynb)
    names = [c["name"] for c in rec["claims"]] + [f["name"] for f in rec.get("findings", [])]
    assert names == list(dict.fromkeys(df["name"])), (
        f"{ch.stem}: the results file's claims differ from the committed run's; run `{refresh}`")
    meta = read_sidecar(ch)
    if rec.get("headlines") or meta:
        assert meta and meta["headlines"] == rec["headlines"], (
            f"{ch.stem}: results/{ch.results_file.stem}.json differs from the committed run's "
            f"headlines; run `{refresh}`")


@pytest.mark.parametrize("ch", CHAPTERS, ids=IDS)
def test_committed_across_seeds_output_is_not_stale(ch):
    """The committed notebook's across-seeds table was drawn from the results file as it
    is now: after a sweep or a restamp, the chapter must be executed again."""
    cells = json.loads(ch.ipynb.read_text(encoding="utf-8"))["cells"]
    stale = [i for i, c in enumerate(cells) for out in c.get("outputs", [])
             if "STALE: the chapter's code changed since" in str(out.get("text", ""))]
    assert not stale, (f"{ch.stem}: the committed across-seeds output (cell {stale[0]}) "
                       f"says its results are stale; run `make execute CH={ch.number}`")


@pytest.mark.parametrize("ch", CHAPTERS, ids=IDS)
def test_across_seeds_cell_follows_the_verdict(ch):
    code = [c.source for c in ch.notebook.cells if c.cell_type == "code"]
    verdict = next(i for i, s in enumerate(code) if "run.verdict()" in s)
    assert "icmlbook.across_seeds(run)" in code[verdict + 1], (
        f"{ch.stem}: the code cell right after the verdict must show the results across seeds")


def test_reproduction_report_is_current_and_listed_after_the_intro():
    from icmlbook.report import PAGE, render

    page = ROOT / PAGE
    assert page.exists() and page.read_text(encoding="utf-8") == render(ROOT), (
        "book/reproduction.md is not current with results/: run `icmlbook report`")
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    first = toc["parts"][0]["chapters"][0]["file"]
    assert first == "book/reproduction", "the report must come right after the intro"


@pytest.mark.parametrize("ch", CHAPTERS, ids=[c.stem for c in CHAPTERS])
def test_light_scan_reads_the_cells_as_jupytext_does(ch):
    """Tags, code and the code hash come from a light scan of the .py (no jupytext
    import): it must see exactly the cells, kinds, tags and code jupytext sees."""
    from icmlbook.chapters import percent_cells

    light = percent_cells(ch.py.read_text(encoding="utf-8"))
    full = ch.notebook.cells
    assert [k for k, _, _ in light] == [c.cell_type for c in full]
    assert [t for _, t, _ in light] == [c.metadata.get("tags", []) for c in full]
    assert [s for k, _, s in light if k == "code"] == \
        [c.source.strip() for c in full if c.cell_type == "code"]


# -- verdicts, findings, solutions, random streams ---------------------------------------
NOT_REPRODUCED_WORDS = ("did not reproduce", "does not reproduce", "reported, not claimed",
                        "not reproduced")


@pytest.mark.parametrize("ch", CHAPTERS, ids=IDS)
def test_paper_verdict_headlines_and_claim_strength(ch):
    from icmlbook.verdicts import LADDER, PROVENANCE, STRENGTH

    rec = read_record(ch.ipynb)
    assert rec.get("headlines"), f"{ch.stem}: run.headline(...) names the paper's headlines"
    assert rec["verdict"]["paper"] in LADDER
    for h in rec["headlines"]:
        assert h["source"] and h["statement"], f"{ch.stem}: headline {h['name']!r} needs its " \
            "statement in the paper's words and where it is in the paper"
    for c in rec["claims"]:
        if c["kind"] == "paper":
            assert c["strength"] in STRENGTH and c["provenance"] in PROVENANCE, (
                f"{ch.stem}: paper claim {c['name']!r} needs strength= and provenance=")
    src = ch.py.read_text(encoding="utf-8").lower()
    if any(w in src for w in NOT_REPRODUCED_WORDS):
        assert rec.get("findings"), (f"{ch.stem}: the prose says something did not reproduce "
                                     "but the run records no finding (run.finding)")
    assert "paper coverage" in src, f"{ch.stem}: needs its paper-coverage table"


def _exercise_cells(ch):
    cells = ch.notebook.cells
    start = next((i for i, c in enumerate(cells) if c.cell_type == "markdown"
                  and c.source.lstrip().startswith("## Exercises")), None)
    assert start is not None, f"{ch.stem}: no '## Exercises' section"
    end = next((i for i in range(start + 1, len(cells)) if cells[i].cell_type == "markdown"
                and cells[i].source.lstrip().startswith("## ")), len(cells))
    return cells[start + 1:end]


@pytest.mark.parametrize("ch", CHAPTERS, ids=IDS)
def test_every_exercise_has_a_worked_solution(ch):
    cells = _exercise_cells(ch)
    tags = [set(c.metadata.get("tags", [])) for c in cells]
    exercises = [i for i, t in enumerate(tags) if "exercise" in t]
    assert len(exercises) >= 2, f"{ch.stem}: tag each exercise's markdown cell 'exercise'"
    for i, c in enumerate(cells):
        assert tags[i] & {"exercise", "solution"}, (
            f"{ch.stem}: a cell of the Exercises section is neither an exercise nor a solution")
    for k, i in enumerate(exercises):
        stop = exercises[k + 1] if k + 1 < len(exercises) else len(cells)
        sol = cells[i + 1:stop]
        assert sol, f"{ch.stem}: exercise {k + 1} has no solution"
        md = [c for c in sol if c.cell_type == "markdown"]
        code = [c for c in sol if c.cell_type == "code"]
        assert md and md[0].source.lstrip().startswith(":::{dropdown}"), (
            f"{ch.stem}: exercise {k + 1}'s solution opens with a ':::{{dropdown}}' reasoning cell")
        assert code and "solution_check(" in code[-1].source, (
            f"{ch.stem}: exercise {k + 1}'s solution ends in a code cell with solution_check(...)")
        for c in code:
            assert "hide-cell" in c.metadata.get("tags", []), (
                f"{ch.stem}: exercise {k + 1}'s solution code is folded (tag hide-cell)")


STREAM_SMELLS = (re.compile(r"\bseed\s*[+*]\s*\d"), re.compile(r"\d+\s*\*\s*seed\b"),
                 re.compile(r"manual_seed\(\s*\d"), re.compile(r"default_rng\(\s*\d"))


@pytest.mark.parametrize("ch", CHAPTERS, ids=IDS)
def test_random_numbers_come_from_named_streams(ch):
    for i, cell in enumerate(ch.notebook.cells):
        if cell.cell_type != "code":
            continue
        for pat in STREAM_SMELLS:
            m = pat.search(cell.source)
            assert not m, (f"{ch.stem} cell {i}: {m.group(0)!r}: draw from a named stream "
                           "(run.rng(name), run.generator(name), run.reseed(name)) instead")


_NUMBER_WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight",
                 "nine", "ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen",
                 "sixteen", "seventeen", "eighteen", "nineteen", "twenty"]


def test_front_matter_counts_and_verdicts_agree_with_the_book():
    from icmlbook.report import verdicts

    n = len(CHAPTERS)
    intro = (BOOK / "intro.md").read_text(encoding="utf-8")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for name, text in (("book/intro.md", intro.split("\n\n")[1]),
                       ("README.md", readme.split("\n\n")[1])):
        for m in re.finditer(r"\b(" + "|".join(_NUMBER_WORDS) + r")\b\s+(?:ICML 2024\s+)?"
                             r"(papers|chapters)", text, re.I):
            assert _NUMBER_WORDS.index(m.group(1).lower()) == n, (
                f"{name} says {m.group(0)!r}; the table of contents has {n} chapters")
        for m in re.finditer(r"\b(\d+) (?:of (?:its|the) )?(\d+)? ?chapters\b", text):
            assert n in {int(g) for g in m.groups() if g}, f"{name}: {m.group(0)!r} != {n}"
    for number, v in verdicts(ROOT).items():
        if v is None:
            continue
        ch = next(c for c in CHAPTERS if c.number == number)
        line = next((ln for ln in intro.split("\n\n") if f"({ch.stem}.ipynb)" in ln), "")
        assert f"Verdict: **{v['paper']}**" in line, (
            f"book/intro.md's entry for {ch.stem} must say 'Verdict: **{v['paper']}**', the "
            "verdict its results give (icmlbook report)")
        row = next((ln for ln in readme.splitlines()
                    if re.match(rf"\|[^|]*\| {number} \|", ln)), "")
        assert f"**{v['paper']}**" in row, (
            f"README.md's chapter table row for {number} must say **{v['paper']}**, the "
            "verdict its results give (icmlbook report)")
