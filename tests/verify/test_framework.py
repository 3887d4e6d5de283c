"""The audit's machinery on stand-in claims: verdict rules, selection, the runner, the report and the exit status."""
import json

import numpy as np
import pytest

from verify import verdicts
from verify.__main__ import audit
from verify.context import Context
from verify.numerics import loglog_slope
from verify.registry import KINDS, PROVENANCES, SCOPES, Band, Check, Claim, Headline, Result, claim, select
from verify.report import PAPER_CLAIMS, format_console, format_summary, summary
from verify.statistics import every


def _witness(corrected: bool) -> Check:
    return Check(corrected, {"corrected": corrected})


ERROR = dict(error_kind="erratum", correction="the corrected statement", witness=_witness)
"""An error of the papers' three fields, as a claim names them."""


def _claim(id, expected_verdict, measure, tags=("demo",), kind="theory", provenance="analysis",
           modes=("quick", "full"), scope="paper"):
    """A stand-in claim; a paper claim expected to fail records an erratum (`ERROR`)."""
    error = ERROR if scope == "paper" and expected_verdict == "fails" else {}
    return Claim(id=id, tags=tags, location="long version, eq. (0)", statement="a statement", measures="a figure",
                 expected="a threshold, with its reason", expected_verdict=expected_verdict, kind=kind,
                 provenance=provenance, measure=measure, modes=modes, scope=scope, quote="a quote",
                 setting=None if scope == "paper" else "a setting", **error)


def _holds(ctx):
    return Result(measured="err 0", verdict="holds", data={"err": np.float64(0.0), "xs": np.arange(3)})


def _fails(ctx):
    return Result(measured="err 1", verdict="fails")


def _raises(ctx):
    raise RuntimeError("broken measurement")


def test_verdict_rules():
    assert verdicts.at_most(1e-13, 1e-12) == "holds" and verdicts.at_most(1e-11, 1e-12) == "fails"
    assert verdicts.bound(1.0, 2.25, loose_below=2 / 3) == "loose"
    assert verdicts.bound(2.0, 2.25, loose_below=2 / 3) == "holds"
    assert verdicts.bound(2.3, 2.25, loose_below=2 / 3) == "fails"
    assert verdicts.slope(1.93, 2.0, 0.25) == "holds" and verdicts.slope(1.0, 2.0, 0.25) == "fails"
    assert verdicts.all_hold("holds", "loose") == "loose" and verdicts.all_hold("loose", "fails") == "fails"
    with pytest.raises(ValueError, match="NaN"):
        verdicts.at_most(float("nan"), 1.0)


def test_rate_bound_rules():
    """A bound y ≲ x^b as x → 0: slower than the bound fails, its rate holds, faster is loose; over seeds through the
    95% interval, inconclusive where it contains a boundary; and all_hold passes an inconclusive sub-check on."""
    assert [verdicts.rate_bound(a, 1.0, 0.25) for a in (0.7, 0.9, 1.2, 1.3)] == ["fails", "holds", "holds", "loose"]
    spread = np.array([-0.01, 0.0, 0.01])
    for centre, expected in ((1.0, "holds"), (1.5, "loose"), (0.5, "fails"), (0.75, "inconclusive"),
                             (1.25, "inconclusive")):
        verdict, comparisons = verdicts.rate_bound_over_seeds(centre + spread, 1.0, 0.25)
        assert verdict == expected, centre
        assert [c.boundary for c in comparisons] == [-0.25, 0.25]
    with pytest.raises(ValueError, match="NaN"):
        verdicts.rate_bound(float("nan"), 1.0, 0.25)
    assert verdicts.all_hold("holds", "inconclusive", "loose") == "inconclusive"
    assert verdicts.all_hold("inconclusive", "fails") == "fails" and verdicts.all_hold("holds") == "holds"


def test_combined_verdicts_keep_an_undecided_comparison():
    """A sub-check the seeds cannot decide leaves the claim undecided unless another fails; "in most cases" holds
    at the share, fails once the share is out of reach, and is undecided in between."""
    assert verdicts.all_hold("holds", "inconclusive", "loose") == "inconclusive"
    assert verdicts.all_hold("inconclusive", "fails") == "fails" and verdicts.all_hold("holds", "holds") == "holds"
    assert verdicts.most(["holds"] * 3 + ["fails"], 0.75) == "holds"
    assert verdicts.most(["holds"] * 2 + ["fails"] * 2, 0.75) == "fails"
    assert verdicts.most(["holds"] * 2 + ["fails", "inconclusive"], 0.75) == "inconclusive"
    assert verdicts.most(["holds", "inconclusive"], 1.0) == "inconclusive"
    with pytest.raises(ValueError, match="most"):
        verdicts.most([], 0.75)


