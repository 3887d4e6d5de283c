"""ToST (Wu et al., ICLR 2025, arXiv 2412.17810), the white-box successor with linear-time attention: its derivation
(TSSA is a gradient step on a variational compression term that upper-bounds the coding rate), which of its two
public TSSA variants follows that derivation (ToST issue #4), its parameter counts, one ideal layer on synthetic
mixtures, and ToST against CRATE and a standard transformer at laptop scale on the built-in digits and text.

Sources: the claims quote ToST's abstract and its public code's READMEs (RobinWu218/ToST); the derivation is
`crate_theory.tssa`'s (written out in its docstring from the MCR² compression term and the abstract), the code facts
are from reading the public code (its vision ``AttentionTSSA``, language ``CausalSelfAttention_TSSA``). Linear time
and memory are measured by ``benchmarks/tssa.py``, not here.
"""
from __future__ import annotations

import functools

import numpy as np
import torch

import crate_nn
from crate_nn.models.tssa import TSSA
from crate_theory import layer_norm
from crate_theory import tssa as T
from crate_theory.synthetic import orthonormal_bases, sample_tokens
from verify import digits, experiments, verdicts
from verify.claims import language
from verify.context import Context
from verify.numerics import finite_difference_gradient, max_rel_err
from verify.registry import Headline, Result, claim
from verify.statistics import compare, every, interval

SEEDS = 5
"""Independent synthetic data sets per comparison on synthetic mixtures."""
README_PARAMS = {"tost_gpt_base": 110, "tost_gpt_medium": 304, "tost_gpt_large": 655}
"""ToST's language README: ToST-Base / Medium / Large parameters in millions, as nanoGPT prints them."""
ABSTRACT_DERIVATION = ("we derive a novel variational form of the MCR² objective and show that the architecture that "
                       "results from unrolled gradient descent of this variational objective leads to a new attention "
                       "module called Token Statistics Self-Attention (TSSA)")
"""ToST's abstract on its derivation, the statement its derivation claims test."""
ABSTRACT_RESULTS = ("Experiments on vision, language, and long sequence tasks show that simply swapping TSSA for "
                    "standard self-attention, which we refer to as … (ToST), achieves competitive performance with "
                    "conventional transformers")
"""ToST's abstract on its results, the statement its trained comparisons test."""


