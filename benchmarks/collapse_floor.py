"""Time to compute the joint rule's collapse floor at a new size: `crate_theory.protocol.collapse_floor` against the
floor it replaced, side by side.

* **previous** — the floor before the worst case over membership laws: a Monte-Carlo over full d-dimensional token
  sets of fixed constructions (balanced shares, shares 2:1:…:1, subspaces of largest principal cosine 0.3, and —
  as the audit took it for images — every token of an input on one subspace), each set's K head rates in two random
  orientations against two isotropic sets, ⌈16384/n⌉ sets (at least 64) per construction; reproduced here as it
  was, the baseline of this comparison;
* **new** — `crate_theory.protocol.collapse_floor`: one construction (every token of an input on one subspace) and
  its ReLU in two orientations, one random orientation per set with the tokens in their p coordinates, sets drawn
  until the standard error is reached (`crate_theory.protocol.FLOOR_SE`).

Each contender is called ``--repeats`` times, interleaved (benchmarks.common), and its median wall time reported;
both floors are printed (the previous one's one-subspace construction is the new floor's, by another estimator).
The network audit's images of CRATE-Small (d 576, 197 tokens, K 12) are the size to beat: goal ≤ 60 s on 2 cores.

    python -m benchmarks.collapse_floor --out benchmarks/results/cpu/collapse_floor.json   # ≈ 10 min (the previous)
    python -m benchmarks.collapse_floor --tiny                                            # seconds
"""
from __future__ import annotations

import argparse
import functools
import math

import numpy as np

from benchmarks import common
from crate_theory.coding_rate import compression_rate
from crate_theory.protocol import class_shares, coherent_bases, collapse_floor
from crate_theory.synthetic import as_generator, normalize_columns, orthonormal_bases

SIZES = ((96, 5, 4), (96, 17, 4), (32, 64, 4), (576, 197, 12))
"""(d, n, K): the digits CRATE, CRATE-MAE / CRATE-DINO on digits, the ideal stacks, CRATE-Small on 224² images."""
TINY = ((32, 16, 4),)


def previous_floor(d: int, n: int, K: int, eps: float = 0.1, seed: int = 0) -> tuple[float, float]:
    """The previous floor (module docstring) and the drop of its one-subspace-per-input construction."""
    p, draws = d // K, 2
    sets = max(64, -(-16384 // n))
    rng = as_generator(seed)
    chunk = min(max(16, -(-2048 // n)), max(1, 2**22 // (d * n)))
    names = ("balanced", "unbalanced", "coherent", "one subspace per input")
    drops: dict[str, list[np.ndarray]] = {name: [] for name in names}
    for start in range(0, sets, chunk):
        m = min(chunk, sets - start)
        isotropic = normalize_columns(rng.standard_normal((m, d, n)))
        yardstick = normalize_columns(rng.standard_normal((draws, m, d, n)))
        q, r = np.linalg.qr(rng.standard_normal((draws, m, d, min(d, n))))
        frames = q * np.where(np.diagonal(r, axis1=-2, axis2=-1) < 0, -1.0, 1.0)[..., None, :]
        for name in names:
            U = coherent_bases(K, d, p, 0.3, rng) if name == "coherent" else orthonormal_bases(K, d, p, seed=rng)
            shares = class_shares(K, balanced=name != "unbalanced")
            labels = rng.choice(K, size=(m, 1 if name == names[-1] else n), p=shares)
            labels = np.broadcast_to(labels, (m, n)).copy()
            Z = normalize_columns(np.einsum("sndp,snp->sdn", U[labels], rng.standard_normal((m, n, p))))
            iso_rate = np.mean(compression_rate(yardstick, U, eps), axis=0)
            rotated = [np.mean(compression_rate(frames @ np.linalg.qr(tokens)[1], U, eps), axis=0)
                       for tokens in (isotropic, Z)]
            drops[name].append((rotated[0] - rotated[1]) / iso_rate)
    summary = {}
    for name, values in drops.items():
        x = np.concatenate(values)
        summary[name] = (x.mean(), x.std(ddof=1) / math.sqrt(x.size))
    return max(mean + 1.96 * se for mean, se in summary.values()), summary[names[-1]][0]


def _keep(found: dict, name: str, fn, *args, **kwargs) -> None:
    found[name] = fn(*args, **kwargs)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common.add_common_args(parser, repeats=3, warmup=0)
    args = parser.parse_args(argv)
    device = common.setup(args)
    rows = []
    for d, n, K in TINY if args.tiny else SIZES:
        found = {}
        contenders = {name: functools.partial(_keep, found, name, fn, d, n, K, seed=args.seed)
                      for name, fn in (("previous", previous_floor), ("new", collapse_floor))}
        timings = common.interleaved(contenders, 1 if args.tiny else args.repeats, args.warmup, device)
        new = found["new"]
        rows.append({"size": f"d {d}, n {n}, K {K}", "previous_s": timings["previous"].median,
                     "new_s": timings["new"].median,
                     "speedup": timings["previous"].median / timings["new"].median,
                     "previous_floor": found["previous"][0], "previous_one_subspace": found["previous"][1],
                     "new_floor": new.floor, "new_orthant_floor": new.orthant_floor, "new_sets": new.sets,
                     "timings": {name: t.summary() for name, t in timings.items()}})
        print(f"{rows[-1]['size']}: previous {rows[-1]['previous_s']:.1f} s, new {rows[-1]['new_s']:.1f} s", flush=True)
    columns = [("size", "size", "s"), ("previous_s", "previous (s)", ".1f"), ("new_s", "new (s)", ".1f"),
               ("speedup", "speed-up", ".0f"), ("previous_floor", "previous floor", ".4f"),
               ("previous_one_subspace", "its one-subspace drop", ".4f"), ("new_floor", "new floor", ".4f"),
               ("new_orthant_floor", "orthant floor", ".4f"), ("new_sets", "sets", "d")]
    return common.report("collapse_floor", device, args, rows, columns,
                         notes=["median wall time of the repeats; the new floor is the worst case over membership "
                                "laws, the previous one the largest of four fixed constructions"])


if __name__ == "__main__":
    main()
