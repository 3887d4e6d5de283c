"""How far a training step is from the machine's limit: the rate of each matrix product the step runs, timed alone
in float32 and bfloat16, beside the rate the whole step achieves.

For each model (`crate_nn.create_model` at its registered size, ``--batch-size`` random images) one training step
— the step `benchmarks.train_step` times for ours: forward, cross-entropy, backward, crate-train's Lion update —
runs once under `benchmarks.common.ProductCounter`, which records every matrix product with its shape, its
operands' layout, its module and its pass. For CRATE these are the qkv and output projections (B·n × d × K·p),
the ISTA step (B·n × d × d, and d × d × d forming its folded matrix), attention (B·K products of n × p × n and
n × n × p), the patch embedding and the head, and the backward products of each; an MLP where the model has one.
Each distinct product is then timed alone in float32 and in bfloat16 (`crate_nn.engine.precision.product_runner`:
samples of at least ``--min-seconds``) on this machine and thread count, taking turns with the steps of each
precision (``--precision``): step fp32, step bf16, product 1 fp32, product 1 bf16, …, ``--repeats`` rounds after
``--warmup``, medians, so that a drift of a shared machine hits steps and products alike.

Reported, per model and step precision:

* limit = the step's FLOPs / Σ (a product's FLOPs / its rate alone): the rate of a step that did nothing but its
  products, each at the rate it reaches alone, in that precision;
* achieved = the step's FLOPs (as `benchmarks.common.counted_flops` counts them) / the median step time;
* achieved / limit: how much of the step's time its products use at their best rate; the rest is elementwise
  work, casts, the optimizer and the products running slower inside the step than alone.

and, per product, its calls per step, GFLOP per step, share of the step's FLOPs and GFLOP/s alone in float32 and
bfloat16 (printed first; ``products`` in the JSON).

    python -m benchmarks.limit --out benchmarks/results/cpu/limit_tiny_base.json    # CPU: 1 thread, batch 16
    python -m benchmarks.limit --models crate_base --threads 2
    python -m benchmarks.limit --device cuda --batch-size 256 --threads 16

Time on one core of an AMD EPYC (Zen 4): ≈ 2 min for crate_tiny and crate_base at batch 16 (5 repeats).
Expected there: the products alone at 62–103 GFLOP/s in float32 and 143–221 GFLOP/s in bfloat16 (2.0–3.1×);
the float32 step at ≈ 95 % of its float32 limit, the bf16 autocast step at ≈ 60 % (crate_tiny) and ≈ 70 %
(crate_base) of its bfloat16 one (benchmarks/RESULTS.md, "CPU: bf16 autocast and the GEMM limit").
"""
from __future__ import annotations

import argparse

import torch
from tqdm import tqdm

import crate_nn
from benchmarks import common
from benchmarks.models import TINY_OVERRIDES
from benchmarks.train_step import make_train_step
from crate_nn.engine.precision import DTYPES, Product, product_runner

PRODUCT_COLUMNS: list[common.Column] = [
    ("model", "model", ""), ("module", "module", ""), ("pass", "pass", ""), ("product", "product", ""),
    ("calls", "calls", "d"), ("gflop", "GFLOP", ".2f"), ("share", "share", ".1%"),
    ("fp32_gflop_s", "GFLOP/s fp32", ".1f"), ("bf16_gflop_s", "GFLOP/s bf16", ".1f"),
    ("bf16_speedup", "bf16/fp32", ".2f"),
]
STEP_COLUMNS: list[common.Column] = [
    ("model", "model", ""), ("batch", "batch", "d"), ("precision", "step precision", ""),
    ("step_gflop", "step GFLOP", ".1f"), ("step_s", "step s", ".3f"), ("img_s", "img/s", ".2f"),
    ("limit_gflop_s", "limit GFLOP/s", ".1f"), ("achieved_gflop_s", "achieved GFLOP/s", ".1f"),
    ("fraction", "achieved/limit", ".1%"),
]


def describe(product: Product) -> str:
    """``[B× ]m×k · k×n``, ᵀ after an operand stored transposed (column-major)."""
    a = f"{product.m}×{product.k}{'ᵀ' * product.a_transposed}"
    b = f"{product.k}×{product.n}{'ᵀ' * product.b_transposed}"
    return f"{f'{product.batch}× ' if product.batch > 1 else ''}{a} · {b}"


