"""Time and precision of the joint measure (`crate_nn.analysis.protocol.joint_measures`: the network audit's per
input and layer) against the measure it replaced, side by side in one run.

* **previous** — reproduced here as it was, the baseline of this comparison: the rotation yardstick as the token
  set itself in a Haar-random orientation per draw (a QR of the set, a QR of a Gaussian frame, the rotated set's
  codes against the heads), the isotropic sets' rates against the heads, every set's codes on a strided stack of
  heads, alignments from products of their own;
* **new** — `joint_measures`: the rotated rates from the spectrum of the unit tokens' Gram matrix and one Gaussian
  frame per head with a control variate, the isotropic rates on coordinate blocks (``crate_theory.protocol``,
  "Drawing the yardsticks").

**Time**: milliseconds per token set at the network audit's sizes and batches (`verify.layerwise.BATCH_TOKENS`
= 8,192 tokens: 8 windows of 1,024 tokens, 41 images of 197), d 768 and K 12 (CRATE-GPT-base, CRATE-α B/16), 2
draws per yardstick (`verify.joint.DRAWS`); each contender called ``--repeats`` times, interleaved
(benchmarks.common), the median of its wall and CPU times reported, and its peak memory.

**Precision** (the float64 NumPy reference, ``crate_theory.protocol``): one set's standard deviation of the rotation
yardstick's R^c — the rotated set (`rotated_tokens`), the frames drawn per head without the control variate, and
`rotated_rates` (with it) — and the z-score of the last one's mean against the rotation's, over ``--sets`` sets of
each, for isotropic tokens, tokens pulled 70% of the way to one direction, tokens on one subspace of d/4
dimensions and tokens with a power-law spectrum, at the sizes the audit meets.

    python -m benchmarks.joint_measure --out benchmarks/results/cpu/joint_measure.json    # ≈ 10 min
    python -m benchmarks.joint_measure --tiny                                              # seconds

The whole language path: ``python -m benchmarks.network_audit --language`` (64 windows of 1,024 tokens).
"""
from __future__ import annotations

import argparse
import functools

import numpy as np
import torch

from benchmarks import common
from crate_nn.analysis.diagnostics import half_logdet
from crate_nn.analysis.protocol import isotropic_like, joint_measures, orthonormalise_heads, unit_tokens
from crate_theory.coding_rate import compression_rate
from crate_theory.protocol import rotated_rates, rotated_tokens, rotation_frames, unit_spectrum
from crate_theory.synthetic import normalize_columns, orthonormal_bases

TIMED = ((1024, 768, 12, 8), (197, 768, 12, 41))
"""(n, d, K, token sets per batch): CRATE-GPT-base's windows and CRATE-α B/16's images, as the audit batches them."""
TIMED_TINY = ((40, 32, 4, 4), (12, 32, 4, 8))
PRECISION = ((32, 64, 4, 400), (96, 5, 4, 400), (96, 17, 4, 400), (192, 256, 12, 200), (768, 197, 12, 48),
             (768, 1024, 12, 48))
"""(d, n, K, sets): the ideal stacks, the digits CRATE, CRATE-MAE / CRATE-DINO on digits, a mid size, the two
network-audit sizes (fewer sets there: a rotation of 768 dimensions per set)."""
PRECISION_TINY = ((16, 24, 4, 64),)
KINDS = ("isotropic", "collapsing", "one subspace", "power law")


# ------------------------------------------------------------------------------------------------ the previous measure
def _previous_rate(tokens: torch.Tensor, ortho: torch.Tensor, heads: int, eps: float) -> torch.Tensor:
    """R^c of the unit tokens against orthonormalised heads, the codes a strided stack of heads (as before)."""
    n, p = tokens.shape[-2], ortho.shape[0] // heads
    codes = (unit_tokens(tokens) @ ortho.mT).unflatten(-1, (heads, p)).transpose(-3, -2)
    return half_logdet(codes, p / (n * eps**2)).sum(-1)


