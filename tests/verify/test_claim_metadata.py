"""What every claim declares: its scope, the statement it tests quoted with its location in the papers, ids named
after the papers' objects (each former id kept in ``formerly``), and no verdict written by hand."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from verify.registry import SCOPES, SOURCES, VERDICTS, all_claims

CLAIMS = all_claims()
CLAIMS_DIR = Path(__file__).resolve().parents[2] / "verify" / "claims"
MODULES = sorted(p.stem for p in CLAIMS_DIR.glob("*.py") if p.stem != "__init__")

FORMER_IDS = (
    "2.1-sylvester", "2.1-rc-sum", "2.1-rotation-invariance", "2.2-grad-R", "2.2-grad-Rc", "2.3-hessian",
    "2.4-lemma11", "2.5-equivariance", "2.5-eq121-as-printed", "2.1-beta-N-vs-n", "2.6-neumann-rate",
    "2.6-neumann-beyond-1", "2.7-approx9-cosine", "2.7-approx9-descent", "2.7-approx9-second-order",
    "2.8-free-output-contains-paper", "2.7-approx9-attention-term", "2.7-sum-projectors", "2.9-ista-prox-step",
    "2.9-ista-converges", "2.10-ista-orthogonal", "2.10-soft-threshold", "2.11-mm-gradient", "2.11-mm-majoriser",
    "2.11-mm-lipschitz", "2.11-mm-step", "2.11-mm-descent", "2.11-mm-tight-step", "2.8-nn-mssa", "2.9-nn-ista",
    "2.8-nn-encoder", "2.22-nn-decoder", "2.12-prop14", "2.12-prop14-unnormalised", "2.13-tweedie",
    "2.14-approx12-rate", "2.14-denoising-rate", "2.14-softmax-one-hot", "2.15-pk-limit", "2.12-neurips-prop1",
    "2.16-good-event", "2.16-nominal-floor", "2.16-exact-a-nominal", "2.16-noise-retention",
    "2.17-projection-limit", "2.18-beta-at-least-1", "2.17-remark17-optimal-eps", "2.17-remark17-residual",
    "2.17-delta-r-zero-shrinkage", "2.17-remark18-coherence", "2.19-ve-sde-marginals", "2.19-pf-ode",
    "2.20-structured-denoising-ode", "2.21-geometric-grid", "2.21-encoder-euler", "2.20-rc-as-score",
    "2.20-score-scale", "2.21-t1-as-printed", "2.20-denoising-flow", "2.20-round-trip", "2.20-direction-as-printed",
    "2.22-decoder-inverse", "2.22-decoder-remark7-printed", "2.22-decoder-remark7-eta", "2.23-params-tiny",
    "2.23-params-small", "2.23-params-base", "2.23-params-large", "2.23-in21k-figures", "2.24-ideal-compression",
    "2.24-ideal-half-steps", "2.24-ideal-shrink", "2.24-ideal-attention-credit", "2.24-ideal-random-layers",
    "2.24-ideal-orientation", "2.24-ideal-sparsity", "2.8-temperature", "2.24-digits-paper", "2.24-digits-official",
    "2.24-digits-joint", "2.24-digits-weight-decay", "2.24-digits-depth", "2.24-digits-sparsity",
    "2.24-digits-incoherence", "2.24-digits-low-rank", "2.24-random-init-flat", "2.24-fig15-epoch1-official",
    "2.24-fig15-epoch1-paper", "2.24-fig15-epoch1-sparsity", "2.24-fig15-end-official", "2.24-fig15-end-paper",
    "2.24-fig15-end-sparsity", "2.24-fig21-depth-official", "2.24-fig21-depth-paper", "2.24-fig21-depth-sparsity",
    "2.24-fig26-compression", "2.24-fig26-sparsity", "2.24-fig26-caption", "2.23-params-mae-small",
    "2.23-params-mae-base", "2.23-params-mae-large", "2.22-mae-roundtrip", "2.22-mae-roundtrip-standardised",
    "2.22-mae-roundtrip-training", "2.24-mae-encoder-step", "2.22-mae-decoder-step", "2.24-mae-joint",
    "2.24-mae-compression-paper", "2.24-mae-compression-official", "2.24-mae-sparsity", "2.24-mae-probe",
    "2.24-mae-pixels", "2.24-table2-vit-mae", "4.1.3-dino-knn-short", "4.1.3-dino-pixels-short",
    "4.1.3-dino-compression-paper-short", "4.1.3-dino-compression-official-short", "4.1.3-dino-sparsity-short",
    "4.1.3-dino-knn", "4.1.3-dino-pixels", "4.1.3-dino-compression-paper", "4.1.3-dino-compression-official",
    "4.1.3-dino-sparsity", "4.1.3-dino-joint", "4.1.3-simdino-knn", "4.1.3-simdino-pixels",
    "4.1.3-dino-vit-vs-crate", "4.1.3-simdino-vit-vs-crate", "4.1.3-simdino-vs-dino", "2.23-params-crate-gpt",
    "2.23-params-gpt2", "2.23-params-crate-bert", "2.8-causal-mask", "4.1.4-table16-without-ista",
    "4.1.4-table6-crate-vs-gpt", "2.24-gpt-paper", "2.24-gpt-official", "2.24-gpt-sparsity", "2.24-gpt-joint",
    "4.1.4-bert-pretraining", "4.1.4-table5-crate-vs-bert", "4.3-eq437", "4.3-maskcut-subspaces",
    "4.3-maskcut-printed", "4.3-table17-emergence", "4.3-table17-attention", "4.3-table17-vit-attention",
    "4.3-table17-maskcut", "4.3-table17-mssa-in-vit", "4.3-table17-accuracy", "C.5-table11-eta",
    "C.5-table11-lambda", "C.5-table12-tied-output", "C.5-table12-mm-step", "C.5-table13-soft-threshold",
    "C.6-table15-without-ista", "C.5-table11-eta-mnist5k", "C.5-table12-mm-step-mnist5k",
    "C.5-table13-soft-threshold-mnist5k", "C.6-table15-without-ista-mnist5k", "tost-gradient-step",
    "tost-variational-bound", "tost-layer-compresses", "tost-which-tssa", "tost-params-lm", "tost-digits-vs-vit",
    "tost-digits-vs-crate", "tost-stdlib-vs-crate", "tost-stdlib-vs-gpt",
)
"""Every claim id of the audit before its ids were named after the papers' objects: each is some claim's former id."""

OBJECT = re.compile(r"^(neurips-|tost-|simdino-)?(eqs?|fig|figs|table|tables|sec|app|remark|lemma|thm|prop|approx|alg|"
                    r"footnote|abstract|readme)[0-9a-z.]*(-[0-9a-z.]+)*$")
"""A claim id: the papers' object it tests (long version unless prefixed by another source), then a short name."""
UNCITABLE = re.compile(r"(?<![\d.])\b(004|000)\b|paper-notes|\.\./shared|official-implementation\.md")
"""Names of files outside the repository, which no reader has (not the digits of a number such as 0.004)."""