def test_an_equivalence_over_seeds_needs_the_whole_interval_inside_its_margins():
    inside, beyond, straddling = [0.01, -0.01, 0.02, 0.0], [0.3, 0.32, 0.29, 0.31], [0.04, 0.06, 0.05, 0.055]
    assert every(verdicts.within(inside, 0.05)) == "holds"
    assert every(verdicts.within(beyond, 0.05)) == "fails"
    assert every(verdicts.within(straddling, 0.05)) == "inconclusive"
    with pytest.raises(ValueError, match="margin"):
        verdicts.within(inside, 0.0)


def test_result_rejects_unknown_verdict():
    with pytest.raises(ValueError, match="verdict must be one of"):
        Result(measured="x", verdict="maybe")


def test_loglog_slope_recovers_a_power_law():
    x = np.logspace(-3, -1, 5)
    assert loglog_slope(x, 3 * x**2) == pytest.approx(2.0, abs=1e-12)  # exact power law: slope exact to rounding


def test_context_streams_depend_on_seed_and_claim_only(tmp_path):
    a = Context("quick", 0, "2.1-a", tmp_path).rng.standard_normal(3)
    again = Context("quick", 0, "2.1-a", tmp_path).rng.standard_normal(3)
    other = Context("quick", 0, "2.1-b", tmp_path).rng.standard_normal(3)
    assert np.array_equal(a, again) and not np.array_equal(a, other)
    assert Context("full", 0, "x", tmp_path).pick(1, 2) == 2
    with pytest.raises(ValueError, match="mode"):
        Context("medium", 0, "x", tmp_path)


def test_a_claim_decorator_on_a_function_that_does_not_take_the_context_alone_is_refused():
    from verify.registry import claim

    spec = dict(id="test-helper-decorated", tags=(), location="r", statement="s", measures="m", expected="e",
                expected_verdict="holds", kind="theory", provenance="analysis", scope="paper", quote="q")
    with pytest.raises(TypeError, match=r"claim 'test-helper-decorated': .*helper must take the context alone, got "
                                        r"parameters \['ctx', 'control'\]"):
        @claim(**spec)
        def helper(ctx, control):
            return None


def test_select_by_id_prefix_and_tag():
    claims = [_claim("2.1-a", "holds", _holds), _claim("2.11-b", "holds", _holds, tags=("mm",))]
    assert [c.id for c in select(claims, ["2.1"])] == ["2.1-a"]  # 2.1 must not match 2.11
    assert [c.id for c in select(claims, ["mm"])] == ["2.11-b"]
    nested = [_claim("table13-soft", "holds", _holds), _claim("table13-soft-digits", "holds", _holds)]
    assert [c.id for c in select(nested, ["table13-soft"])] == ["table13-soft"]  # an id selects its claim alone
    assert [c.id for c in select(nested, ["table13"])] == ["table13-soft", "table13-soft-digits"]
    with pytest.raises(ValueError, match="nope"):
        select(claims, ["nope"])


def test_audit_exit_status_and_reports(tmp_path, capsys):
    ok = [_claim("2.1-a", "holds", _holds), _claim("2.2-b", "fails", _fails)]
    assert audit(ok, output_dir=tmp_path / "ok", progress=False) == 0
    report = json.loads((tmp_path / "ok" / "report.json").read_text())
    assert [c["id"] for c in report["claims"]] == ["2.1-a", "2.2-b"]
    assert report["claims"][0]["data"] == {"err": 0.0, "xs": [0, 1, 2]}
    assert report["summary"]["mismatches"] == []
    assert "2.2-b" in (tmp_path / "ok" / "report.md").read_text()
    assert "2/2 claims as expected" in capsys.readouterr().out
    assert (report["claims"][0]["kind"], report["claims"][0]["provenance"]) == ("theory", "analysis")

    # a verdict that differs from its expectation, and a measurement that raises: exit 1, report still written
    bad = [_claim("2.1-a", "loose", _holds), _claim("2.3-c", "holds", _raises)]
    assert audit(bad, output_dir=tmp_path / "bad", progress=False, echo=False) == 1
    report = json.loads((tmp_path / "bad" / "report.json").read_text())
    assert report["summary"]["mismatches"] == ["2.1-a", "2.3-c"]
    raised = report["claims"][1]
    assert raised["verdict"] == "error" and "broken measurement" in raised["error"]
    assert "broken measurement" in (tmp_path / "bad" / "report.md").read_text()


