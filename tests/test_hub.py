"""``crate_nn.load("hf-hub:ORG/NAME[@revision][:path]")`` resolves in a local Hugging Face cache alone
(`crate_nn.weights.hub`): a fake cache in the Hub client's layout (``refs/<branch>`` holding a commit hash,
``snapshots/<hash>/`` linking to ``blobs/``), found through ``HF_HUB_CACHE``, ``HF_HOME`` or the home folder;
branches, commit hashes, missing repositories and revisions, the choice of the weights file, a file named by its
path inside the repository (CRATE-α's layout: sub-folders, files without a suffix), and nothing read from outside
the repository's folder of the cache. Each test runs by the cache's layout and, when huggingface_hub is installed,
through its client too."""
import hashlib
import os
from pathlib import Path

import pytest
import torch

import crate_nn
from crate_nn import extras, hub
from crate_nn.official import crate_nn_to_crate_alpha, crate_nn_to_official

MAIN, OTHER = "a" * 40, "b" * 40  # two commits of the repository


@pytest.fixture(params=["layout", "client"])
def resolver(request, monkeypatch):
    """Resolve by the cache's layout (huggingface_hub hidden) or through huggingface_hub's client."""
    if request.param == "client":
        pytest.importorskip("huggingface_hub")
    else:
        real = extras.available
        monkeypatch.setattr(extras, "available", lambda package: package != "huggingface_hub" and real(package))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # honoured trivially: nothing is ever downloaded
    return request.param


def tiny(seed: int = 0):
    torch.manual_seed(seed)
    return crate_nn.create_model("crate_tiny", image_size=8, patch_size=4, num_classes=3, dim=8, depth=1, heads=2)


def snapshot(cache: Path, repo: str, commit: str, files: dict[str, bytes], refs: tuple[str, ...] = ()) -> Path:
    """``files`` as the snapshot ``commit`` of ``repo`` in ``cache`` (each a link to its blob), ``refs`` pointing at
    it; the snapshot folder."""
    root = cache / ("models--" + repo.replace("/", "--"))
    folder = root / "snapshots" / commit
    folder.mkdir(parents=True)
    (root / "blobs").mkdir(exist_ok=True)
    for name, data in files.items():
        blob = root / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        link = folder / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    (root / "refs").mkdir(exist_ok=True)
    for ref in refs:
        (root / "refs" / ref).write_text(commit)
    return folder


def safetensors_bytes(model, tmp_path: Path, name: str = "m.safetensors") -> bytes:
    crate_nn.save(tmp_path / name, model)
    return (tmp_path / name).read_bytes()


def same_weights(a, b) -> bool:
    return a.state_dict().keys() == b.state_dict().keys() and all(
        torch.equal(a.state_dict()[k], v) for k, v in b.state_dict().items())


def test_main_a_branch_and_a_commit_hash_resolve_offline(tmp_path, monkeypatch, resolver):
    cache = tmp_path / "cache"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    first, second = tiny(0), tiny(1)
    snapshot(cache, "org/crate", MAIN, {"model.safetensors": safetensors_bytes(first, tmp_path)}, refs=("main",))
    snapshot(cache, "org/crate", OTHER, {"model.safetensors": safetensors_bytes(second, tmp_path)}, refs=("v2",))
    assert crate_nn.checkpoint.sniff("hf-hub:org/crate") == "crate_nn (safetensors)"
    assert same_weights(crate_nn.load("hf-hub:org/crate"), first)
    assert same_weights(crate_nn.load("hf-hub:org/crate@main"), first)
    assert same_weights(crate_nn.load("hf-hub:org/crate@v2"), second)  # a branch: refs/v2
    assert same_weights(crate_nn.load(f"hf-hub:org/crate@{OTHER}"), second)  # a commit hash: snapshots/<hash>


