"""Audit a network: the papers' layer-wise claims decided on any checkpoint a user brings.

    python -m verify.network hf-hub:UCSC-VLAA/CRATE-alpha:torch/crate_alpha_B16.pth --name crate_alpha_b16 --images val/
    python -m verify.network runs/digits --dataset digits            # a run directory: its own init is a control
    python -m verify.network crate.pt --images val/ --against vit_s16.pth --against-name vit_small
    python -m verify.network gpt.pt --text book.txt                  # a language model, its own tokenizer
    python -m verify.network crate_authors.pth --heads 2 --dataset digits --channels 3    # a file recording nothing
    python -m verify.network vit_base_patch16_224.pth --name vit_base --images val/      # a timm ViT as the subject
    python -m verify.network transformers:models/gpt2 --text book.txt   # a transformers ViT, BERT or GPT-2 folder

SPEC is anything `crate_nn.load` reads — a file of any supported format (ours, the authors', CRATE-α's torch and
JAX ``.npz`` files, crate-lm, nanoGPT, timm's and DINO's ViTs), ``hf-hub:ORG/NAME[@rev][:path]`` in the local Hub
cache —, a run directory of ``crate-train`` (its ``checkpoints/last.pt``), or ``transformers:FOLDER``: a Hugging
Face ``transformers`` ViT, BERT or GPT-2 (``config.json`` and ``model.safetensors`` or ``pytorch_model.bin``), read
through forward hooks (`verify.hooked`; ``pip install transformers``). Nothing is downloaded. A network that is not a
CRATE (a ViT, BERT, GPT-2) is measured against its value rows (Fig. 26) and its own random initialisations.

**Inputs.** ``--images DIR`` (an ImageNet-validation layout, ``DIR/<class>/<image>``, or a flat folder: every image
file under DIR; other files are skipped and counted), ``--dataset NAME`` (a built-in set, e.g. ``digits``; its
``--split``), or ``--text FILE`` for a language model (tokenised by the model's own tokenizer, or ``--tokenizer``;
windows of the model's block size, ``--window`` to shorten them). A fixed, seeded sample of ``--n`` inputs
(``--seed``; default 256 images or 64 windows, or all there are when fewer) is drawn; images are resized (short side
to S·256/224), centre-cropped to the model's S×S and normalised by the mean and std its checkpoint records
(``model.preprocessing``), by ``--mean``/``--std``, or by ImageNet's; images of other channels than the model's are
refused unless ``--channels`` converts them (gray repeated to RGB, RGB to gray).

**Controls.** ``--init-seeds`` random initialisations of the architecture (default 20: enough to decide a layer
that lies below every one of 400 random seeds, 3.0 standard deviations, in 98% of audits), seeded from
``--init-seed-start`` (1000) on; a run directory's own initialisation; every ``--against`` network, named in the report
by ``--against-name`` (one per ``--against``, in order; else its run directory's name or its file's): a CRATE — another
checkpoint, an earlier epoch of one's own run (Fig. 15) — is compared layer by layer as an initialisation is, a ViT
by Fig. 26's rows.

**Output** (``--out``, default ``network-audit/<name>``): ``report.md`` (opening with one sentence: does this network
compress and sparsify, and against what), ``report.json``, ``values.npz`` (every measure per input and layer of every
network), ``layers.csv`` (per-layer means, R^c per head) and ``figures/``, written whole when the audit ends (an
existing report is kept unless ``--overwrite``; one audit at a time writes a folder). The console gets a progress bar
and every verdict, one line each. Exit status 0 when it ran (whatever the verdicts), 2 for bad input (one line, told
before anything is measured; a mistyped argument before torch is imported), 128 + the signal's number when SIGTERM or
SIGINT stops it (within seconds, no report written). The subject: `verify.checkpoint`; its rows and their rule:
`verify.layerwise`; the report: `verify.report`.
"""
from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from crate_nn import cli, preprocessing
from verify.statistics import MIN_SEEDS

PROG = "python -m verify.network"
DEFAULTS = dict(images=256, windows=64, control_n=64, init_seeds=20, init_seed_start=1000, seed=0)
MAX_INIT_SEEDS = 100
"""The most random initialisations: one forward pass of ``--control-n`` inputs each; beyond a few dozen the
prediction interval's t quantile (`verify.statistics.compare_one`) no longer narrows (t₀.₉₇₅ is 2.04 at 30 seeds,
1.98 at 100). The default, 20, puts the prediction interval's half-width at t₀.₉₇₅,₁₉·√(1 + 1/20) = 2.15 standard
deviations of the seeds (4.97 at 3 seeds): a layer below every one of 400 random seeds (3.0 standard deviations) is
decided `holds` in 98% of draws of the seeds, a 12-layer claim with every layer there in 80% (30 seeds: 97%)."""
MAX_SEED = 2**63 - 1
"""The largest ``--seed`` torch's generators take."""


