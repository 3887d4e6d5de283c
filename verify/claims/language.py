"""The language-model claims (Sec. 4.1.4, App. C.4, C.6; Tables 6, 10, 16; paper-notes §2.8, §2.23, §2.24):
parameter counts of Table 10, the causal mask of eq. (87), and CRATE-GPT trained on the built-in corpus (the
standard library's source as byte tokens) — its layer-wise R^c and sparsity against its own initialisation, and its
validation loss against the without-ISTA ablation and a standard GPT of the same width, same data and same recipe.

Quick mode trains tiny models (d = 48, K = 2, L = 2, 64-byte windows, 100 steps, one seed: ≈ 5 s on one core); ``--full`` trains the
``gpt_stdlib`` preset (d = 128, K = 4, L = 4, 128-byte windows, 600 steps) with three seeds and reports mean ± std.
Every trained run (its initialisation, its weights, its final validation loss) is cached in
``verify.context.cache_dir()/verify`` under a hash of its configuration.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import io
import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import torch

import crate_nn
from crate_nn.data.text import TokenBlocks, builtin_corpus
from crate_nn.engine import train
from crate_nn.evaluation.language import spread
from crate_nn.models import BlockConfig
from crate_nn.models.blocks import build_attention
from crate_nn.models.mssa import HeadAttention
from crate_nn.tasks import get_preset
from verify import plots, verdicts
from verify.context import cache_dir
from verify.registry import Headline, Result, claim

# ----------------------------------------------------------------------------------------------------------------
# Table 10: parameter counts
# ----------------------------------------------------------------------------------------------------------------
TABLE_10 = {
    "crate-gpt": {"crate_gpt_base": (60, 1.0), "crate_gpt_large": (242, 1.0)},
    "gpt2": {"gpt_small": (64, 1.0), "gpt_base": (124, 1.0), "gpt_large": (774, 1.0)},
    "crate-bert": {"crate_bert_medium": (33, 1.0), "crate_bert_base": (60.9, 0.1), "crate_bert_large": (129, 1.0)},
}
"""Printed counts (millions) and the unit of their last printed digit: Table 10, and 60.9M in the text (Sec. 4.1.4)."""
POSITIONS = {"crate_gpt_base": 1024 * 768, "crate_gpt_large": 1024 * 1280}


def _count(name: str) -> int:
    with torch.device("meta"):
        model = crate_nn.create_model(name)
    return sum(p.numel() for p in model.parameters())


def _params_claim(group: str, sizes: dict[str, tuple[float, float]], expected_verdict: str, note: str) -> None:
    printed = ", ".join(f"{n} {m}M" for n, (m, _) in sizes.items())

    @claim(
        id=f"2.23-params-{group}",
        tags=("params", "nn", "language"),
        reference="004 Table 10, Sec. 4.1.4",
        statement=f"Table 10's parameter counts: {printed}",
        measures="parameters of crate_nn.create_model(name) (tied weights once), built on the meta device",
        expected=f"each within the printed rounding (|Δ| ≤ half a unit of the last printed digit). {note}",
        expected_verdict=expected_verdict,
        kind="printed", provenance="analysis" if group == "gpt2" else "measurement",
    )
    def measure(ctx) -> Result:
        counts = {name: _count(name) for name in sizes}
        gaps = {name: abs(counts[name] / 1e6 - sizes[name][0]) for name in sizes}
        verdict = verdicts.all_hold(*(verdicts.at_most(gaps[n], sizes[n][1] / 2) for n in sizes))
        without_positions = {n: counts[n] - POSITIONS[n] for n in sizes if n in POSITIONS}
        return Result(", ".join(f"{n} {counts[n] / 1e6:.2f}M" for n in sizes), verdict,
                      {"counts": counts, "printed_millions": {n: m for n, (m, _) in sizes.items()},
                       "gap_millions": gaps, "without_position_embedding": without_positions})


_params_claim("crate-gpt", TABLE_10["crate-gpt"], "fails",
              "Expected to fail (found by counting): crate-lm's modules give 60.70M and 242.88M; Table 10's 60M and "
              "242M match nanoGPT's printed count, which leaves out the position embedding (59.91M, 241.57M)")
_params_claim("gpt2", TABLE_10["gpt2"], "holds", "GPT-2 with a final LayerNorm and vocabulary 50,304 (nanoGPT)")
_params_claim("crate-bert", TABLE_10["crate-bert"], "holds",
              "With learned positions and RoBERTa's LM head (sinusoids or eq. 84's linear head give 60.5M / 60.3M)")


# ----------------------------------------------------------------------------------------------------------------
# eq. (87): the causal mask
# ----------------------------------------------------------------------------------------------------------------
@torch.no_grad()
def _causal_mask_errors(attention: str, seed: int) -> dict[str, float]:
    """Both attention paths of a causal block against softmax(CausalMask(A)) built from eq. (87), in float64."""
    torch.manual_seed(seed)
    config = BlockConfig(dim=24, heads=3, attention=attention, causal=True)
    block: HeadAttention = build_attention(config).double()
    x = torch.randn(2, 9, 24, dtype=torch.float64)
    q, k, v = block.qkv_heads(x)
    a = (q @ k.transpose(-2, -1)) * block.scale  # row convention: A_row[j, i] = paper's A[i, j]
    paper = a.transpose(-2, -1).clone()  # column convention: column j is query j
    n = paper.shape[-1]
    i, j = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
    paper[..., i > j] = float("-inf")  # eq. (87): CausalMask(A)_ij = A_ij if i ≤ j, −∞ otherwise
    reference = paper.softmax(dim=-2).transpose(-2, -1)  # the paper's column softmax, back to rows
    _, weights = block.forward_with_attention(x)
    explicit = block._combine(reference @ v)
    block.fused_attn = True
    fused = block(x)
    block.fused_attn = False
    x_changed = x.clone()
    x_changed[:, 5] += 1.0
    leaked = (block(x_changed)[:, :5] - block(x)[:, :5]).abs().max()
    return {"weights": float((weights - reference).abs().max()), "fused": float((fused - explicit).abs().max()),
            "explicit": float((block(x) - explicit).abs().max()), "leak_before_t": float(leaked)}


@claim(
    id="2.8-causal-mask",
    tags=("mssa", "nn", "language"),
    reference="004 eqs. (86)–(87)",
    statement="CRATE-GPT's attention is softmax(CausalMask((U_k*Z)*(U_k*Z))) with CausalMask(A)_ij = A_ij for "
              "i ≤ j and −∞ otherwise, column j being query j",
    measures="MSSA and MHSA with causal=True, both paths (fused SDPA and explicit), against eq. (87) built in the "
             "column convention, float64; and the outputs before position t when token t changes",
    expected="every difference ≤ 1e-12 (float64 rounding of the same sums)",
    expected_verdict="holds",
    kind="identity", provenance="analysis",
)
def causal_mask(ctx) -> Result:
    errors = {attention: _causal_mask_errors(attention, ctx.torch_seed) for attention in ("mssa", "mhsa")}
    worst = max(v for e in errors.values() for v in e.values())
    return Result(f"largest difference {worst:.1e} over weights, fused and explicit outputs, earlier positions",
                  verdicts.at_most(worst, 1e-12), errors)


# ----------------------------------------------------------------------------------------------------------------
# CRATE-GPT trained on the built-in corpus
# ----------------------------------------------------------------------------------------------------------------
VARIANTS = {
    "CRATE-GPT": ("crate_gpt_small", {}),
    "without ISTA": ("crate_gpt_small", {"feedforward": "none"}),
    "standard GPT": ("gpt_small", {}),
}
"""The compared models: the same width, depth, heads, data and recipe; only the blocks differ (Tables 6 and 16)."""
QUICK = dict(model_args=dict(dim=48, heads=2, depth=2), block_size=64, batch_size=16, total_steps=100,
             warmup_steps=10, eval_every_steps=None, eval_batch_size=16, val_batches=20)
MEASURE_WINDOWS = 16


def _config(ctx, variant: str, seed: int):
    model, extra = VARIANTS[variant]
    config = get_preset("gpt_stdlib", progress=False, measure_sequences=0, seed=seed, model=model)
    if ctx.quick:
        config = dataclasses.replace(config, **QUICK)
    return dataclasses.replace(config, model_args={**config.model_args, **extra})


def _seeds(ctx) -> list[int]:
    return [ctx.seed] if ctx.quick else [ctx.seed + k for k in range(3)]


@functools.lru_cache(maxsize=32)
def _trained(config_json: str) -> dict:
    """Train the run (or read it from the cache): paths of its initialisation and weights, its final val_loss."""
    config = get_preset("gpt_stdlib", **json.loads(config_json))
    config = dataclasses.replace(config, betas=tuple(config.betas))
    key = hashlib.sha1(config_json.encode()).hexdigest()[:12]
    folder = cache_dir() / "verify" / f"lm-{key}"
    summary = folder / "summary.json"
    if not summary.exists():
        folder.mkdir(parents=True, exist_ok=True)
        torch.manual_seed(config.seed)
        init = crate_nn.create_model(config.model, **{"block_size": config.block_size,
                                                      "vocab_size": builtin_corpus().vocab_size,
                                                      **config.model_args})
        with tempfile.TemporaryDirectory(dir=folder) as tmp:
            crate_nn.save(Path(tmp) / "init.pt", init)
            run = dataclasses.replace(config, output_dir=str(Path(tmp) / "run"), init_from=str(Path(tmp) / "init.pt"))
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                result = train(run)
            os.replace(Path(tmp) / "init.pt", folder / "init.pt")
            shutil.copyfile(result.checkpoint, folder / "trained.pt")
        summary.write_text(json.dumps({"val_loss": result.metrics["val_loss"], "seconds": result.seconds}) + "\n")
    return {"init": str(folder / "init.pt"), "trained": str(folder / "trained.pt"), "cache": str(folder),
            **json.loads(summary.read_text())}


def _run(ctx, variant: str, seed: int) -> dict:
    fields = {k: v for k, v in dataclasses.asdict(_config(ctx, variant, seed)).items()
              if k not in ("output_dir", "init_from", "preset")}
    return _trained(json.dumps(fields, sort_keys=True))


def _losses(ctx) -> dict[str, list[float]]:
    return {variant: [_run(ctx, variant, s)["val_loss"] for s in _seeds(ctx)] for variant in VARIANTS}


def _mean_std(values) -> str:
    values = np.asarray(values, dtype=float)
    return f"{values.mean():.3f}" if len(values) == 1 else f"{values.mean():.3f} ± {values.std(ddof=1):.3f}"


def _loss_figure(ctx, losses: dict[str, list[float]]) -> str:
    return plots.per_seed(ctx.figure_path("val-loss"), {variant: losses[variant] for variant in VARIANTS},
                          ylabel="validation loss (nats per byte)", title="built-in corpus, same width and recipe")


@claim(
    id="4.1.4-table16-without-ista",
    tags=("language", "nn", "ablation"),
    reference="004 Table 16, App. C.6 (OWT: 3.37 with ISTA, 3.68 without)",
    statement="Removing the ISTA block from CRATE-GPT raises its validation loss",
    measures="validation cross-entropy (Table 6's protocol) of CRATE-GPT and CRATE-GPT without ISTA "
             "(feedforward='none': Z^{ℓ+1} = Z^{ℓ+1/2}) trained on the built-in corpus with one recipe; quick: one "
             "tiny run each, --full: the gpt_stdlib preset, three seeds",
    expected="`holds` when the mean loss with ISTA is below the mean without",
    expected_verdict="holds",
    kind="trained", provenance="analysis",
)
def table16(ctx) -> Result:
    losses = _losses(ctx)
    with_ista, without = np.mean(losses["CRATE-GPT"]), np.mean(losses["without ISTA"])
    return Result(f"with ISTA {_mean_std(losses['CRATE-GPT'])}, without {_mean_std(losses['without ISTA'])}",
                  "holds" if with_ista < without else "fails", {"val_loss": losses}, [_loss_figure(ctx, losses)],
                  Headline.from_seeds("without − with ISTA", np.subtract(losses["without ISTA"],
                                                                              losses["CRATE-GPT"])))


@claim(
    id="4.1.4-table6-crate-vs-gpt",
    tags=("language", "nn", "baseline"),
    reference="004 Table 6 (OWT: CRATE-GPT2-Base 3.37, GPT2-Small 3.04, GPT2-Base 2.85), Sec. 4.1.4",
    statement="At the same width a standard GPT (MHSA + MLP: 3.4 times the parameters at the gpt_stdlib size, "
              "0.84M vs 0.25M; 2.4 times at the quick mode's d = 48) reaches a lower validation loss than CRATE-GPT",
    measures="validation cross-entropy of CRATE-GPT and the standard GPT of the same d, K, L, data and recipe; "
             "quick: one tiny run each, --full: the gpt_stdlib preset, three seeds",
    expected="`holds` when the standard GPT's mean loss is below CRATE-GPT's",
    expected_verdict="holds",
    kind="trained", provenance="analysis",
)
def table6(ctx) -> Result:
    losses = _losses(ctx)
    crate, gpt = np.mean(losses["CRATE-GPT"]), np.mean(losses["standard GPT"])
    return Result(f"CRATE-GPT {_mean_std(losses['CRATE-GPT'])}, standard GPT {_mean_std(losses['standard GPT'])}",
                  "holds" if gpt < crate else "fails", {"val_loss": losses})


@functools.lru_cache(maxsize=4)
def _layers(config_json: str, seed: int) -> dict:
    """Per-layer R^c (both protocols) and sparsity of a trained CRATE-GPT and its initialisation on validation
    windows of the built-in corpus."""
    run = _trained(config_json)
    config = json.loads(config_json)
    windows = TokenBlocks(builtin_corpus().val, config["block_size"], 0)
    tokens = torch.stack([windows[i] for i in spread(len(windows), MEASURE_WINDOWS)])
    out = {"compression": {"paper": {}, "official": {}}, "sparsity": {}}
    for name in ("init", "trained"):
        model = crate_nn.load(run[name]).eval()
        for protocol in ("paper", "official"):
            m = crate_nn.measure_layers(model, tokens, protocol=protocol)
            out["compression"][protocol][name] = [s.mean for s in m.compression]
            out["sparsity"][name] = [s.mean for s in m.sparsity]
    return out


def _crate_layers(ctx) -> dict:
    fields = {k: v for k, v in dataclasses.asdict(_config(ctx, "CRATE-GPT", ctx.seed)).items()
              if k not in ("output_dir", "init_from", "preset")}
    return _layers(json.dumps(fields, sort_keys=True), ctx.seed)


def _curve(values, digits: int = 1) -> str:
    return "→".join(f"{v:.{digits}f}" for v in values)


def _compression_claim(protocol: str, expected_verdict: str, note: str) -> None:
    @claim(
        id=f"2.24-gpt-{protocol}",
        tags=("layers", "language", "nn"),
        reference="004 Sec. 4.2, Figs. 14–15 (layer-wise R^c), applied to CRATE-GPT; " + (
            "R^c on Z^{ℓ+1/2} as the paper states" if protocol == "paper"
            else "the authors' hook protocol (official-implementation.md)"),
        statement="Training lowers CRATE-GPT's layer-wise compression term: below its random initialisation's at "
                  f"every layer ({protocol} protocol)",
        measures=f"crate_nn.measure_layers(protocol='{protocol}') on 16 validation windows of the built-in corpus, "
                 "trained CRATE-GPT vs its saved initialisation",
        expected=f"`holds` when trained < init at every layer. {note}",
        expected_verdict=expected_verdict,
        kind="trained", provenance="measurement" if protocol == "paper" else "analysis",
    )
    def measure(ctx) -> Result:
        m = _crate_layers(ctx)
        curves = m["compression"][protocol]
        below = all(t < i for t, i in zip(curves["trained"], curves["init"]))
        figure = plots.per_layer(ctx.figure_path("per-layer"), {f"R^c ({protocol} protocol)": curves,
                                                                "‖Z^{ℓ+1}‖₀/(dn)": m["sparsity"]},
                                 title="CRATE-GPT on the standard library's source vs its initialisation")
        return Result(f"trained {_curve(curves['trained'])} vs init {_curve(curves['init'])}",
                      "holds" if below else "fails", {"compression": curves, "sparsity": m["sparsity"]}, [figure])


_compression_claim("paper", "fails", "Expected to fail (found by measuring): GPT-2's initialisation draws U from "
                   "N(0, 0.02²), so the initial codes and R^c are tiny at the first layer; R^c grows with ‖U‖ as "
                   "training scales U up (the digits claims see the same scale effect)")
_compression_claim("official", "holds", "The scale-free protocol (unit-norm codes)")


@claim(
    id="2.24-gpt-sparsity",
    tags=("layers", "language", "nn"),
    reference="004 Sec. 4.2, Fig. 15 (right), applied to CRATE-GPT; Fig. 14's footnote 17 (the last layer)",
    statement="Training sparsifies CRATE-GPT's representations: ‖Z^{ℓ+1}‖₀/(dn) below its random initialisation's "
              "at every layer (footnote 17 expects a rise at the last layer, whose features are mixed for the "
              "output head; the claim counts that layer too)",
    measures="fraction of non-zero ISTA outputs per layer on 16 validation windows, trained vs initialisation",
    expected="`holds` when trained < init at every layer. Expected to fail (found by measuring, seed 0): the first "
             "layer sparsifies slightly (quick 0.45 vs 0.49 non-zeros; full 0.490 vs 0.494) but the last one ends "
             "far denser than at initialisation (quick 0.89 vs 0.35; full 0.64 vs 0.27), a margin no single-seed "
             "noise explains",
    expected_verdict="fails",
    kind="trained", provenance="measurement",
)
def gpt_sparsity(ctx) -> Result:
    s = _crate_layers(ctx)["sparsity"]
    below = all(t < i for t, i in zip(s["trained"], s["init"]))
    return Result(f"trained {_curve(s['trained'], 3)} vs init {_curve(s['init'], 3)}", "holds" if below else "fails",
                  s)
