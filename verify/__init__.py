"""verify: the derivation audit of the CRATE papers (``python -m verify``).

Every checkable claim of the papers (docs/papers.md indexes them) is a :class:`~verify.registry.Claim` in
``verify/claims/``: a statement, its reference, a measurement, the verdict it expects with the provenance of that
expectation (an analysis written before measuring, or a measurement), and its kind (identity, printed number,
control, theory, ideal stack, trained network). ``python -m verify`` measures them all and writes ``report.md``,
``report.json`` and figures.
"""
from verify.registry import KINDS, PROVENANCES, VERDICTS, Claim, Headline, Result, all_claims, claim, select

__all__ = ["KINDS", "PROVENANCES", "VERDICTS", "Claim", "Headline", "Result", "all_claims", "claim", "select"]