def test_intervals_of_seeds():
    from verify.statistics import interval, intervals

    i = interval([1.0, 2.0, 3.0, 4.0, 5.0])
    # t(0.975, 4) = 2.7764; std = √2.5: half-width 2.7764·1.5811/√5 = 1.9632 (closed form, float64 rounding)
    assert (i.mean, i.n) == (3.0, 5) and i.high - i.mean == pytest.approx(1.9632, abs=1e-4)
    assert i.above_zero and i.sign() == 1 and not i.below_zero
    assert interval([-1.0, 1.0, -0.5, 0.5, 0.0]).sign() == 0
    assert [x.sign() for x in intervals([[-2.0, 1.0, 1.0], [-2.1, 1.1, 3.0], [-1.9, 0.9, 2.0]])] == [-1, 1, 0]
    with pytest.raises(ValueError, match="2 seeds"):
        interval([1.0])
    with pytest.raises(ValueError, match="finite"):
        interval([1.0, float("nan")])


def test_the_comparison_rule_gives_holds_fails_and_inconclusive_where_it_must():
    from scipy import stats

    from verify.statistics import compare, welch_interval

    a, b = [1.0, 2.0, 3.0], [2.0, 3.0, 4.5]
    paired = compare(a, b, direction="below")  # differences −1, −1, −1.5: mean −7/6, sd 0.2887
    # t(0.975, 2) = 4.3027: half-width 4.3027·0.2887/√3 = 0.7171 (closed form; float64 rounding)
    assert paired.difference.high == pytest.approx(-7 / 6 + 0.7171, abs=1e-4) and paired.verdict == "holds"
    assert compare(a, b, direction="above").verdict == "fails"
    assert compare(a, b, direction="below", boundary=-1.0).verdict == "inconclusive"  # [−1.88, −0.45] ∋ −1
    assert compare([-1.0, 1.0, 0.5], direction="above").verdict == "inconclusive"
    welch = compare([1.0, 1.1, 0.9], [2.0, 3.0, 4.5], direction="below", paired=False)
    assert not welch.paired and welch.verdict == "inconclusive"  # b's spread: Welch's ~2 dof cannot tell
    # Welch's interval against scipy's own Welch test on the same data: the p-value of the boundary at the interval's
    # end is 0.05 (two-sided), to solver precision
    x, y = np.array([3.1, 2.7, 3.4, 2.9]), np.array([2.0, 2.6, 1.9])
    w = welch_interval(x, y)
    assert stats.ttest_ind(x - w.high, y, equal_var=False).pvalue == pytest.approx(0.05, abs=1e-9)
    with pytest.raises(ValueError, match="at least 3 seeds"):
        compare([1.0, 2.0], [1.0, 2.0], direction="below")
    with pytest.raises(ValueError, match="one value per seed"):
        compare([1.0, 2.0, 3.0], [1.0, 2.0, 3.0, 4.0], direction="below")
    with pytest.raises(ValueError, match="direction"):
        compare([1.0, 2.0, 3.0], direction="less")


def test_a_claim_of_several_comparisons_needs_each_of_them():
    from verify.statistics import brief, every, per_column

    trained = np.array([[1.0, 5.0, 3.0], [1.1, 5.2, 2.0], [0.9, 4.9, 4.0]])  # seeds × layers
    init = np.array([[2.0, 4.0, 3.0], [2.1, 4.1, 3.1], [1.9, 3.9, 2.9]])
    below = per_column(trained, init, direction="below")  # layer 1 below, layer 2 above, layer 3 either
    assert [c.verdict for c in below] == ["holds", "fails", "inconclusive"]
    assert every(below) == "fails" and every(below[::2]) == "inconclusive" and every(below[:1]) == "holds"
    assert [c.verdict for c in per_column(trained, direction="below", boundary=6.0)] == ["holds"] * 3
    assert brief(below[:1]).startswith("-1 [")
    with pytest.raises(ValueError, match="same items"):
        per_column(trained, init[:, :2], direction="below")
    with pytest.raises(ValueError, match="seeds, items"):
        per_column(trained[0], direction="below")
    with pytest.raises(ValueError, match="at least one"):
        every([])


def test_full_only_claims_are_skipped_in_quick_mode_and_named(tmp_path):
    claims = [_claim("2.1-a", "holds", _holds), _claim("2.2-b", "holds", _raises, modes=("full",))]
    assert audit(claims, output_dir=tmp_path, progress=False, echo=False) == 0  # the raising claim never runs
    report = json.loads((tmp_path / "report.json").read_text())
    assert [c["id"] for c in report["claims"]] == ["2.1-a"]
    assert report["meta"]["not_run_in_this_mode"] == ["2.2-b"]
    md = (tmp_path / "report.md").read_text()
    assert "## Detail" in md and "Not measured in `quick` mode" in md and "2.2-b" in md
    assert audit(claims, mode="full", output_dir=tmp_path / "full", progress=False, echo=False) == 1  # it raises


