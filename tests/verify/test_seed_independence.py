"""``python -m verify --seed S`` gives the same verdicts for any base seed S.

test_claims.py checks every quick claim at the default base seed 0; here a selection is measured again with base
seeds 1 and 2 and must give the same (the expected) verdicts. The selection, and why:

* every quick claim that trains no model — the theory claims (calculus, compression, denoising, diffusion,
  sparsification, Theorem 16, the decoder), the ideal-stack claims with their controls (among them
  2.24-ideal-random-layers, whose effect is at the seed spread and which takes ten data sets for it), the random
  CRATEs of 2.24-random-init-flat, parameter counts, cross-implementation checks, eq. (437) and MaskCut: they draw
  all their data from the base seed and take seconds together;
* not 2.24-ideal-orientation, whose quick verdict does change with the base seed (`SEED_DEPENDENT`);
* one claim on trained models, 2.24-gpt-official: its five tiny CRATE-GPT runs per base seed train in ≈ 10 s.

The other trained-model claims (digits, MAE, DINO, the GPT comparisons) would each train their five or three runs
again for every base seed: minutes of CI per seed, so they are checked by hand (``python -m verify --seed S``) and
their expectations say how they were measured. Table 17 reads the committed run whatever the seed.
"""
import pytest

from verify.registry import all_claims
from verify.runner import run_claims

TRAINED = {"digits", "mae", "dino", "language", "table17"}
"""Tags of the claims that read trained models."""
SEED_DEPENDENT = {"2.24-ideal-orientation"}
"""The one fast claim whose quick verdict is known to change with the base seed: its layer 2 → L compression in the
axis-aligned stack is ≈ −0.004 of the specific R^c, the half-width of its interval (holds at base seeds 0 and 2,
inconclusive at 1, with 16 or with 40 data sets); its expectation says so."""
SELECTED = [c for c in all_claims() if "quick" in c.modes and not TRAINED & set(c.tags) and c.id not in SEED_DEPENDENT]
SELECTED += [c for c in all_claims() if c.id == "2.24-gpt-official"]


def test_the_selection_is_large_and_holds_the_claims_the_docstring_names():
    ids = {c.id for c in SELECTED}
    assert len(ids) >= 50 and {"2.24-ideal-random-layers", "2.24-random-init-flat", "2.24-gpt-official"} <= ids


@pytest.mark.parametrize("seed", [1, 2])
def test_verdicts_do_not_depend_on_the_base_seed(seed, tmp_path, monkeypatch):
    monkeypatch.setenv("CRATE_WHITEBOX_CACHE", str(tmp_path / "cache"))
    outcomes = run_claims(SELECTED, mode="quick", seed=seed, output_dir=tmp_path, progress=False)
    differ = {o.claim.id: (o.verdict, o.claim.expected_verdict, o.result.measured if o.result else o.error)
              for o in outcomes if not o.matches}
    assert not differ, f"base seed {seed}: {differ}"