def _claims(module: str):
    return [c for c in CLAIMS if c.module == module]


@pytest.mark.parametrize("module", MODULES)
def test_claims_declare_scope_quote_and_location(module):
    for c in _claims(module):
        assert c.scope in SCOPES, c.id
        assert c.quote and len(c.quote) <= 240, c.id
        assert any(c.location.startswith(label) for label in SOURCES), (c.id, c.location)
        assert c.scope == "paper" or c.setting, c.id
        assert OBJECT.match(c.id), c.id
        for name in ("location", "statement", "measures", "expected", "quote", "setting"):
            text = getattr(c, name) or ""
            assert not UNCITABLE.search(text), (c.id, name, text)


@pytest.mark.parametrize("module", MODULES)
def test_no_verdict_written_by_hand(module):
    """A claim's verdict comes from a rule of verify.statistics (over seeds) or verify.verdicts (a figure against a
    threshold): no conditional expression or call argument in a claim module is a verdict string."""
    tree = ast.parse((CLAIMS_DIR / f"{module}.py").read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.IfExp):
            branches = (node.body, node.orelse)
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Result":
            branches = tuple(node.args[1:2]) + tuple(k.value for k in node.keywords if k.arg == "verdict")
        else:
            continue
        if any(isinstance(b, ast.Constant) and b.value in VERDICTS for b in branches):
            found.append(node.lineno)
    assert not found, f"verify/claims/{module}.py: verdicts written by hand at lines {found}"


def test_former_ids_are_kept():
    """Every former id names exactly one claim today (``--only`` accepts it), once every module is converted."""
    owners = {}
    for c in CLAIMS:
        for old in c.formerly:
            assert old not in owners, (old, owners.get(old), c.id)
            owners[old] = c.id
    assert not set(FORMER_IDS) - set(owners), sorted(set(FORMER_IDS) - set(owners))