def _register(**fields):
    spec = dict(id="x", tags=(), location="r", statement="s", measures="m", expected="e", expected_verdict="holds",
                kind="theory", provenance="analysis", scope="paper", quote="q") | fields
    return claim(**spec)(_holds)


@pytest.mark.parametrize("field, value", [("modes", ("medium",)), ("kind", "proof"), ("provenance", "hunch"),
                                          ("expected_verdict", "maybe"), ("scope", "hearsay")])
def test_registration_refuses_unknown_values_with_one_line(field, value):
    with pytest.raises(ValueError, match=f"{field} of 'x' must be") as raised:
        _register(**{field: value})
    assert "\n" not in str(raised.value)


def test_a_replication_or_probe_names_its_setting_and_a_quote_is_short():
    with pytest.raises(ValueError, match="names its setting"):
        _register(scope="probe", quote="q")
    assert _register(id="x-probe", scope="probe", quote="q", setting="a construct")
    with pytest.raises(ValueError, match="quote of 'x'"):
        _register(scope="paper", quote="x" * 241)


def test_an_error_kind_belongs_to_a_paper_claim_expected_to_fail():
    with pytest.raises(ValueError, match="is for a paper claim") as raised:
        _register(id="x-probe-error", scope="probe", setting="a construct", expected_verdict="fails", **ERROR)
    assert "\n" not in str(raised.value)
    with pytest.raises(ValueError, match="names its error_kind, correction, witness"):
        _register(expected_verdict="fails")  # a paper claim expected to fail without its kind
    with pytest.raises(ValueError, match="names its error_kind, correction, witness"):
        _register(expected_verdict="holds", full_verdict="fails")  # expected to fail under --full
    with pytest.raises(ValueError, match="names its witness"):
        _register(expected_verdict="fails", error_kind="erratum", correction="c")
    with pytest.raises(ValueError, match="for a claim expected to fail"):
        _register(**ERROR)  # a paper claim expected to hold has no error to classify
    with pytest.raises(ValueError, match="error_kind of 'x' must be one of"):
        _register(expected_verdict="fails", **{**ERROR, "error_kind": "typo"})
    assert _register(id="x-error", expected_verdict="fails", **ERROR)


def _paper_failing(claim_id: str, expected_verdict: str = "fails", **error) -> Claim:
    """A paper claim that fails, with the error fields ``error`` (an erratum by default, if expected to fail)."""
    return Claim(**{**_claim(claim_id, expected_verdict, _fails).__dict__, **error})


def test_errata_and_substantive_errors_are_counted_apart(tmp_path):
    from verify.runner import run_claims

    claims = [_paper_failing("eq1-typo", **ERROR), _paper_failing("eq2-step", **{**ERROR, "error_kind": "substantive"}),
              _paper_failing("eq3-typo", **ERROR), _paper_failing("eq4-unforeseen", "holds"),
              _claim("x-probe", "fails", _fails, scope="probe")]
    outcomes = run_claims(claims, mode="quick", seed=0, output_dir=tmp_path, progress=False)
    s = summary(outcomes)
    assert s["errors_by_kind"] == {"erratum": ["eq1-typo", "eq3-typo"], "substantive": ["eq2-step"],
                                   "unclassified": ["eq4-unforeseen"]}
    assert s["errors_of_the_papers"] == ["eq1-typo", "eq2-step", "eq3-typo", "eq4-unforeseen"]
    assert "4 fail (errors of the papers: 2 errata, 1 substantive, 1 unclassified)" in format_summary(outcomes)
    console = " ".join(format_console(outcomes).split("\n"))  # the list wraps at 120 columns
    assert "2 errata: eq1-typo, eq3-typo; 1 substantive error: eq2-step; 1 unclassified: eq4-unforeseen" in console
    assert "x-probe" not in console.split("Errors of the papers")[1]  # a probe's fails is no error of the papers


def test_an_old_id_selects_its_claim_and_names_the_new_one(capsys):
    new = _claim("eq8-new", "holds", _holds)
    new = Claim(**{**new.__dict__, "formerly": ("2.1-old",)})
    assert select([new], ["2.1-old"]) == [new]
    assert "claim 2.1-old is now eq8-new" in capsys.readouterr().err
    assert select([new], ["2.1"]) == [new]  # a prefix of former ids, as scripts wrote them
    assert "2.1 selects former ids, now eq8-new" in capsys.readouterr().err


def test_a_printed_number_can_only_hold_or_fail():
    with pytest.raises(ValueError, match="printed-number check"):
        _register(kind="printed", expected_verdict="loose")