def model_rows(name: str, overrides: dict, device: torch.device, args: argparse.Namespace,
               dtypes: dict[str, torch.dtype | None]) -> tuple[list[dict], list[dict], float]:
    """(product rows, step rows, share of the counted FLOPs the timed products cover) of one model."""
    model = crate_nn.create_model(name, **overrides).to(device)
    config = model.config
    images = torch.randn(args.batch_size, config.in_channels, config.image_size, config.image_size, device=device)
    labels = torch.randint(0, config.num_classes, (args.batch_size,), device=device)
    steps = {key: make_train_step(model, images, labels, dtype, "crate_nn") for key, dtype in dtypes.items()}
    with common.ProductCounter() as counter:
        next(iter(steps.values()))()
    total = counter.get_total_flops()
    distinct = sorted({product for _, _, product in counter.products}, key=lambda p: -p.flops)
    runners = {(product, dtype): product_runner(product, dtype, device, args.min_seconds)
               for product in tqdm(distinct, desc=f"{name}: calibrating products", unit="product")
               for dtype in (torch.float32, torch.bfloat16)}
    # the steps and the products alone take turns, so that a drift of a shared machine hits all of them alike
    contenders = {**{f"step {key}": step for key, step in steps.items()},
                  **{f"{product} {dtype}": run for (product, dtype), (run, _) in runners.items()}}
    timings = common.interleaved(contenders, args.repeats, args.warmup, device)
    rates = {(product, dtype): product.flops * calls / timings[f"{product} {dtype}"].median
             for (product, dtype), (_, calls) in runners.items()}
    products = []
    for (module, direction, product), calls in counter.products.items():
        fp32, bf16 = rates[product, torch.float32], rates[product, torch.bfloat16]
        products.append({"model": name, "module": module, "pass": direction, "product": describe(product),
                         "shape": [product.batch, product.m, product.k, product.n],
                         "transposed": [product.a_transposed, product.b_transposed], "calls": calls,
                         "gflop": calls * product.flops / 1e9, "share": calls * product.flops / total,
                         "fp32_gflop_s": fp32 / 1e9, "bf16_gflop_s": bf16 / 1e9, "bf16_speedup": bf16 / fp32})
    products.sort(key=lambda row: -row["gflop"])
    covered = sum(row["gflop"] for row in products) * 1e9
    rows = []
    for key in dtypes:
        products_s = sum(row["gflop"] / row[f"{key}_gflop_s"] for row in products)  # each product at its rate alone
        timing = timings[f"step {key}"]
        limit, achieved = covered / 1e9 / products_s, total / 1e9 / timing.median
        rows.append({"model": name, "batch": args.batch_size, "precision": key, "step_gflop": total / 1e9,
                     "step_s": timing.median, "img_s": args.batch_size / timing.median,
                     "limit_gflop_s": limit, "achieved_gflop_s": achieved, "fraction": achieved / limit,
                     "products_alone_s": products_s, "timing": timing.summary()})
    return products, rows, covered / total


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.limit", description=__doc__.splitlines()[0])
    common.add_common_args(parser, repeats=5, warmup=1)
    parser.set_defaults(threads=1)
    parser.add_argument("--models", nargs="+", default=["crate_tiny", "crate_base"],
                        choices=crate_nn.list_models(family="classifier"))
    parser.add_argument("--batch-size", type=int, default=None, help="images per step (default 16 on CPU, 256 on GPU)")
    parser.add_argument("--precision", nargs="+", default=["fp32", "bf16"], choices=("fp32", "bf16"),
                        help="the step's precisions (timed interleaved); products are always timed in both")
    parser.add_argument("--min-seconds", type=float, default=0.05,
                        help="each timed sample of a product repeats it until it lasts this long")
    args = parser.parse_args(argv)
    device = common.setup(args)
    if args.tiny:  # tiny model, one size, batch 4, one repeat after one warm-up, short product samples
        args.models, args.batch_size, args.repeats, args.warmup, args.min_seconds = args.models[:1], 4, 1, 1, 1e-3
    if args.batch_size is None:
        args.batch_size = 256 if device.type == "cuda" else 16
    if args.batch_size < 1:
        raise ValueError(f"--batch-size must be >= 1, got {args.batch_size}")
    if args.min_seconds <= 0:
        raise ValueError(f"--min-seconds must be > 0, got {args.min_seconds}")
    dtypes = {key: DTYPES[key] for key in dict.fromkeys(args.precision)}
    overrides = dict(TINY_OVERRIDES) if args.tiny else {}
    products, rows, notes = [], [], []
    for name in args.models:
        model_products, model_steps, coverage = model_rows(name, overrides, device, args, dtypes)
        products += model_products
        rows += model_steps
        notes.append(f"{name}: the timed products are {coverage:.1%} of the step's counted FLOPs")
    print(common.format_table(products, PRODUCT_COLUMNS))
    notes += [
        "product: [batch×] m×k · k×n, ᵀ after an operand stored transposed (column-major); calls and GFLOP per step; "
        f"GFLOP/s: the product alone, samples of ≥ {args.min_seconds} s; {torch.get_num_threads()} thread(s)",
        "limit = the step's FLOPs / Σ (a product's FLOPs / its rate alone) in the step's precision; achieved = the "
        "step's counted FLOPs / its median time; steps and products alone take turns (step fp32, step bf16, "
        f"product 1 fp32, product 1 bf16, …), {args.repeats} rounds after {args.warmup} warm-up, medians",
    ]
    return common.report("limit", device, args, rows, STEP_COLUMNS, notes, extra={"products": products})


if __name__ == "__main__":
    main()