def test_the_cache_is_hf_home_hub_then_the_home_folder(tmp_path, monkeypatch, resolver):
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    model = tiny()
    snapshot(tmp_path / "hf" / "hub", "org/a", MAIN, {"model.safetensors": safetensors_bytes(model, tmp_path)},
             refs=("main",))
    assert same_weights(crate_nn.load("hf-hub:org/a"), model)
    monkeypatch.delenv("HF_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert hub.cache_dir() == tmp_path / "home" / ".cache" / "huggingface" / "hub"


def test_a_missing_repository_or_revision_is_one_line_naming_it_and_the_cache(tmp_path, monkeypatch, resolver):
    cache = tmp_path / "cache"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    snapshot(cache, "org/crate", MAIN, {"model.safetensors": safetensors_bytes(tiny(), tmp_path)}, refs=("main",))
    with pytest.raises(ValueError, match=rf"path: org/absent \(revision 'main'\) is not in the Hugging Face cache "
                                         rf"{cache} \(searched offline; nothing is downloaded"):
        crate_nn.load("hf-hub:org/absent")
    for revision in ("dev", OTHER):
        with pytest.raises(ValueError, match=rf"path: revision '{revision}' of org/crate is not in the Hugging Face "
                                             rf"cache {cache}") as raised:
            crate_nn.load(f"hf-hub:org/crate@{revision}")
        assert "\n" not in str(raised.value)


def test_the_weights_file_safetensors_first_then_torch_files(tmp_path, monkeypatch, resolver):
    cache = tmp_path / "cache"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    ours, theirs = tiny(0), tiny(1)
    torch.save(crate_nn_to_official(theirs.state_dict()), tmp_path / "theirs.pth")
    files = {"crate.safetensors": safetensors_bytes(ours, tmp_path), "theirs.pth": (tmp_path / "theirs.pth").read_bytes(),
             "config.json": b"{}"}
    snapshot(cache, "org/both", MAIN, files, refs=("main",))
    assert same_weights(crate_nn.load("hf-hub:org/both"), ours)  # the safetensors file, though not model.safetensors
    snapshot(cache, "org/authors", MAIN, {"theirs.pth": files["theirs.pth"], "README.md": b"#"}, refs=("main",))
    assert crate_nn.checkpoint.sniff("hf-hub:org/authors") == "authors' CRATE classifier"
    assert same_weights(crate_nn.load("hf-hub:org/authors", heads=2), theirs)  # sniffed like any file
    two = {"a.safetensors": files["crate.safetensors"], "b.safetensors": safetensors_bytes(theirs, tmp_path, "b")}
    snapshot(cache, "org/two", MAIN, two, refs=("main",))
    with pytest.raises(ValueError, match=r"hf-hub:org/two holds several weight files \['a.safetensors', "
                                         r"'b.safetensors'\]"):
        crate_nn.load("hf-hub:org/two")
    snapshot(cache, "org/empty", MAIN, {"README.md": b"#"}, refs=("main",))
    with pytest.raises(ValueError, match=r"hf-hub:org/empty holds no weights file .* among \['README.md'\]"):
        crate_nn.load("hf-hub:org/empty")


@pytest.mark.parametrize("spec", ["hf-hub:crate", "hf-hub:org/", "hf-hub:a/b/c", "hf-hub:org/crate@"])
def test_malformed_names_are_refused(spec):
    with pytest.raises(ValueError, match=r"path: expected hf-hub:ORG/NAME\[@revision\]\[:path/in/the/repository\]"):
        crate_nn.load(spec)


def test_the_command_lines_load_a_hub_name_too(tmp_path, monkeypatch, resolver):
    """crate-eval and crate-segment load through `crate_nn.loading.load_model`: a Hub name resolves there as in
    `crate_nn.load`, and a missing one is refused in one line naming the repository."""
    from crate_nn.loading import load_model

    cache = tmp_path / "cache"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    model = tiny(0)
    snapshot(cache, "org/crate", MAIN, {"model.safetensors": safetensors_bytes(model, tmp_path)}, refs=("main",))
    loaded, _ = load_model("hf-hub:org/crate")
    assert same_weights(loaded, model)
    with pytest.raises(ValueError, match="org/missing"):
        load_model("hf-hub:org/missing")


def alpha(seed: int):
    torch.manual_seed(seed)
    return crate_nn.create_model("crate_alpha_b16", image_size=8, patch_size=4, dim=8, depth=1, heads=2, num_classes=3)


def torch_bytes(state: dict, tmp_path: Path) -> bytes:
    torch.save(state, tmp_path / "file")
    return (tmp_path / "file").read_bytes()


def crate_alpha_repository(cache: Path, tmp_path: Path) -> dict:
    """UCSC-VLAA/CRATE-alpha's layout (weights in sub-folders, ImageNet-21K files without a suffix, JAX .npz files),
    with tiny stand-ins; the models by path."""
    models = {"torch/crate_alpha_B16.pth": alpha(0), "torch/crate_alpha_L14.pth": alpha(1),
              "torch/in21k_Pretrain/crate_alpha_B16_IN21K": alpha(2)}
    files = {name: torch_bytes(crate_nn_to_crate_alpha(m.state_dict()), tmp_path) for name, m in models.items()}
    files.update({".gitattributes": b"*.pth filter=lfs", "README.md": b"# CRATE-alpha",
                  "jax/crate_alpha_B16_in1k.npz": b"PK\x03\x04 stand-in"})
    snapshot(cache, "UCSC-VLAA/CRATE-alpha", MAIN, files, refs=("main",))
    return models


def test_a_file_inside_the_repository_is_named_by_its_path(tmp_path, monkeypatch, resolver):
    cache = tmp_path / "cache"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    models = crate_alpha_repository(cache, tmp_path)
    for path, model in models.items():  # the extension-less ImageNet-21K file included
        for spec in (f"hf-hub:UCSC-VLAA/CRATE-alpha:{path}", f"hf-hub:UCSC-VLAA/CRATE-alpha@main:{path}"):
            assert crate_nn.weights.sniff(spec) == "CRATE-α"
            assert same_weights(crate_nn.load(spec, heads=2), model)
    with pytest.raises(ValueError, match=r"no file 'torch/absent.pth' in the repository; it holds \['.gitattributes', "
                                         r"'README.md', 'jax/crate_alpha_B16_in1k.npz', 'torch/crate_alpha_B16.pth'"):
        crate_nn.load("hf-hub:UCSC-VLAA/CRATE-alpha:torch/absent.pth")
    with pytest.raises(ValueError, match=r"a file inside the repository follows a colon: "
                                         r"hf-hub:UCSC-VLAA/CRATE-alpha:torch/crate_alpha_B16.pth\)"):
        crate_nn.load("hf-hub:UCSC-VLAA/CRATE-alpha/torch/crate_alpha_B16.pth")


def test_a_repository_of_several_weight_files_is_refused_listing_them(tmp_path, monkeypatch, resolver):
    cache = tmp_path / "cache"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    crate_alpha_repository(cache, tmp_path)
    with pytest.raises(ValueError, match=r"^path: hf-hub:UCSC-VLAA/CRATE-alpha holds several weight files "
                                         r"\['torch/crate_alpha_B16.pth', 'torch/crate_alpha_L14.pth'\]; name one: "
                                         r"hf-hub:UCSC-VLAA/CRATE-alpha:torch/crate_alpha_B16.pth$"):
        crate_nn.load("hf-hub:UCSC-VLAA/CRATE-alpha")
    only = {"weights/model": safetensors_bytes(tiny(), tmp_path), "README.md": b"#"}  # in a sub-folder, no suffix
    snapshot(cache, "org/nested", MAIN, only, refs=("main",))
    with pytest.raises(ValueError, match=r"holds no weights file .* named by its path: hf-hub:org/nested:<path>"):
        crate_nn.load("hf-hub:org/nested")
    assert same_weights(crate_nn.load("hf-hub:org/nested:weights/model"), tiny())  # safetensors told by its bytes


def test_nothing_outside_the_repository_is_read(tmp_path, monkeypatch, resolver):
    """A path or a revision with '..', a ref that points out of the snapshots, a link out of the cache: each names
    what it is and reads nothing (a refs/main holding '../' used to load a file outside the cache)."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    outside = tmp_path / "outside"
    outside.mkdir()
    crate_nn.save(outside / "model.safetensors", tiny())
    snapshot(cache, "org/crate", MAIN, {"model.safetensors": safetensors_bytes(tiny(1), tmp_path)}, refs=("main",))
    for spec in ("hf-hub:org/crate:../../../../outside/model.safetensors", "hf-hub:org/crate:/etc/passwd",
                 "hf-hub:org/crate@../../../../outside:model.safetensors"):
        with pytest.raises(ValueError, match=r"leaves the repository \(an absolute path or '..'\)"):
            crate_nn.load(spec)
    folder = cache / "models--org--crate"
    (folder / "refs" / "main").write_text("../../../outside")  # snapshots/../../../outside = tmp_path/outside
    with pytest.raises(ValueError, match="not a commit hash|not to a snapshot"):
        crate_nn.load("hf-hub:org/crate")
    (folder / "refs" / "main").write_text(MAIN)
    (folder / "snapshots" / MAIN / "model.safetensors").unlink()
    (folder / "snapshots" / MAIN / "model.safetensors").symlink_to(outside / "model.safetensors")
    with pytest.raises(ValueError, match=r"links to .*outside/model.safetensors, outside the repository's folder"):
        crate_nn.load("hf-hub:org/crate")


def test_names_out_of_the_cache_are_refused_whichever_resolver(tmp_path, monkeypatch, resolver):
    """An organisation or a name of '..' (the Hub client answered in its own words, the layout looked for
    models--org--..), an absolute revision, a control character, a sub-folder of the snapshot linking out of the
    cache: each is one line naming it, and nothing outside the repository is read."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    outside = tmp_path / "outside"
    outside.mkdir()
    crate_nn.save(outside / "model.safetensors", tiny())
    folder = snapshot(cache, "org/crate", MAIN, {"model.safetensors": safetensors_bytes(tiny(1), tmp_path)},
                      refs=("main",))
    (folder / "sub").symlink_to(outside, target_is_directory=True)
    for spec, message in (
            ("hf-hub:org/..", r"path: '\.\.' in 'hf-hub:org/\.\.' is not a name the Hub allows"),
            ("hf-hub:../crate", r"path: '\.\.' in 'hf-hub:\.\./crate' is not a name the Hub allows"),
            ("hf-hub:org/crate@/etc", r"path: the revision '/etc' of 'hf-hub:org/crate@/etc' leaves the repository"),
            ("hf-hub:org/crate:model.safetensors\0", r"path: 'hf-hub:org/crate:model.safetensors\\x00' holds a "
                                                     r"control character"),
            ("hf-hub:org/crate:sub/model.safetensors", r"links to .*outside/model.safetensors, outside the "
                                                        r"repository's folder")):
        with pytest.raises(ValueError, match=message) as raised:
            crate_nn.load(spec)
        assert "\n" not in str(raised.value)
    assert same_weights(crate_nn.load("hf-hub:org/crate:model.safetensors"), tiny(1))  # the one inside is read


def test_a_ref_file_is_read_no_further_than_a_commit_hash(tmp_path, monkeypatch):
    """A damaged refs/main of gigabytes was read whole; its first 100 bytes say it is not a commit hash."""
    real = extras.available
    monkeypatch.setattr(extras, "available", lambda package: package != "huggingface_hub" and real(package))
    cache = tmp_path / "cache"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    snapshot(cache, "org/crate", MAIN, {"model.safetensors": safetensors_bytes(tiny(), tmp_path)})
    with open(cache / "models--org--crate" / "refs" / "main", "w") as f:
        f.write("x" * 100)
        f.truncate(10**11)  # 100 GB of NUL bytes after them, sparse: read whole, they would not fit in memory
    with pytest.raises(ValueError, match=r"refs/main holds 'x{80}', not a commit hash \(a damaged Hugging Face "
                                         r"cache\)"):
        crate_nn.load("hf-hub:org/crate")
