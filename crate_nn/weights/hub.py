"""``hf-hub:ORG/NAME[@revision][:path]``: a weights file in the local Hugging Face Hub cache.

Nothing is downloaded, ever: the name is resolved in the cache alone, as with ``HF_HUB_OFFLINE=1`` whatever that
variable says (fetch the files once with the Hub's own tools, e.g. ``huggingface-cli download ORG/NAME``). The cache
is ``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub``, laid out as the Hub's client writes
it::

    models--ORG--NAME/refs/main                      the commit hash a branch or tag points to
    models--ORG--NAME/snapshots/<commit>/<files>     the repository's files at that commit (links into blobs/)

``@revision`` is a branch, a tag or a commit hash (default ``main``). ``:path`` names a file inside the repository
(``hf-hub:UCSC-VLAA/CRATE-alpha:torch/crate_alpha_B16.pth``; any file, with or without a suffix). Without it, the
repository's one weights file is taken (`weights_file`: a ``.safetensors`` file if there is one, else a
``.pth``/``.pt``/``.bin``, else a ``.npz``, in any sub-folder); several of them are refused in one line listing them. With
``huggingface_hub`` installed (the ``hub`` extra) its ``snapshot_download(..., local_files_only=True)`` finds the
snapshot; without it, `snapshot` reads the layout above. Either way, what is read stays inside the repository's
folder of the cache: a revision or a path with ``..``, a ref that is not a commit hash, a link out of the cache are
refused naming them.
"""
from __future__ import annotations

import os
import re
from pathlib import Path, PurePosixPath

from .. import extras

PREFIX = "hf-hub:"
WEIGHTS = ((".safetensors",), (".pth", ".pt", ".bin"), (".npz",))
"""Weight-file suffixes in order of preference (safetensors first: no unpickling at all; JAX's ``.npz`` last)."""
PREFERRED = ("model.safetensors", "pytorch_model.bin")
"""Among several files of one kind, the name the Hub's libraries use for a model's weights (at the top level)."""
_COMMIT = re.compile(r"[0-9a-f]{40}")
FORM = "hf-hub:ORG/NAME[@revision][:path/in/the/repository]"


def is_hub(path) -> bool:
    """Whether ``path`` names a Hub repository (``hf-hub:…``) rather than a file."""
    return isinstance(path, str) and path.startswith(PREFIX)


