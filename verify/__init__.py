"""verify: the derivation audit of the CRATE papers (``python -m verify``).

Every checkable claim of the papers (paper-notes §2) is a :class:`~verify.registry.Claim` in
``verify/claims/``: a statement, its reference, a measurement on synthetic data and the verdict its analysis
expects. ``python -m verify`` measures them all and writes ``report.md``, ``report.json`` and figures.
"""
from verify.registry import VERDICTS, Claim, Result, all_claims, claim, select

__all__ = ["VERDICTS", "Claim", "Result", "all_claims", "claim", "select"]