def test_kind_provenance_scope_and_quote_are_required():
    with pytest.raises(TypeError, match="kind"):
        claim(id="x", tags=(), location="r", statement="s", measures="m", expected="e", expected_verdict="holds",
              provenance="analysis", scope="paper", quote="q")
    with pytest.raises(TypeError, match="'scope' and 'quote'"):
        claim(id="x", tags=(), location="r", statement="s", measures="m", expected="e", expected_verdict="holds",
              kind="theory", provenance="analysis")


def test_headline_text():
    assert Headline("cos", 0.07125).text() == "cos: 0.0712"
    assert Headline.from_seeds("Δ", [2.0]).text() == "Δ: 2" and Headline.from_seeds("Δ", [2.0]).seeds == 1
    h = Headline.from_seeds("Δ", [1.0, 2.0, 3.0])  # t(0.975, 2) = 4.303, sd 1: half-width 2.484
    assert (h.value, h.seeds) == (2.0, 3) and h.low == pytest.approx(2 - 2.484, abs=1e-3)
    assert h.text() == "Δ: +2 [-0.48, 4.5]"


def _mixed_outcomes(tmp_path):
    """Every kind, scope and provenance, every verdict (and a raise), some as expected and some not."""
    from verify.runner import run_claims

    def verdict(v):
        return lambda ctx: Result(measured=v, verdict=v, headline=Headline("x", 1.0) if v == "fails" else None)

    claims = []
    for i, (kind, provenance, measured, expected) in enumerate([
        ("identity", "analysis", "holds", "holds"), ("printed", "analysis", "fails", "fails"),
        ("printed", "measurement", "holds", "fails"), ("control", "analysis", "inconclusive", "holds"),
        ("theory", "analysis", "loose", "loose"), ("ideal", "measurement", "fails", "fails"),
        ("trained", "measurement", "inconclusive", "inconclusive"), ("trained", "analysis", "error", "holds"),
    ]):
        measure = _raises if measured == "error" else verdict(measured)
        scope = ("paper", "replication", "probe")[i % 3]
        claims.append(_claim(f"2.{i + 1}-c", expected, measure, kind=kind, provenance=provenance, scope=scope))
    claims += [_claim(ids[0], "holds", verdict("fails"), kind="trained") for _, ids in PAPER_CLAIMS]
    return run_claims(claims, mode="quick", seed=0, output_dir=tmp_path, progress=False)


def test_headline_counts_by_scope_kind_and_provenance_add_up(tmp_path):
    outcomes = _mixed_outcomes(tmp_path)
    s = summary(outcomes)
    assert sum(s["verdicts"].values()) == s["claims"] == len(outcomes)
    assert set(s["by_scope"]) == set(SCOPES) and sum(k["claims"] for k in s["by_scope"].values()) == s["claims"]
    for verdict, count in s["verdicts"].items():
        assert sum(k[verdict] for k in s["by_scope"].values()) == count
    # the papers' statements that fail, and only those, are errors of the papers
    assert s["errors_of_the_papers"] == [o.claim.id for o in outcomes
                                         if o.claim.scope == "paper" and o.verdict == "fails"]
    assert set(s["by_kind"]) == set(KINDS) and set(s["as_expected"]) == set(PROVENANCES)
    for verdict, count in s["verdicts"].items():
        assert sum(k[verdict] for k in s["by_kind"].values()) == count
    assert sum(k["claims"] for k in s["by_kind"].values()) == s["claims"]
    assert sum(s["as_expected"].values()) == s["claims"] - len(s["mismatches"])
    assert s["as_expected"] == {"analysis": 3, "measurement": 2} and s["verdicts"]["inconclusive"] == 2
    assert s["by_kind"]["trained"]["error"] == 1 and s["by_kind"]["printed"]["as_expected"]["measurement"] == 0


def test_summary_and_console_are_short(tmp_path, capsys):
    """The summary ≤ 25 lines before the detail, every detail bullet with its verdict; the console ≤ 40 lines of
    ≤ 120 columns, the full table only with --table."""
    outcomes = _mixed_outcomes(tmp_path)
    claims = [o.claim for o in outcomes]
    assert audit(claims, output_dir=tmp_path / "r", progress=False) == 1
    out = capsys.readouterr().out
    lines = out.rstrip("\n").split("\n")
    assert len(lines) <= 40 and max(len(line) for line in lines[:-1]) <= 120, out  # the last names the folder
    assert lines[-1].startswith("wall time")
    assert "as expected: 3 by analysis, 2 by measurement" in out and "| location" not in out
    assert lines[0].startswith("The papers' statements (")  # the first line counts the papers' statements
    assert "errors of the papers" in lines[0] and "do not replicate" in lines[1] and "findings of the audit" in lines[2]
    md = (tmp_path / "r" / "report.md").read_text()
    summary_section = md[md.index("## Summary"):md.index("## Detail")].rstrip("\n").split("\n")
    assert len(summary_section) <= 25 and "arXiv 2311.13110" in md and "arXiv 2306.01129" in md
    detail = md[md.index("## Detail"):md.index("## All claims")]
    bullets = [line for line in detail.split("\n") if line.startswith("- **")]
    assert len(bullets) == len(outcomes)
    assert all(f"— **{o.verdict}" in next(b for b in bullets if f"**{o.claim.id}**" in b) for o in outcomes)
    assert all("printed-number check" in b for b in bullets if "**2.2-c**" in b or "**2.3-c**" in b)
    assert "criterion: a threshold" in detail  # the criterion is named as such, not shown as a reason
    assert audit(claims, output_dir=tmp_path / "t", progress=False, table=True) == 1
    assert "| location" in capsys.readouterr().out  # --table: the full table as well