def cache_dir() -> Path:
    """The Hub cache: ``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub``."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join("~", ".cache", "huggingface")
    return Path(home).expanduser() / "hub"


def _inside(name: str) -> bool:
    """Whether a relative name (a revision, a path in the repository) stays where it is joined: not absolute,
    no ``..`` and no empty part."""
    parts = PurePosixPath(name).parts
    return bool(parts) and not name.startswith("/") and "\\" not in name and all(p not in ("..", "") for p in parts)


_NAME = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,94}[A-Za-z0-9_])?")
"""An organisation's or a repository's name on the Hub: letters, digits, '-', '_' and '.', neither first nor last a
'-' or '.', at most 96 characters."""


def parse(spec: str) -> tuple[str, str, str | None]:
    """(``ORG/NAME``, revision, path in the repository or None) of ``hf-hub:ORG/NAME[@revision][:path]``;
    ValueError naming ``spec`` otherwise: a control character, an organisation or a name the Hub does not allow
    (``..``), a revision or a path that leaves the repository."""
    if any(ord(c) < 32 or ord(c) == 127 for c in spec):
        raise ValueError(f"path: {spec!r} holds a control character")
    name, colon, path = spec.removeprefix(PREFIX).partition(":")
    repo, at, revision = name.partition("@")
    if repo.count("/") != 1 or not all(repo.split("/")) or (at and not revision) or (colon and not path):
        hint = ""
        if repo.count("/") > 1 and all(repo.split("/")):
            org, rest = repo.split("/", 1)
            base, _, inner = rest.partition("/")
            hint = f" (a file inside the repository follows a colon: hf-hub:{org}/{base}:{inner})"
        raise ValueError(f"path: expected {FORM}, got {spec!r}{hint}")
    bad = [part for part in repo.split("/") if not _NAME.fullmatch(part) or ".." in part]
    if bad:
        raise ValueError(f"path: {bad[0]!r} in {spec!r} is not a name the Hub allows (letters, digits, '-', '_' and "
                         "'.', neither first nor last a '-' or '.', no '..')")
    for what, value in (("revision", revision), ("path", path)):
        if value and not _inside(value):
            raise ValueError(f"path: the {what} {value!r} of {spec!r} leaves the repository (an absolute path or "
                             "'..'); name a file inside it")
    return repo, revision or "main", path or None


def repo_folder(repo: str, cache: Path) -> Path:
    """Where the cache keeps ``ORG/NAME``: ``models--ORG--NAME``."""
    return cache / ("models--" + repo.replace("/", "--"))


def snapshot(repo: str, revision: str, cache: Path) -> Path:
    """The folder holding ``repo`` at ``revision`` in ``cache`` (a branch or tag through ``refs/``, a commit hash
    directly); ValueError naming the repository, the revision and ``cache`` when it is not there, or when the cache
    points outside the repository's snapshots (a ref that is not a commit hash)."""
    folder = repo_folder(repo, cache)
    if extras.available("huggingface_hub"):
        found = _snapshot_by_the_hub_client(repo, revision, cache)
    else:
        ref = folder / "refs" / revision
        commit = _read_ref(ref) if ref.is_file() else revision if _COMMIT.fullmatch(revision) else None
        if commit is not None and not _COMMIT.fullmatch(commit):
            raise ValueError(f"path: {ref} holds {commit[:80]!r}, not a commit hash (a damaged Hugging Face cache)")
        found = folder / "snapshots" / commit if commit else None
        if found is None or not found.is_dir():
            raise not_cached(repo, revision, cache, repository_cached=folder.is_dir())
    snapshots = os.path.abspath(folder / "snapshots")
    if os.path.dirname(os.path.abspath(found)) != snapshots or not _COMMIT.fullmatch(Path(found).name):
        raise ValueError(f"path: revision {revision!r} of {repo} resolves to {found}, not to a snapshot in {snapshots} "
                         "(a damaged Hugging Face cache)")
    return Path(found)


def _read_ref(ref: Path) -> str:
    """The commit a ref file holds (its first 100 bytes: a commit hash is 40; a larger file is damaged, and is not
    read whole)."""
    with open(ref, encoding="utf-8", errors="replace") as f:
        return f.read(100).strip()


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
    """The weights in a snapshot ``folder``, searched in every sub-folder: its one ``.safetensors`` file
    (``model.safetensors`` among several), else its one ``.pth``/``.pt``/``.bin`` (``pytorch_model.bin`` among
    several), else its one ``.npz``; ValueError naming ``source`` and the files when none, or several without the preferred name, are
    there."""
    files = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    for suffixes in WEIGHTS:
        found = [name for name in files if name.endswith(suffixes)]
        preferred = [name for name in found if name in PREFERRED]
        if len(found) == 1 or preferred:
            return folder / (preferred or found)[0]
        if found:
            raise ValueError(f"path: {source} holds several weight files {found}; name one: {source}:{found[0]}")
    raise ValueError(f"path: {source} holds no weights file (.safetensors, .pth, .pt, .bin or .npz) among {files}; a "
                     f"file without one of these suffixes is named by its path: {source}:<path>")


def resolve(spec: str) -> str:
    """The local path of the file ``hf-hub:ORG/NAME[@revision][:path]`` names (`parse`, `snapshot`,
    `weights_file`), checked to lie inside the repository's folder of the cache."""
    repo, revision, path = parse(spec)
    cache = cache_dir()
    folder = snapshot(repo, revision, cache)
    found = folder / path if path is not None else weights_file(folder, spec)
    if not found.is_file():
        inside = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
        raise ValueError(f"path: {spec}: no file {path!r} in the repository; it holds {inside[:20]}")
    if not Path(os.path.realpath(found)).is_relative_to(os.path.realpath(repo_folder(repo, cache))):
        raise ValueError(f"path: {spec} links to {os.path.realpath(found)}, outside the repository's folder of the "
                         f"Hugging Face cache {repo_folder(repo, cache)}")
    return os.fspath(found)