def _datasets() -> tuple[str, ...]:
    from crate_nn.data import DATASETS

    return DATASETS


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The arguments, every one checked that can be without reading a file: ranges, pairs, the dataset's name (its
    registry loads torch, so it comes last)."""
    parser = cli.Parser(prog=PROG, description=__doc__.split("\n\n")[0],
                        epilog="\n\n".join(__doc__.split("\n\n")[1:3]),
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="weights file, hf-hub:ORG/NAME[@rev][:path], a crate-train run directory or "
                                      "transformers:FOLDER")
    given = parser.add_mutually_exclusive_group(required=True)
    given.add_argument("--images", metavar="DIR", help="image folder (DIR/<class>/<image> or flat)")
    given.add_argument("--dataset", metavar="NAME", help="a built-in dataset (e.g. digits)")
    given.add_argument("--text", metavar="FILE", help="a text file (language models)")
    parser.add_argument("--split", default="test", help="the built-in dataset's split (default test)")
    parser.add_argument("--tokenizer", default=None, help="--text: a tokenizer spec when the checkpoint records none")
    parser.add_argument("--window", type=int, default=None, help="--text: tokens per window (default block size)")
    parser.add_argument("--n", type=int, default=None, help=f"inputs measured on the model (default "
                                                             f"{DEFAULTS['images']} images, {DEFAULTS['windows']} "
                                                             "text windows, or all there are when fewer)")
    parser.add_argument("--control-n", type=int, default=None,
                        help="the first inputs measured on every control, and the joint measure's (default 64, or "
                             "--n when smaller)")
    parser.add_argument("--init-seeds", type=int, default=DEFAULTS["init_seeds"],
                        help=f"random initialisations of the architecture (default {DEFAULTS['init_seeds']}; 0: none; "
                             f"{MIN_SEEDS} to {MAX_INIT_SEEDS})")
    parser.add_argument("--init-seed-start", type=int, default=DEFAULTS["init_seed_start"],
                        help=f"the first random initialisation's seed (default {DEFAULTS['init_seed_start']}; the "
                             "run's own seed is skipped)")
    parser.add_argument("--against", action="append", default=[], metavar="SPEC",
                        help="another network to compare with: a CRATE checkpoint (e.g. an earlier epoch) layer by "
                             "layer, a ViT by Fig. 26's rows (repeatable)")
    parser.add_argument("--heads", type=int, default=None, help="another codebase's file: its number of heads")
    parser.add_argument("--name", default=None, help="another codebase's file: a registered size giving its heads")
    parser.add_argument("--against-heads", type=int, default=None, help="--against files: their number of heads")
    parser.add_argument("--against-name", action="append", default=[], metavar="NAME",
                        help="how the report names an --against network (one per --against, in order); a registered "
                             "size (e.g. vit_small) also gives the heads its file does not fix")
    parser.add_argument("--seed", type=int, default=DEFAULTS["seed"], help="seed of the sample and the yardsticks")
    parser.add_argument("--batch-size", type=int, default=None,
                        help="inputs per batch (default: the inputs of verify.checkpoint.BATCH_TOKENS tokens)")
    parser.add_argument("--out", default=None, help="report folder (default network-audit/<name>)")
    parser.add_argument("--overwrite", action="store_true", help="replace a report already in --out")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    preprocessing.add_arguments(parser)
    args = parser.parse_args(argv)
    args.all_inputs = args.n is None  # the default: all the inputs there are, when fewer
    if args.n is None:
        args.n = DEFAULTS["windows"] if args.text is not None else DEFAULTS["images"]
    if args.control_n is None:
        args.control_n = min(DEFAULTS["control_n"], args.n)
    for name in ("n", "control_n", "batch_size", "window", "threads", "heads", "against_heads"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"argument --{name.replace('_', '-')}: expected a positive integer, got {getattr(args, name)}")
    if args.control_n < MIN_SEEDS or args.n < MIN_SEEDS:
        parser.error(f"arguments --n, --control-n: the audit's rule needs at least {MIN_SEEDS} inputs")
    if args.control_n > args.n:
        parser.error(f"argument --control-n: {args.control_n} exceeds --n {args.n} (the controls see the first "
                     "--control-n of the model's inputs)")
    if args.init_seeds and not MIN_SEEDS <= args.init_seeds <= MAX_INIT_SEEDS:
        parser.error(f"argument --init-seeds: expected 0 or {MIN_SEEDS} to {MAX_INIT_SEEDS}, got {args.init_seeds}")
    for name in ("seed", "init_seed_start"):
        if not 0 <= getattr(args, name) <= MAX_SEED:
            parser.error(f"argument --{name.replace('_', '-')}: expected 0 to 2**63 − 1, got {getattr(args, name)}")
    if len(args.against_name) > len(args.against):
        parser.error(f"argument --against-name: {len(args.against_name)} names for {len(args.against)} --against "
                     "networks (one per --against, in order)")
    if args.text is not None and (args.mean, args.std, args.channels) != (None, None, None):
        parser.error("arguments --mean, --std, --channels: for images (--images, --dataset), not --text")
    preprocessing.check_arguments(args, parser)
    if args.dataset is not None and args.dataset not in _datasets():
        parser.error(f"argument --dataset: expected one of {', '.join(_datasets())}, got {args.dataset!r}")
    return args


def check_paths(args: argparse.Namespace) -> None:
    """ValueError naming the argument when a file or folder it names is not there, or is not what it must be (a
    folder of images, a text file, a model file), before anything is loaded."""
    for what, path, kind in (("images", args.images, "folder"), ("text", args.text, "file")):
        if path is None:
            continue
        found = Path(path)
        if not found.exists():
            raise ValueError(f"{what}: {path!r} does not exist")
        if kind == "folder" and not found.is_dir():
            raise ValueError(f"images: {path!r} is a file, not a folder of images (give the folder that holds it)")
        if kind == "file" and not found.is_file():
            raise ValueError(f"text: {path!r} is a folder, not a text file")
    for what, spec in (("model", args.model), *(("against", s) for s in args.against)):
        if not spec.startswith(("hf-hub:", "transformers:")) and not Path(spec).exists():
            raise ValueError(f"{what}: {spec!r} does not exist (a weights file, hf-hub:ORG/NAME, a run directory or "
                             "transformers:FOLDER)")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: parse, check the paths, open the checkpoint subject (`verify.checkpoint.open_checkpoint`: every
    model and input checked), take the report folder, decide every row (`verify.layerwise.decide`, the networks
    measured when the first row asks) and write the report (`verify.report`), under SIGTERM/SIGINT handling; print
    the summary; the exit status of the module docstring."""
    from verify.stopping import Interrupted, on_signals, status

    args = parse_args(argv)
    args.progress = sys.stderr.isatty()
    start, cpu = time.perf_counter(), time.process_time()
    try:
        with on_signals():
            check_paths(args)
            import torch

            from verify import checkpoint, report

            if args.threads:
                torch.set_num_threads(args.threads)
            subject = checkpoint.open_checkpoint(args)
            folder = Path(args.out) if args.out else checkpoint.default_folder(args.model)
            with report.ReportFolder(folder, args.overwrite) as out:
                decisions = subject.decide()
                meta = {**subject.record(), **_record(subject, decisions, start, cpu)}
                out.publish(lambda staging: report.write_network(staging, meta, decisions, subject.measured,
                                                                 *subject.series()))
    except Interrupted as stop:
        print(f"{PROG}: {stop}; no report written", file=sys.stderr)
        return status(stop)
    except cli.EXPECTED as err:
        return cli.fail(PROG, err, 2)
    print(report.network_console(meta, decisions, folder))
    return 0


def _record(subject, decisions, start: float, cpu: float) -> dict:
    """What report.json adds to the subject's record: the conclusion, the per-layer means (per head for R^c) of what
    the figures draw, the versions, the machine and the times."""
    import platform

    import torch

    from verify import experiments, report
    from verify.checkpoint import RATES
    from verify.context import versions

    series, _ = subject.series()
    return {"conclusion": report.network_conclusion(decisions, len(subject.inputs), len(subject.inits)),
            "means": {name: {label: [float(x) for x in v[name].mean(0)] for label, v in series.items() if name in v}
                      for name in report.NETWORK_NAMES},
            "heads": {name: {label: v[f"{name}_heads"].mean(0).tolist() for label, v in series.items()
                             if f"{name}_heads" in v} for name in RATES},
            "versions": {**versions(), "python": platform.python_version(), "crate_nn code": experiments.CODE},
            "machine": f"{platform.machine()}, {torch.get_num_threads()} torch threads",
            "seconds": time.perf_counter() - start, "cpu_seconds": time.process_time() - cpu}


if __name__ == "__main__":
    sys.exit(main())