@pytest.fixture
def figures(monkeypatch):
    """The figures the plot helpers build, kept instead of saved."""
    from verify import plots

    built = []
    monkeypatch.setattr(plots, "_save", lambda fig, path: built.append(fig) or str(path))
    return built


def test_a_random_initialisation_is_grey_in_every_figure(figures, tmp_path):
    from matplotlib.colors import to_hex

    from verify import plots

    plots.per_layer(tmp_path / "a.png", {"R^c": {"random init": [1, 2], "dino": [2, 3]}}, title="")
    plots.per_layer(tmp_path / "b.png", {"R^c": {"trained": [1, 2], "init": [2, 3]}}, title="")
    plots.curves(tmp_path / "c.png", [1, 2], {"initialisation": [1, 2], "trained": [2, 3]}, xlabel="", ylabel="",
                 title="")
    plots.per_seed(tmp_path / "d.png", {"dino": [0.7], "random init": [0.6]}, ylabel="", title="")
    colours = [{line.get_label(): to_hex(line.get_color()) for line in fig.axes[0].get_lines()} for fig in figures[:3]]
    grey, first = to_hex(plots.INIT_COLOUR), to_hex("C0")
    assert colours[0] == {"random init": grey, "dino": first} and colours[1] == {"trained": first, "init": grey}
    assert colours[2] == {"initialisation": grey, "trained": first}
    bars = [to_hex(patch.get_facecolor()[:3]) for patch in figures[3].axes[0].patches]
    assert bars == [first, grey]
    assert "(1 seed)" in figures[3].axes[0].get_title()


def test_a_slope_guide_follows_its_series_and_keeps_to_the_data(figures, tmp_path):
    from verify import plots

    x = np.logspace(-3, -1, 5)
    plots.loglog_rates(tmp_path / "r.png", x, {"flat": np.full(5, 1.3), "quadratic": x**2}, xlabel="", ylabel="",
                       title="", references={"slope 2": 2.0})
    ax = figures[0].axes[0]
    guide = next(line for line in ax.get_lines() if line.get_label() == "slope 2")
    assert np.allclose(guide.get_ydata(), 2 * x**2)  # parallel to the quadratic series, not through the flat one
    low, high = ax.get_ylim()
    assert low >= 1e-6 / 2 and high <= 1.3 * 4  # the data's range: the guide does not stretch the axis


def test_a_full_verdict_is_expected_under_full_only(tmp_path):
    claim = Claim(id="demo-modes", tags=("demo",), location="NeurIPS 2023, eq. (0)", statement="s", measures="m", expected="e",
                  expected_verdict="fails", kind="trained", provenance="measurement", measure=_holds,
                  full_verdict="holds")
    assert str(claim.expected_in("quick")) == "fails" and str(claim.expected_in("full")) == "holds"
    assert audit([claim], mode="full", output_dir=tmp_path / "full", progress=False, echo=False) == 0
    assert audit([claim], mode="quick", output_dir=tmp_path / "quick", progress=False, echo=False) == 1
    entry = json.loads((tmp_path / "quick" / "report.json").read_text())["claims"][0]
    assert entry["expected_verdict"] == "fails" and not entry["matches_expectation"]
    with pytest.raises(ValueError, match="full_verdict of 'x'"):
        _register(full_verdict="maybe")
    with pytest.raises(ValueError, match="both modes"):
        _register(full_verdict="holds", modes=("full",))


