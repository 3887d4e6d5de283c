"""``hf-hub:ORG/NAME[@revision]``: a checkpoint in the local Hugging Face Hub cache, for `crate_nn.load`.

Nothing is downloaded, ever: the name is resolved in the cache alone, as with ``HF_HUB_OFFLINE=1`` whatever that
variable says (fetch the files once with the Hub's own tools, e.g. ``huggingface-cli download ORG/NAME``). The cache
is ``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub``, laid out as the Hub's client writes
it::

    models--ORG--NAME/refs/main                      the commit hash a branch or tag points to
    models--ORG--NAME/snapshots/<commit>/<files>     the repository's files at that commit

``@revision`` is a branch, a tag or a commit hash (default ``main``). With ``huggingface_hub`` installed (the
``hub`` extra) its ``snapshot_download(..., local_files_only=True)`` finds the snapshot; without it, `snapshot`
reads the layout above. In the snapshot, `weights_file` picks the weights: a ``.safetensors`` file if there is one,
else a ``.pth``/``.pt``/``.bin``; the file is then read like any other (`crate_nn.checkpoint.sniff`).
"""
from __future__ import annotations

import os
import re
from pathlib import Path

from . import extras

PREFIX = "hf-hub:"
WEIGHTS = ((".safetensors",), (".pth", ".pt", ".bin"))
"""Weight-file suffixes in order of preference (safetensors first: no unpickling at all)."""
PREFERRED = ("model.safetensors", "pytorch_model.bin")
"""Among several files of one kind, the name the Hub's libraries use for a model's weights."""
_COMMIT = re.compile(r"[0-9a-f]{40}")


def is_hub(path) -> bool:
    """Whether ``path`` names a Hub repository (``hf-hub:…``) rather than a file."""
    return isinstance(path, str) and path.startswith(PREFIX)


def cache_dir() -> Path:
    """The Hub cache: ``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub``."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join("~", ".cache", "huggingface")
    return Path(home).expanduser() / "hub"


def parse(spec: str) -> tuple[str, str]:
    """(``ORG/NAME``, revision) of ``hf-hub:ORG/NAME[@revision]``; ValueError naming ``spec`` otherwise."""
    repo, _, revision = spec.removeprefix(PREFIX).partition("@")
    if repo.count("/") != 1 or not all(repo.split("/")) or (_ and not revision):
        raise ValueError(f"path: expected hf-hub:ORG/NAME or hf-hub:ORG/NAME@revision, got {spec!r}")
    return repo, revision or "main"


def repo_folder(repo: str, cache: Path) -> Path:
    """Where the cache keeps ``ORG/NAME``: ``models--ORG--NAME``."""
    return cache / ("models--" + repo.replace("/", "--"))


def snapshot(repo: str, revision: str, cache: Path) -> Path:
    """The folder holding ``repo`` at ``revision`` in ``cache`` (a branch or tag through ``refs/``, a commit hash
    directly); ValueError naming the repository, the revision and ``cache`` when it is not there."""
    if extras.available("huggingface_hub"):
        return _snapshot_by_the_hub_client(repo, revision, cache)
    folder = repo_folder(repo, cache)
    ref = folder / "refs" / revision
    commit = ref.read_text().strip() if ref.is_file() else revision if _COMMIT.fullmatch(revision) else None
    found = folder / "snapshots" / commit if commit else None
    if found is None or not found.is_dir():
        raise not_cached(repo, revision, cache, repository_cached=folder.is_dir())
    return found


def _snapshot_by_the_hub_client(repo: str, revision: str, cache: Path) -> Path:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return Path(snapshot_download(repo, revision=revision, cache_dir=cache, local_files_only=True))
    except LocalEntryNotFoundError:
        raise not_cached(repo, revision, cache, repository_cached=repo_folder(repo, cache).is_dir()) from None


def not_cached(repo: str, revision: str, cache: Path, repository_cached: bool) -> ValueError:
    """The one-line error for a repository, or a revision of it, the cache does not hold."""
    what = f"revision {revision!r} of {repo}" if repository_cached else f"{repo} (revision {revision!r})"
    return ValueError(f"path: {what} is not in the Hugging Face cache {cache} (searched offline; nothing is "
                      f"downloaded: fetch it first, e.g. huggingface-cli download {repo} --revision {revision})")


def weights_file(folder: Path, source: str) -> Path:
    """The weights in a snapshot ``folder``: its one ``.safetensors`` file (``model.safetensors`` among several),
    else its one ``.pth``/``.pt``/``.bin`` (``pytorch_model.bin`` among several); ValueError naming ``source`` and
    the files when none, or several without the preferred name, are there."""
    files = sorted(p.name for p in folder.iterdir() if p.is_file())
    for suffixes in WEIGHTS:
        found = [name for name in files if name.endswith(suffixes)]
        preferred = [name for name in found if name in PREFERRED]
        if len(found) == 1 or preferred:
            return folder / (preferred or found)[0]
        if found:
            raise ValueError(f"path: {source} holds several weight files {found}; which one is meant is unclear "
                             f"(load its path in {folder})")
    raise ValueError(f"path: {source} holds no weights file (.safetensors, .pth, .pt or .bin) among {files}")


def resolve(spec: str) -> str:
    """The local path of the weights of ``hf-hub:ORG/NAME[@revision]`` (`parse`, `snapshot`, `weights_file`)."""
    repo, revision = parse(spec)
    return os.fspath(weights_file(snapshot(repo, revision, cache_dir()), spec))