def _previous_alignment(tokens: torch.Tensor, weight: torch.Tensor, heads: int) -> torch.Tensor:
    tokens = tokens.to(torch.float64)
    ortho = orthonormalise_heads(weight.to(torch.float64), heads)
    codes = (tokens @ ortho.mT).unflatten(-1, (heads, ortho.shape[0] // heads)).transpose(-3, -2)
    energy = codes.square().sum(-1)
    norms2 = tokens.square().sum(-1).unsqueeze(-2)
    return torch.where(norms2 > 0, energy / norms2.clamp_min(torch.finfo(torch.float64).tiny), 0.0).amax(-2).mean(-1)


def _previous_rotated(z: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Each token set in its own Haar-random orientation: the thin QR of the set, a Haar frame by the QR of a
    Gaussian (signs fixed), the frame times the set's coordinates."""
    z = z.to(torch.float64)
    frame, coords = torch.linalg.qr(z.transpose(-2, -1))
    q, r = torch.linalg.qr(torch.randn(tuple(frame.shape), generator=generator, dtype=torch.float64))
    haar = q * torch.where(r.diagonal(dim1=-2, dim2=-1) < 0, -1.0, 1.0).unsqueeze(-2)
    return (haar @ coords).transpose(-2, -1)


def previous_joint_measures(z: torch.Tensor, weight: torch.Tensor, heads: int, eps: float = 0.1, *, draws: int = 2,
                            generator: torch.Generator | None = None) -> dict[str, torch.Tensor]:
    """The joint measure as it was before the yardsticks were drawn per head (module docstring)."""
    isotropic = torch.stack([isotropic_like(z, generator) for _ in range(draws)])
    rotated = torch.stack([_previous_rotated(z, generator) for _ in range(draws)])
    ortho = orthonormalise_heads(weight.to(torch.float64), heads)
    own = _previous_rate(z, ortho, heads, eps)
    iso_rate = _previous_rate(isotropic, ortho, heads, eps).mean(0)
    rot_rate = _previous_rate(rotated, ortho, heads, eps).mean(0)
    n, d = z.shape[-2:]
    return {"relative": own / iso_rate, "specific": own / rot_rate, "spread": rot_rate / iso_rate,
            "alignment": _previous_alignment(z, weight, heads),
            "isotropic_alignment": _previous_alignment(isotropic, weight, heads).mean(0),
            "rate_reduction": half_logdet(unit_tokens(z), d / (n * eps**2)) - own,
            "nonnegative": (z >= 0).flatten(-2).all(-1).to(torch.float64)}


# ------------------------------------------------------------------------------------------------ time
def time_rows(sizes, repeats: int, warmup: int, seed: int, device: torch.device) -> list[dict]:
    rows = []
    for n, d, K, batch in sizes:
        generator = torch.Generator().manual_seed(seed)
        z = torch.randn((batch, n, d), generator=generator).to(device)
        weight = torch.randn((d, d), generator=generator).to(device)
        contenders = {name: functools.partial(fn, z, weight, K, draws=2, generator=generator)
                      for name, fn in (("previous", previous_joint_measures), ("new", joint_measures))}
        timings = common.interleaved(contenders, repeats, warmup, device)
        memory = {name: common.peak_memory_bytes(fn, device) / 2**20 for name, fn in contenders.items()}
        row = {"size": f"n {n}, d {d}, K {K} ({batch} sets)"}
        for name, timing in timings.items():
            row[f"{name}_ms"] = 1000 * timing.median / batch
            row[f"{name}_cpu_ms"] = 1000 * timing.cpu_median / batch
            row[f"{name}_peak_mib"] = memory[name]
        row["speedup"] = common.paired_ratio(timings["previous"], timings["new"])
        row["timings"] = {name: t.summary() for name, t in timings.items()}
        rows.append(row)
        print(f"{row['size']}: previous {row['previous_ms']:.1f} ms, new {row['new_ms']:.1f} ms per set", flush=True)
    return rows


# ------------------------------------------------------------------------------------------------ precision
def tokens(kind: str, d: int, n: int, rng: np.random.Generator) -> np.ndarray:
    """One token set (d, n) of ``kind`` (`KINDS`)."""
    if kind == "isotropic":
        return rng.standard_normal((d, n))
    if kind == "collapsing":
        return 0.3 * normalize_columns(rng.standard_normal((d, n))) + 0.7 * normalize_columns(rng.standard_normal((d, 1)))
    if kind == "one subspace":
        return np.linalg.qr(rng.standard_normal((d, d // 4)))[0] @ rng.standard_normal((d // 4, n))
    if kind == "power law":
        return (rng.standard_normal((d, d)) * np.arange(1, d + 1) ** -0.7) @ rng.standard_normal((d, n))
    raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")


def _without_control(spectrum: np.ndarray, frames: np.ndarray, n: int, eps: float) -> np.ndarray:
    """The frames' rates alone, Σ_k ½ logdet(I + β V_k*ΛV_k): the estimate before its control variate."""
    p = frames.shape[-1]
    top = np.linalg.qr(frames)[0][..., :spectrum.size, :]
    inner = np.swapaxes(top, -1, -2) @ (spectrum[:, None] * top)
    return 0.5 * np.linalg.slogdet(np.eye(p) + p / (n * eps**2) * inner)[1].sum(-1)


def precision_rows(sizes, seed: int, eps: float = 0.1) -> list[dict]:
    rows = []
    for d, n, K, sets in sizes:
        for kind in KINDS:
            rng = np.random.default_rng(seed)
            Z = tokens(kind, d, n, rng)
            U = orthonormal_bases(K, d, d // K, seed=rng)
            rotated = compression_rate(normalize_columns(rotated_tokens(Z, rng, draws=sets)), U, eps)
            spectrum, frames = unit_spectrum(Z), rotation_frames(d, K, d // K, rng, draws=sets)
            drawn, plain = rotated_rates(spectrum, frames, d, n, eps), _without_control(spectrum, frames, n, eps)
            se = np.hypot(rotated.std(ddof=1), drawn.std(ddof=1)) / np.sqrt(sets)
            rows.append({"size": f"d {d}, n {n}, K {K}", "kind": kind, "sets": sets, "mean": drawn.mean(),
                         "rotation_sd": rotated.std(ddof=1), "per_head_sd": plain.std(ddof=1),
                         "new_sd": drawn.std(ddof=1), "new_over_rotation": drawn.std(ddof=1) / rotated.std(ddof=1),
                         "per_head_over_rotation": plain.std(ddof=1) / rotated.std(ddof=1),
                         "z": (drawn.mean() - rotated.mean()) / se})
            print(f"{rows[-1]['size']}, {kind}: sd ratio {rows[-1]['new_over_rotation']:.2f} "
                  f"(without the variate {rows[-1]['per_head_over_rotation']:.2f}), z {rows[-1]['z']:+.2f}", flush=True)
    return rows


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common.add_common_args(parser, repeats=5, warmup=1)
    parser.add_argument("--no-precision", action="store_true", help="time only")
    args = parser.parse_args(argv)
    device = common.setup(args)
    repeats, warmup = (1, 0) if args.tiny else (args.repeats, args.warmup)
    rows = time_rows(TIMED_TINY if args.tiny else TIMED, repeats, warmup, args.seed, device)
    precision = [] if args.no_precision else precision_rows(PRECISION_TINY if args.tiny else PRECISION, args.seed)
    columns = [("size", "size", "s"), ("previous_ms", "previous (ms/set)", ".1f"), ("new_ms", "new (ms/set)", ".1f"),
               ("speedup", "speed-up", ".1f"), ("previous_cpu_ms", "previous CPU", ".1f"),
               ("new_cpu_ms", "new CPU", ".1f"), ("previous_peak_mib", "previous peak (MiB)", ".0f"),
               ("new_peak_mib", "new peak (MiB)", ".0f")]
    notes = ["median of interleaved repeats per batch, divided by the token sets in it; 2 draws per yardstick"]
    if precision:
        notes.append(common.format_table(precision, [
            ("size", "size", "s"), ("kind", "tokens", "s"), ("sets", "sets", "d"),
            ("rotation_sd", "rotation sd", ".4f"), ("per_head_over_rotation", "per head / rotation", ".2f"),
            ("new_over_rotation", "new / rotation", ".2f"), ("z", "z of the means", "+.2f")]))
    return common.report("joint_measure", device, args, rows, columns, notes=notes, extra={"precision": precision})


if __name__ == "__main__":
    main()