def test_a_band_of_verdicts_matches_each_verdict_in_it_and_no_other(tmp_path, capsys):
    """A seed-sensitive claim expects the band of verdicts it gave over a panel of base seeds: any verdict of the band
    is as expected (exit 0) and is counted apart from the verdicts, one outside it is not (exit 1)."""
    def inconclusive(ctx):
        return Result("Δ −0.18 [−0.41, +0.04]", "inconclusive")

    banded = _claim("demo-band", ("holds", "inconclusive"), inconclusive, kind="trained", provenance="measurement",
                    scope="probe")
    assert banded.expected_verdict.verdicts == ("holds", "inconclusive") and not banded.expected_verdict.stable
    assert audit([banded], output_dir=tmp_path / "in", progress=False) == 0
    assert "1 seed-sensitive" in capsys.readouterr().out  # the console counts it; report.md names its band
    assert "demo-band holds or inconclusive (now inconclusive)" in (tmp_path / "in" / "report.md").read_text()
    report = json.loads((tmp_path / "in" / "report.json").read_text())
    entry = report["claims"][0]
    assert entry["expected_band"] == ["holds", "inconclusive"] and entry["seed_sensitive"] and entry["matches_expectation"]
    probes = report["summary"]["by_scope"]["probe"]
    assert probes["seed-sensitive"] == 1 and probes["inconclusive"] == 0  # counted apart, whichever verdict it gave
    assert "inconclusive~" in (tmp_path / "in" / "report.md").read_text()
    outside = _claim("demo-band", ("holds", "loose"), inconclusive, scope="probe")
    assert audit([outside], output_dir=tmp_path / "out", progress=False, echo=False) == 1
    assert json.loads((tmp_path / "out" / "report.json").read_text())["summary"]["mismatches"] == ["demo-band"]
    assert Band.of("x", "expected_verdict", ("inconclusive", "holds")).verdicts == ("holds", "inconclusive")  # ordered


@pytest.mark.parametrize("band, message", [
    (("holds", "fails"), "spans fails and holds"),
    (("loose", "inconclusive", "fails"), "spans fails and holds"),
    ((), "one verdict or a band"),
    (("holds", "holds"), "one verdict or a band"),
    (("holds", "maybe"), "must be one of"),
])
def test_a_band_is_refused_across_fails_and_holds_and_when_malformed(band, message):
    """A claim whose verdict moves between fails and holds is not a regression expectation but an undecided claim:
    no band may hold both; nor may a band be empty, repeat a verdict, or hold an unknown one."""
    with pytest.raises(ValueError, match=message):
        _claim("demo-bad-band", band, _holds)
    with pytest.raises(ValueError, match="printed-number check gives one verdict"):
        _claim("demo-printed-band", ("holds", "inconclusive"), _holds, kind="printed")


def test_expected_labels_must_match_too_in_their_mode(tmp_path):
    """One verdict can cover several outcomes (the joint rule's collapse and no compression both fail): a claim that
    expects labels matches only when the result's labels are those, in the mode they are expected in."""
    def collapsed(ctx):
        return Result("layer 1: collapse", "fails", labels="layer 1 collapse")

    def expecting(labels=None, full=None):
        return Claim(id="demo-labels", tags=("demo",), location="NeurIPS 2023, eq. (0)", statement="s", measures="m", expected="e",
                     expected_verdict="fails", kind="trained", provenance="measurement", measure=collapsed,
                     expected_labels=labels, full_labels=full)

    assert audit([expecting("layer 1 collapse")], output_dir=tmp_path / "a", progress=False, echo=False) == 0
    assert audit([expecting("layer 1 no compression")], output_dir=tmp_path / "b", progress=False, echo=False) == 1
    entry = json.loads((tmp_path / "b" / "report.json").read_text())["claims"][0]
    assert entry["verdict"] == entry["expected_verdict"] == "fails" and not entry["matches_expectation"]
    assert audit([expecting()], output_dir=tmp_path / "c", progress=False, echo=False) == 0  # no labels expected
    # quick mode's labels are not --full's: each mode checks its own, and a mode with none checks none
    claim = expecting("layer 1 no compression", full="layer 1 collapse")
    assert claim.labels_match(collapsed(None), "full") and not claim.labels_match(collapsed(None), "quick")
    assert expecting("layer 1 collapse").labels_match(Result("x", "fails"), "full")
    assert not expecting("layer 1 collapse").labels_match(None, "quick")  # a measurement that raised
    # a label at the rule's boundary may be expected either way; the whole string must match
    assert expecting("layer 1 (no compression|collapse)").labels_match(collapsed(None), "quick")
    assert not expecting("layer 1 (no compression|undecided)").labels_match(collapsed(None), "quick")
    assert not expecting("layer 1").labels_match(collapsed(None), "quick")


