"""Published weights in the local Hugging Face cache, for the regression tests against real weights: the cache
`crate_nn.weights.hub` reads (``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub``; nothing
is downloaded). A test asks for a repository's files and is skipped, naming the repository, when the cache does not
hold them."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from crate_nn.checkpoint import sniff
from crate_nn.weights import hub

CRATE_ALPHA = "UCSC-VLAA/CRATE-alpha"
"""CRATE-α's weights: ``torch/crate_alpha_{B16,L14}.pth`` (the PyTorch port's classifiers, beside its CLIPA models)
and ``jax/*.npz`` (their JAX model's)."""


def cached_files(repo: str, folder: str, pattern: str = ".*") -> list[str]:
    """The files under ``folder`` of ``repo``'s ``main`` snapshot in the cache whose names match the regex
    ``pattern``, as ``hf-hub:`` names, smallest first; the calling test is skipped naming the repository when there are
    none."""
    cache = hub.cache_dir()
    try:
        snapshot = hub.snapshot(repo, "main", cache)
    except ValueError:
        pytest.skip(f"{repo} is not in the local Hugging Face cache {cache} (fetch it to run this regression test)")
    found = sorted((p for p in (snapshot / folder).rglob("*") if p.is_file() and re.fullmatch(pattern, p.name)),
                   key=lambda p: p.stat().st_size)
    if not found:
        pytest.skip(f"{repo} in the cache {cache} holds no file {folder}/{pattern}")
    return [f"{hub.PREFIX}{repo}:{p.relative_to(snapshot).as_posix()}" for p in found]


def cached_checkpoints_of(format_name: str, word: str) -> list[Path]:
    """The weight files (``.pt``, ``.pth``, ``.bin``, ``.safetensors``) of every cached repository whose name holds
    ``word`` (case-insensitively) that `sniff` reads as ``format_name``, smallest first; the calling test is skipped
    naming the format when there are none."""
    cache = hub.cache_dir()
    suffixes = (".pt", ".pth", ".bin", ".safetensors")
    candidates = [p for repo in (cache.glob("models--*") if cache.is_dir() else ()) if word in repo.name.lower()
                  for p in (repo / "snapshots").rglob("*") if p.is_file() and p.name.endswith(suffixes)]
    found = []
    for path in sorted(candidates, key=lambda p: p.stat().st_size):
        try:
            if sniff(path) == format_name:
                found.append(path)
        except ValueError:
            continue
    if not found:
        pytest.skip(f"no {format_name} checkpoint in a repository named *{word}* in the local Hugging Face cache "
                    f"{cache} (fetch one to run this regression test)")
    return found