def _mixture(ctx: Context, stream: str, d: int, n: int, K: int, sigma: float = 0.1):
    """A LayerNorm-scaled token set of the mixture (11) on K orthogonal subspaces of dimension d/K, and its bases."""
    rng = ctx.rng_for(stream)
    U = orthonormal_bases(K, d, d // K, seed=rng)
    return layer_norm(sample_tokens(U, n, rng, sigma=sigma).Z), U


FD_STEP = 1e-4
"""Central differences of step 1e-4: O(h²) truncation, ≈ 1e-8 relative here."""


# ----------------------------------------------------------------------------------------------------------------
# the derivation
# ----------------------------------------------------------------------------------------------------------------
@claim(
    id="tost-abstract-gradient-step", formerly="tost-gradient-step",
    tags=("tost", "tssa", "theory", "nn"),
    location="ToST, abstract: TSSA as unrolled gradient descent on the variational compression term (derived in "
              "crate_theory.tssa, items 3–5)",
    scope="paper", quote=ABSTRACT_DERIVATION,
    statement="TSSA is one gradient-descent step on the variational compression term with Π held fixed: "
              "TSSA(Z) = −τ∇_Z R^c_var(Z, Π | U_[K]); its causal form is, at each position t, the step of the prefix's "
              "term R^c_var(Z_{≤t}, Π_{≤t}) in its last token; crate_nn's tied TSSA block computes the same",
    measures="float64 on LayerNorm-scaled mixture tokens (d 16, n 24, K 4, ε 1, τ 0.7): the closed-form operator "
             "against central finite differences of R^c_var (every entry; the causal form at t = 1, 12, 24); "
             "crate_nn's TSSA (output 'tied', c = d/ε², Π from the 'energy' rule, both paths) against crate_theory",
    expected="`holds` when finite differences agree to 1e-6 relative (their O(h²) truncation is ≈ 1e-8) and "
             "crate_nn to 1e-10 (float64 rounding of the same sums)",
    expected_verdict="holds",
    kind="identity", provenance="analysis",
)
def gradient_step(ctx) -> Result:
    Z, U = _mixture(ctx, "tost-gradient", 16, 24, 4)
    Pi, tau = T.membership(Z, U, 1.0), 0.7
    operator = T.tssa(Z, U, Pi, 1.0, step=tau)
    fd = -tau * finite_difference_gradient(lambda X: T.variational_compression(X, U, Pi, 1.0), Z, FD_STEP)
    errors = {"bidirectional_vs_fd": max_rel_err(operator, fd)}
    causal = T.tssa(Z, U, Pi, 1.0, step=tau, causal=True)
    for t in (1, 12, 24):
        def prefix(column, t=t):
            X = Z[:, :t].copy()
            X[:, -1] = column[:, 0]
            return T.variational_compression(X, U, Pi[:t], 1.0)
        errors[f"causal_t{t}_vs_fd"] = max_rel_err(causal[:, t - 1], -tau * finite_difference_gradient(prefix, Z[:, t - 1:t], FD_STEP)[:, 0])
    for causal_flag in (False, True):
        block = TSSA(16, 4, 4, scale=16.0, membership="energy", output="tied", step=tau, causal=causal_flag).double()
        with torch.no_grad():
            block.qkv.weight.copy_(torch.from_numpy(U.transpose(0, 2, 1).reshape(16, 16)))
        x = torch.from_numpy(Z.T.copy())[None]
        theory = T.tssa(Z, U, Pi, 1.0, step=tau, causal=causal_flag)
        for fused in (True, False):
            block.fused_attn = fused
            with torch.no_grad():
                errors[f"crate_nn_{'causal' if causal_flag else 'bidirectional'}_{'linear' if fused else 'explicit'}"] = \
                    max_rel_err(block(x)[0].numpy().T, theory)
    fd_worst = max(v for k, v in errors.items() if "fd" in k)
    nn_worst = max(v for k, v in errors.items() if "crate_nn" in k)
    return Result(f"vs finite differences ≤ {fd_worst:.1e}; crate_nn vs crate_theory ≤ {nn_worst:.1e}",
                  verdicts.all_hold(verdicts.at_most(fd_worst, 1e-6), verdicts.at_most(nn_worst, 1e-10)), errors)


@claim(
    id="tost-abstract-variational-bound", formerly="tost-variational-bound",
    tags=("tost", "theory"),
    location="ToST, abstract: the variational form of the MCR² compression term (derived in crate_theory.tssa, "
              "item 2)",
    scope="paper", quote="Specifically, we derive a novel variational form of the MCR² objective",
    statement="The variational compression term upper-bounds the coding rate it replaces, "
              "R^c_var(Z, Π | U_[K]) ≥ ½ Σ_k (n_k/n) logdet(I + (d/ε²) U_k*Z diag(π_k) Z*U_k / n_k), with equality when "
              "every U_k is an eigenbasis of its group's second moment",
    measures=f"on LayerNorm-scaled mixtures (d 32, n 64, K 4, σ 0.1), {SEEDS} seeds, Π from the energy rule (soft) "
             "and the true labels (hard): the gap R^c_var − R^c_U with the true subspaces, random subspaces and the "
             "eigenbases; its size relative to R^c_U at the true subspaces (how tight the bound is there)",
    expected="`holds` when every gap is ≥ −1e-12·R^c_U (rounding) and the eigenbasis gaps are ≤ 1e-10·R^c_U",
    expected_verdict="holds",
    kind="identity", provenance="analysis",
)
def variational_bound(ctx) -> Result:
    gaps = {"true": [], "random": [], "eigen": []}
    tightness = []
    for s in range(SEEDS):
        Z, U = _mixture(ctx, f"tost-bound-{s}", 32, 64, 4)
        labels = np.argmax(np.stack([np.linalg.norm(U[k].T @ Z, axis=0) for k in range(4)]), axis=0)
        for Pi in (T.membership(Z, U, 1.0), np.eye(4)[labels]):
            nk = Pi.sum(0)
            eigen = np.stack([np.linalg.eigh(Z @ np.diag(Pi[:, k]) @ Z.T / nk[k])[1][:, -8:] for k in range(4)])
            random = orthonormal_bases(4, 32, 8, seed=ctx.rng_for(f"tost-bound-random-{s}"), coherence=None)
            for name, bases in (("true", U), ("random", random), ("eigen", eigen)):
                rate = T.projected_compression(Z, bases, Pi, 1.0)
                gaps[name].append((T.variational_compression(Z, bases, Pi, 1.0) - rate) / rate)
            tightness.append(gaps["true"][-1])
    lowest = min(min(v) for v in gaps.values())
    verdict = verdicts.all_hold(verdicts.at_least(lowest, -1e-12), verdicts.at_most(max(gaps["eigen"]), 1e-10))
    return Result(f"relative gap (R^c_var − R^c_U)/R^c_U: true U {np.mean(gaps['true']):.3f} (max "
                  f"{max(gaps['true']):.3f}), random U {np.mean(gaps['random']):.3f}, eigenbases "
                  f"{max(np.abs(gaps['eigen'])):.1e}; smallest {lowest:.1e}", verdict,
                  {k: [float(x) for x in v] for k, v in gaps.items()})


def _layer_changes(ctx) -> dict[str, np.ndarray]:
    """Per seed, the change of R^c_var (true U, c = 1) over one ideal ToST layer, Z⁺ = Z + TSSA(Z | U, Π(Z)) with the
    step τ = n/c (see `layer_compresses`): Π held, Π re-estimated from Z⁺, after a LayerNorm; the coding rate R^c_U
    after the LayerNorm; and the LayerNorm-ed step of a control layer with random subspaces."""
    d, n, K = ctx.pick((32, 64, 4), (128, 196, 8))
    eps = np.sqrt(d)  # c = d/ε² = 1, the public code's
    changes = {k: [] for k in ("fixed_pi", "pi_re_estimated", "after_layernorm", "rate_after_layernorm",
                               "random_subspaces_after_layernorm")}
    for s in range(SEEDS):
        Z, U = _mixture(ctx, f"tost-layer-{s}", d, n, K)
        random = orthonormal_bases(K, d, d // K, seed=ctx.rng_for(f"tost-layer-random-{s}"))
        Pi = T.membership(Z, U, 1.0)
        before = T.variational_compression(Z, U, Pi, eps)
        rate = T.projected_compression(Z, U, Pi, eps)

        def rate_var(X, U=U):
            return T.variational_compression(X, U, T.membership(X, U, 1.0), eps)

        after = Z + T.tssa(Z, U, Pi, eps, step=n)
        normed = layer_norm(after)
        control = layer_norm(Z + T.tssa(Z, random, T.membership(Z, random, 1.0), eps, step=n))
        changes["fixed_pi"].append((T.variational_compression(after, U, Pi, eps) - before) / before)
        changes["pi_re_estimated"].append((rate_var(after) - before) / before)
        changes["after_layernorm"].append((rate_var(normed) - before) / before)
        changes["rate_after_layernorm"].append(
            (T.projected_compression(normed, U, T.membership(normed, U, 1.0), eps) - rate) / rate)
        changes["random_subspaces_after_layernorm"].append((rate_var(control) - before) / before)
    return {k: np.array(v) for k, v in changes.items()}


@claim(
    id="tost-abstract-layer-compresses", formerly="tost-layer-compresses",
    tags=("tost", "theory", "ideal"),
    location="ToST, abstract: each layer is an incremental optimization step (a descent step on the variational "
              "compression term)",
    scope="probe",
    quote="each layer of the network is designed to implement an incremental optimization step of a maximal coding "
          "rate reduction objective (MCR²)",
    setting="one ideal ToST layer (the data's subspaces, τ = n/c) on LayerNorm-scaled mixtures (d 32, n 64, K 4; "
            f"--full: d 128, n 196, K 8), Π re-estimated, after a LayerNorm, against random subspaces; {SEEDS} data sets",
    statement="One ToST layer with the data's subspaces lowers the variational compression term of its tokens, also "
              "with the membership re-estimated from its output and after the LayerNorm that precedes the next "
              "layer (so not by shrinking the tokens alone)",
    measures=f"on LayerNorm-scaled mixtures (quick: d 32, n 64, K 4; --full: d 128, n 196, K 8; σ 0.1), {SEEDS} "
             "seeds: the relative change of R^c_var(·, Π | U) (c = d/ε² = 1 as the public code; Π from the energy "
             "rule at inverse temperature 1) over Z⁺ = Z + TSSA(Z | U, Π(Z)) with τ = n/c — the public code's step "
             "with its output map replaced by [U_1 … U_K], and the largest step at which no projected coordinate "
             "changes sign whatever the data (each is scaled by 1 − π/(1 + c s) ∈ (0, 1) for orthogonal "
             "subspaces); controls: Π held fixed, the coding rate R^c_U, a layer with random subspaces",
    expected="`holds` when the 95% intervals (verify.statistics.compare, paired by data set) of the change with Π "
             "re-estimated, of the change after the LayerNorm, and of the latter minus the random-subspace layer's lie "
             "below 0 (verify.statistics.every: `fails` when one lies above 0, else `inconclusive`). With Π held fixed the decrease is certain (every statistic s_ki shrinks and f is increasing). "
             "The control's condition was added after measuring: after the LayerNorm a layer with random subspaces "
             "also lowers R^c_var (quick: −1.4% against −2.6%; --full: −0.8% against −1.5%), so only the difference "
             "is the subspaces' doing",
    expected_verdict="holds",
    kind="ideal", provenance="measurement",
)
def layer_compresses(ctx) -> Result:
    changes = _layer_changes(ctx)
    main = [compare(changes[k], direction="below") for k in ("pi_re_estimated", "after_layernorm")]
    main.append(compare(changes["after_layernorm"], changes["random_subspaces_after_layernorm"], direction="below"))
    verdict = every(main)
    text = "; ".join(f"{k.replace('_', ' ')} {100 * interval(v).mean:+.2f} ± {100 * interval(v).std:.2f}%"
                     for k, v in changes.items())
    return Result(f"relative change: {text}; after LayerNorm − random subspaces {main[-1].text()}", verdict,
                  {k: interval(v).as_dict() for k, v in changes.items()} | {"per_seed": {k: v.tolist()
                                                                                      for k, v in changes.items()}})


# ----------------------------------------------------------------------------------------------------------------
# which TSSA is right (ToST issue #4)
# ----------------------------------------------------------------------------------------------------------------
@claim(
    id="tost-abstract-which-tssa", formerly="tost-which-tssa",
    tags=("tost", "tssa", "theory", "code"),
    location="ToST, abstract, and its code: tost_vision/tost.py AttentionTSSA, tost_lang/model_TSSA.py "
              "CausalSelfAttention_TSSA (its issue #4 asks which of the two is right); crate_theory.tssa",
    scope="paper", quote=ABSTRACT_DERIVATION,
    statement="Both public TSSA variants compute the derived step for their own membership Π: the vision one is the "
              "bidirectional step −π_k ⊙ D_k U_k*Z with c = 1 and Π normalised over all tokens; the language one is "
              "its causal form (prefix statistics, Π normalised over the prefix) plus a learned per-position bias in Π "
              "that no derivation gives; both take the step τ ∝ the number of tokens seen (τ/n absorbed by the "
              "output map), where the exact prefix gradient has τ/t",
    measures="on LayerNorm-scaled mixture tokens (d 32, n 64, K 4, inverse temperature 1 as the code initialises it) "
             "in float64: each re-derived public variant against crate_theory's heads for the same Π; the public "
             "heads (without the code's guards) over the exact prefix-gradient term (should be t); and, as sizes of "
             "the choices, how far Π and the heads move between the normalised and the energy rules, between the "
             "two variants, and with a position bias N(0, 0.1²) (the code starts it at 0 and learns it)",
    expected="`holds` when the variants equal the derived heads to 1e-6 relative (the code's 1e-8 guards) and "
             "the step ratio of those heads is t to 1e-12 (rounding)",
    expected_verdict="holds",
    kind="identity", provenance="analysis",
)
def which_tssa(ctx) -> Result:
    Z, U = _mixture(ctx, "tost-which", 32, 64, 4)
    n = Z.shape[1]
    vision_pi = T.membership(Z, U, 1.0, normalize=True)
    language_pi = T.membership(Z, U, 1.0, normalize=True, causal=True)
    energy_pi = T.membership(Z, U, 1.0)
    vision = T.public_vision_heads(Z, U, 1.0)
    language = T.public_language_heads(Z, U, 1.0, np.zeros((4, n)))
    derived_vision = T.tssa_heads(Z, U, vision_pi, 1.0)
    derived_causal = T.tssa_heads(Z, U, language_pi, 1.0, causal=True)
    # the exact causal step with τ = 1 and c = d/ε² = 1 (ε = √d): column t carries 1/t
    exact = T.tssa(Z, U, language_pi, eps=np.sqrt(32), step=1.0, causal=True)
    lifted = np.einsum("kdp,kpn->dn", U, derived_causal)  # the code's heads without its 1e-8 guards
    ratio = np.linalg.norm(lifted, axis=0) / np.linalg.norm(exact, axis=0)
    bias = ctx.rng_for("tost-which-bias").normal(0, 0.1, (4, n))
    numbers = {
        "vision_vs_derived": max_rel_err(vision, derived_vision),
        "language_vs_derived_causal": max_rel_err(language, derived_causal),
        "step_ratio_error": float(np.abs(ratio / np.arange(1, n + 1) - 1).max()),
        "pi_normalised_vs_energy_max_abs": float(np.abs(vision_pi - energy_pi).max()),
        "heads_normalised_vs_energy": max_rel_err(T.tssa_heads(Z, U, energy_pi, 1.0), derived_vision),
        "pi_vision_vs_language_max_abs": float(np.abs(vision_pi - language_pi).max()),
        "heads_vision_vs_language": max_rel_err(language, vision),
        "heads_vision_vs_language_last_token": max_rel_err(language[..., -1], vision[..., -1]),
        "heads_language_bias_effect": max_rel_err(T.public_language_heads(Z, U, 1.0, bias), language),
    }
    verdict = verdicts.all_hold(verdicts.at_most(numbers["vision_vs_derived"], 1e-6),
                                verdicts.at_most(numbers["language_vs_derived_causal"], 1e-6),
                                verdicts.at_most(numbers["step_ratio_error"], 1e-12))
    return Result(f"vision = derived to {numbers['vision_vs_derived']:.1e}, language = derived causal to "
                  f"{numbers['language_vs_derived_causal']:.1e}, step ratio t to {numbers['step_ratio_error']:.0e}; "
                  f"vision vs language heads differ by {numbers['heads_vision_vs_language']:.2f} (last token "
                  f"{numbers['heads_vision_vs_language_last_token']:.2f}), Π rules by "
                  f"{numbers['pi_normalised_vs_energy_max_abs']:.2f}", verdict, numbers)


@claim(
    id="tost-readme-params-lm", formerly="tost-params-lm",
    tags=("tost", "params", "nn", "language"),
    location="ToST, its language README, tost_lang/README.md (ToST-Base / Medium / Large 110M / 304M / 655M); its "
              "train.py (bias=False) and model_TSSA.py",
    scope="paper", quote="| tost-base | 110M | … | tost-medium | 304M | … | tost-large | 655M |",
    statement="ToST's language models have 110M / 304M / 655M parameters (Base d 768 L 12, Medium d 1024 L 24, "
              "Large d 1280 L 36)",
    measures="crate_nn's tost_gpt_* (meta device) with the public model's differences applied: no biases, "
             "LayerScale (2d per layer), the learned per-position bias of Π (K × 1,024 per layer), the position "
             "embedding left out as nanoGPT prints",
    expected="`holds` when each is within the README's rounding (±0.5M)",
    expected_verdict="holds",
    kind="printed", provenance="analysis",
)
def params_lm(ctx) -> Result:
    counts, ours = {}, {}
    for name in README_PARAMS:
        with torch.device("meta"):
            model = crate_nn.create_model(name)
        cfg = model.config
        total = sum(p.numel() for p in model.parameters())
        biases = sum(p.numel() for n, p in model.named_parameters() if n.endswith(".bias"))
        ours[name] = total
        counts[name] = total - biases - model.wpe.weight.numel() + cfg.depth * (2 * cfg.dim + cfg.heads * cfg.block_size)
    gaps = {n: abs(counts[n] / 1e6 - README_PARAMS[n]) for n in counts}
    return Result(", ".join(f"{n} {counts[n] / 1e6:.2f}M (ours {ours[n] / 1e6:.2f}M)" for n in counts),
                  verdicts.all_hold(*(verdicts.at_most(g, 0.5) for g in gaps.values())),
                  {"authors_modules": counts, "ours": ours, "readme_millions": README_PARAMS})


# ----------------------------------------------------------------------------------------------------------------
# laptop scale: ToST against CRATE and a standard transformer, same size, data and recipe
# ----------------------------------------------------------------------------------------------------------------
TRAINED_SEEDS = 3
"""Runs per model (the audit's minimum for a comparison); seed i shares its data order and initialisation seed
across the models, so the comparisons are paired."""
MARGIN = 0.01
"""'Competitive' read as: mean test accuracy not more than 1 point (3.6 of the 360 test digits) below, the 95%
interval of the paired difference above −1 point."""


def _digits_runs(ctx) -> dict[str, list[dict]]:
    """{model: [metrics of each seed]} for ToST (tost_digits), CRATE (digits) and ViT (digits, --model vit_tiny), at
    the digits claims' budget of the mode; CRATE's runs are those of verify.digits."""
    return _digits_metrics(ctx.mode, ctx.seed)


@functools.cache
def _digits_metrics(mode: str, seed: int) -> dict[str, list[dict]]:
    epochs = digits.BUDGETS[mode].epochs
    configs = {"ToST": digits.recipe(epochs, preset="tost_digits"), "CRATE": digits.recipe(epochs),
               "ViT": digits.recipe(epochs).replace(model="vit_tiny")}
    return {name: [run.metrics for run in experiments.runs(config, experiments.seeds(seed, TRAINED_SEEDS))]
            for name, config in configs.items()}


def _accuracies(runs: dict[str, list[dict]]) -> dict[str, np.ndarray]:
    return {name: np.array([m["test_top1"] for m in metrics]) for name, metrics in runs.items()}


def _table(values: dict[str, np.ndarray], scale: float = 100.0, digits_: int = 2) -> str:
    return ", ".join(f"{name} {scale * v.mean():.{digits_}f} ± {scale * v.std(ddof=1):.{digits_}f}"
                     for name, v in values.items())


DIGITS_SCALE = f"8×8 digits, d 96, L 3, K 4, 30 epochs, {TRAINED_SEEDS} seeds"


def _digits_claim(other: str, expected_verdict: str, note: str) -> None:
    conventional = other == "ViT"  # the abstract's claim is against conventional transformers; CRATE is our probe

    @claim(
        id=f"tost-abstract-digits-vs-{other.lower()}", formerly=f"tost-digits-vs-{other.lower()}",
        tags=("tost", "digits", "nn", "trained"),
        location="ToST, abstract: ToST 'achieves competitive performance with conventional transformers' (its "
                  "ImageNet table was not available to this project)",
        scope="replication" if conventional else "probe", quote=ABSTRACT_RESULTS,
        setting=DIGITS_SCALE if conventional else f"ToST against CRATE, which is no conventional transformer: "
                                                  f"{DIGITS_SCALE}",
        statement=f"At the same size, data and recipe, ToST's test accuracy on the built-in digits is competitive with "
                  f"{other}'s: not more than 1 point below",
        measures=f"test top-1 on the 360 held-out digits of ToST (preset tost_digits), CRATE (digits) and ViT "
                 f"(digits with vit_tiny), d 96, L 3, K 4, the presets' 30 epochs, {TRAINED_SEEDS} seeds paired by data "
                 "order and initialisation seed (≈ 5 min of training on a loaded core)",
        expected=f"`holds` when the 95% interval of ToST − {other} lies above −1 point (verify.statistics.compare). "
                 + note,
        expected_verdict=expected_verdict,
        modes=("full",), committed="tost",
        kind="trained", provenance="measurement",
    )
    def measure(ctx) -> Result:
        acc = _accuracies(_digits_runs(ctx))
        comparison = compare(acc["ToST"], acc[other], direction="above", boundary=-MARGIN)
        return Result(f"{_table(acc)} %; ToST − {other} {comparison.text()}", comparison.verdict,
                      {"test_top1": {k: v.tolist() for k, v in acc.items()}, "comparison": comparison.as_dict()},
                      [], Headline.of(f"ToST − {other} (points)", comparison.difference, scale=100))


_digits_claim("ViT", "inconclusive", "Found by measuring: ToST 97.13 ± 1.05% against ViT 97.69 ± 0.32% (the "
              "committed run, seeds 0–2; an earlier code gave 97.41 ± 0.89 vs 97.13 ± 0.58%); the interval of the "
              "difference, [−3.6, +2.5] points, contains the −1 point boundary: three seeds cannot tell")
_digits_claim("CRATE", "inconclusive", "Found by measuring: ToST 97.13 ± 1.05% against CRATE 97.78 ± 0.00% (the "
              "committed run, seeds 0–2; earlier 97.41 vs 98.06%); interval [−3.3, +2.0] points")


def _lm_losses(ctx) -> dict[str, np.ndarray]:
    """Final validation losses of each model trained with the gpt_stdlib recipe of the language claims, one per
    seed (CRATE-GPT's and the standard GPT's runs are table6-gpt-vs-crate-gpt's: the same configs, so the same cache entries)."""
    models = {"ToST": "tost_gpt_base", "CRATE-GPT": "crate_gpt_small", "GPT": "gpt_small"}
    config = language._config(ctx.quick, "CRATE-GPT")
    return {name: np.array([run.metrics["val_loss"] for run in experiments.runs(
                config.replace(model=model), experiments.seeds(ctx.seed, TRAINED_SEEDS))])
            for name, model in models.items()}


README_LOSSES = {"GPT": "| gpt2-base | 124M | 2.84 | 4.32 | 4.13 | 5.75 |",
                 "ToST": "| tost-base | 110M | 3.20 | 4.98 | 4.77 | 6.39 |"}
"""The rows of ToST's language README (OpenWebText, Lambada, Wikitext, PTB validation losses) that its claims quote."""
LM_SCALE = f"the standard library's source as bytes, d 128, K 4, L 4, the gpt_stdlib recipe, {TRAINED_SEEDS} seeds"


def _lm_claim(lower: str, higher: str, statement: str, printed: str, expected_verdict: str, provenance: str,
             note: str) -> None:
    with_crate = "CRATE-GPT" in (lower, higher)  # the README prints no CRATE-GPT: that comparison is our probe

    @claim(
        id=f"tost-readme-stdlib-{'vs-crate' if with_crate else 'vs-gpt'}",
        formerly=f"tost-stdlib-{'vs-crate' if with_crate else 'vs-gpt'}",
        tags=("tost", "language", "nn", "trained"),
        location="ToST, its language README, tost_lang/README.md" + (
            ", and the long version's Table 6, from another recipe" if with_crate else "")
            + f" (OpenWebText validation loss: {printed})",
        scope="probe" if with_crate else "replication",
        quote=README_LOSSES["ToST"] + (" … crate-GPT2-Base 60M 3.37 4.91 4.61 5.53 4.61 (long version, Table 6)"
                                        if with_crate else " … " + README_LOSSES["GPT"]),
        setting=(f"ToST against CRATE-GPT at one recipe, which no paper compares: {LM_SCALE}" if with_crate
                 else LM_SCALE),
        statement=statement,
        measures=f"validation cross-entropy (nats per byte) on the built-in corpus of ToST (preset tost_stdlib), "
                 "CRATE-GPT (gpt_stdlib) and the standard GPT of the same d 128, K 4, L 4 and recipe, "
                 f"{TRAINED_SEEDS} seeds paired by seed",
        expected=f"`holds` when the 95% interval of {lower} − {higher} lies below 0. " + note,
        expected_verdict=expected_verdict,
        modes=("full",), committed="tost",
        kind="trained", provenance=provenance,
    )
    def measure(ctx) -> Result:
        losses = _lm_losses(ctx)
        comparison = compare(losses[lower], losses[higher], direction="below")
        return Result(f"{_table(losses, 1.0, 3)}; {lower} − {higher} {comparison.text()}", comparison.verdict,
                      {"val_loss": {k: v.tolist() for k, v in losses.items()}, "comparison": comparison.as_dict()},
                      [], Headline.of(f"{lower} − {higher}", comparison.difference))


_lm_claim("ToST", "CRATE-GPT", "ToST's causal language model reaches a lower validation loss than CRATE-GPT of "
          "the same width", "ToST-Base 3.20, CRATE-GPT-Base 3.37", "inconclusive", "measurement",
          "Expected `holds` from the printed numbers; found by measuring: ToST 2.195 ± 0.0037 against CRATE-GPT "
          "2.208 ± 0.038 nats per byte, the difference's interval [−0.11, +0.09] contains 0 (CRATE-GPT's seeds "
          "spread ten times ToST's)")
_lm_claim("GPT", "ToST", "A standard GPT of the same width reaches a lower validation loss than ToST",
          "GPT-2 Base 2.84, ToST-Base 3.20", "holds", "analysis", "Measured: GPT 1.701 ± 0.016 against ToST 2.195 ± 0.0037, "
          "0.49 nats lower (the printed OWT gap is 0.36)")