def test_figures_are_drawn_on_request_and_under_full_only_by_default(tmp_path):
    """Quick mode draws no figure unless asked (--figures); --full draws them; a claim's None figure is dropped."""
    from verify import plots

    def draw(ctx):
        path = plots.curves(ctx.figure_path("c"), [1, 2], {"a": [1.0, 2.0]}, xlabel="x", ylabel="y", title="t")
        return Result("drawn" if path else "skipped", "holds", {}, [path])

    draws = _claim("zz-figure", "holds", draw)
    for mode, figures, drawn in (("quick", None, False), ("quick", True, True), ("full", None, True),
                                 ("full", False, False)):
        out = tmp_path / f"{mode}-{figures}"
        assert audit([draws], mode=mode, output_dir=out, progress=False, echo=False, figures=figures) == 0
        entry = json.loads((out / "report.json").read_text())["claims"][0]
        assert (entry["measured"] == "drawn") == drawn and len(entry["figures"]) == drawn
        assert (out / "figures" / "zz-figure-c.png").is_file() == drawn
    assert plots.enabled()  # the switch is restored after the audit


def test_a_figure_is_named_after_its_claim_without_saying_a_word_twice(tmp_path):
    """``<id>-<name>.png``, the name left out where the id already holds its words in order."""
    def named(claim_id, name):
        return Context("quick", 0, claim_id, tmp_path).figure_path(name).name

    assert named("table4-dino-knn", "per-layer") == "table4-dino-knn-per-layer.png"
    assert named("fig15-digits-weight-decay", "weight-decay") == "fig15-digits-weight-decay.png"
    assert named("fig21-digits-depth-official", "depth") == "fig21-digits-depth-official.png"
    assert named("approx12-rate", "rates") == "approx12-rate-rates.png"  # another word
    assert (tmp_path / "figures").is_dir()


def test_a_comparison_one_of_several_reads_its_refuting_side_at_its_share_of_the_level():
    """``union`` m: the claimed side at 95%, the refuting side at 1 − 0.05/m (Bonferroni); for a collapse
    (``refutes="holds"``) the other way round. Differences 1.0, 1.2, 1.4 (mean 1.2, sd 0.2): the 95% half-width is
    t(0.975, 2)·0.2/√3 = 0.497; at m = 3 (level 98.33%) t(0.99167, 2) = 7.65 gives 0.883."""
    from scipy import stats

    from verify.statistics import compare, compare_one, union_level

    x = [1.0, 1.2, 1.4]
    assert compare(x, direction="below").verdict == "fails"
    shared = compare(x, direction="below", union=3)
    half = float(stats.t.ppf(1 - 0.05 / 6, 2)) * 0.2 / np.sqrt(3)
    assert shared.refuting.high - 1.2 == pytest.approx(half, rel=1e-12) and union_level(3) == pytest.approx(1 - 0.05 / 3)
    assert shared.verdict == "fails"  # 1.2 − 0.883 = 0.317 > 0: refuted at the stricter level too
    assert compare(x, direction="below", boundary=0.5, union=3).verdict == "inconclusive"  # 0.317 < 0.5 < 0.703
    assert compare(x, direction="below", boundary=0.5).verdict == "fails"  # the plain rule: 0.703 > 0.5
    assert compare(x, direction="above", boundary=0.5, union=3).verdict == "holds"  # the claimed side: 95%
    assert compare(x, direction="above", boundary=0.5, union=3, refutes="holds").verdict == "inconclusive"
    assert compare_one(10.0, [0.0, 0.1, -0.1], direction="below", union=12).verdict == "fails"
    assert compare(x, direction="below").as_dict().keys() < compare(x, direction="below", union=2).as_dict().keys()
    with pytest.raises(ValueError, match="union: expected a number of comparisons >= 1, got 0"):
        compare(x, direction="below", union=0)


def test_one_network_against_a_population_uses_the_prediction_interval():
    """A network drawn from the population itself lies outside the 95% prediction interval in 5% of draws; the
    interval of the seeds' mean, which `compare` on the differences gives, calls it different whenever
    |x − ȳ|/(s/√3) > t₂ = 4.30, i.e. |t₂| > 4.30/√(1 + 3) = 2.15 (x − ȳ has variance 1 + 1/3): in 16.5% of draws.
    2,000 draws of 3 seeds; each rate within three binomial standard errors (0.015, 0.025)."""
    from verify.statistics import compare, compare_one

    rng = np.random.default_rng(0)
    draws = rng.standard_normal((2000, 4))  # column 0: the network; 1–3: the seeds
    decided = np.mean([compare_one(d[0], d[1:], direction="below").verdict != "inconclusive" for d in draws])
    of_the_mean = np.mean([compare(d[0] - d[1:], direction="below").verdict != "inconclusive" for d in draws])
    assert abs(decided - 0.05) < 0.015 and abs(of_the_mean - 0.165) < 0.025
    assert compare_one(-10.0, [0.1, -0.1, 0.0], direction="below").verdict == "holds"
    assert compare_one(10.0, [0.1, -0.1, 0.0], direction="below").verdict == "fails"
    with pytest.raises(ValueError, match="population: a comparison needs at least 3 seeds, got 2"):
        compare_one(0.0, [1.0, 2.0], direction="below")
