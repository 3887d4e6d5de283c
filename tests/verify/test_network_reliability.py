"""What a user's files and a user's hands can do to ``python -m verify.network``, one test per defect or refusal, on
small files each test writes: a model whose file records no preprocessing (audited with one option), a run
re-exported in the authors' format (its preprocessing kept), images of every kind Pillow reads and files that are
not images, truncated, tiny and oversized images, empty and binary text files, report folders that are files,
read-only or taken by another audit, SIGTERM and SIGINT mid-audit, arguments at 0, negative or absurd, tensors that
contradict their config. Each refusal is one line, exit status 2, with no report folder left behind; the report
itself opens with its conclusion, its figures' titles fit and their labels are mathtext."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import crate_nn
from crate_nn.export import main as export
from crate_nn.files import FileLock
from crate_nn.weights.ours import payload_digest
from verify import checkpoint, network, plots, report
from verify.layerwise import Control, Decision
from verify.registry import Result

SMALL = dict(dim=32, depth=3, heads=2, image_size=32, patch_size=8, num_classes=5)
FAST = ["--n", "6", "--control-n", "4"]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    """The collapse floors go to a per-worker temporary cache (computed once per size there)."""
    monkeypatch.setenv("CRATE_WHITEBOX_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


@pytest.fixture(scope="module")
def authors(tmp_path_factory):
    """A CRATE at random initialisation in the authors' format (which records no preprocessing), and in ours."""
    folder = tmp_path_factory.mktemp("authors")
    torch.manual_seed(0)
    crate_nn.save(folder / "ours.pt", crate_nn.create_model("crate_tiny", **SMALL))
    assert export([str(folder / "ours.pt"), str(folder / "crate.pth"), "--format", "official-classifier"]) == 0
    return folder


def images(folder, count, size=(40, 44), mode="RGB", seed=0):
    """``count`` random PNG files of ``size`` (width, height) in ``mode``."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for i in range(count):
        Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)).convert(mode).save(
            folder / f"{i:03d}.png")
    return folder


def refused(argv, capsys, message, *, prefix=True):
    """``network.main(argv)`` exits 2 with the one line ``python -m verify.network: <message>`` (``prefix``: the
    line starts with it); the line."""
    assert network.main([str(a) for a in argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    line = err.strip()
    expected = f"python -m verify.network: {message}"
    assert line.startswith(expected) if prefix else line == expected, line
    return line


# --------------------------------------------------------------------------------------------- preprocessing
def test_a_random_crate_in_the_authors_format_is_audited_on_digits_with_one_option(authors, tmp_path, capsys):
    """Its file records no preprocessing: the digits' one channel against its three is refused naming --channels and
    model.preprocessing, and audited with ``--channels 3`` (ImageNet's mean and std, said so in the report)."""
    argv = [authors / "crate.pth", "--heads", "2", "--dataset", "digits", *FAST, "--out", tmp_path / "out"]
    refused(argv, capsys, "channels: built-in dataset digits (test split) has 1 channel, the model takes 3, and its "
                          "file records no preprocessing (model.preprocessing is None); pass --channels 3 to convert "
                          "the images (gray repeated to RGB); --mean/--std set their normalisation (ImageNet's "
                          "otherwise)", prefix=False)
    assert not (tmp_path / "out").exists()
    assert network.main([str(a) for a in argv] + ["--channels", "3"]) == 0
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["inputs"]["preprocessing"] == {
        "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225], "channels": 3, "skipped": [],
        "source": "ImageNet's (the checkpoint records none: model.preprocessing is None)"}
    assert report["inputs"]["source"].endswith("6 of 360, 8×8 resized to 32×32")
    text = (tmp_path / "out" / "report.md").read_text().splitlines()
    assert text[2] == f"**{report['conclusion']}**" and text[2].startswith("**On these 6 inputs, with depth this network")
    assert report["conclusion"] in capsys.readouterr().out.splitlines()


def test_the_digits_run_re_exported_in_the_authors_format_keeps_its_preprocessing(tmp_path, capsys):
    from crate_nn.tasks import get_preset

    config = get_preset("digits").smoke(steps=2, output_dir=str(tmp_path / "run"), curves=False)
    crate_nn.engine.train(config)
    run = crate_nn.load(tmp_path / "run" / "checkpoints" / "last.pt")
    assert export([str(tmp_path / "run" / "checkpoints" / "last.pt"), str(tmp_path / "digits.pth"), "--format",
                   "official-classifier"]) == 0
    assert capsys.readouterr().out.strip().endswith(", its preprocessing kept")
    back = crate_nn.load(tmp_path / "digits.pth", heads=run.config.heads)
    assert back.preprocessing == run.preprocessing and back.preprocessing.mean == (0.5,)
    assert network.main([str(tmp_path / "digits.pth"), "--heads", str(run.config.heads), "--dataset", "digits",
                         *FAST, "--out", str(tmp_path / "out")]) == 0
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["inputs"]["preprocessing"]["source"] == "recorded in the checkpoint (model.preprocessing)"
    assert report["inputs"]["preprocessing"]["mean"] == [0.5]


# --------------------------------------------------------------------------------------------- image folders
def test_every_kind_of_image_is_read_and_other_files_are_skipped_and_counted(authors, tmp_path, capsys):
    folder = tmp_path / "val"
    rng = np.random.default_rng(1)
    pixels = rng.integers(0, 256, (44, 40, 3), dtype=np.uint8)
    folder.mkdir()
    Image.fromarray(pixels).convert("CMYK").save(folder / "cmyk.jpg")
    Image.fromarray(pixels).convert("P").save(folder / "palette.png")
    Image.fromarray(pixels).convert("LA").save(folder / "gray_alpha.png")
    Image.fromarray(pixels).convert("RGBA").save(folder / "rgba.png")
    Image.fromarray((rng.integers(0, 65536, (44, 40))).astype(np.uint16)).save(folder / "sixteen.png")
    Image.fromarray(pixels).save(folder / "plain.bmp")
    (folder / "notes.txt").write_text("labels")
    (folder / "fake.png").write_text("a text file under an image's name")
    (folder / "sub").mkdir()
    (folder / "sub" / "README").write_text("#")
    assert network.main([str(authors / "crate.pth"), "--heads", "2", "--images", str(folder), "--control-n", "4",
                         "--out", str(tmp_path / "out")]) == 0  # no --n: all the images there are
    inputs = json.loads((tmp_path / "out" / "report.json").read_text())["inputs"]
    assert inputs["n"] == 6 and sorted(inputs["names"]) == ["cmyk.jpg", "gray_alpha.png", "palette.png",
                                                            "plain.bmp", "rgba.png", "sixteen.png"]
    assert sorted(s["file"] for s in inputs["preprocessing"]["skipped"]) == ["fake.png", "notes.txt", "sub/README"]
    assert ", 6 of 7 files with an image suffix; 3 files skipped, not images (" in inputs["source"]


def test_sixteen_bit_images_are_scaled_not_clipped_and_float_images_refused():
    from crate_nn.data.images import to_rgb

    values = np.array([[0, 257, 65535, 32896]], dtype=np.uint16)  # 257·k is 8-bit level k, exactly
    assert np.asarray(to_rgb(Image.fromarray(values)))[0, :, 0].tolist() == [0, 1, 255, 128]
    with pytest.raises(ValueError, match="a floating-point image \\(Pillow mode F\\): its value range is not known"):
        to_rgb(Image.fromarray(np.zeros((2, 2), np.float32)))
    with pytest.raises(ValueError, match="integer pixels from 0 to 70000 \\(Pillow mode I\\), outside 16 bits"):
        to_rgb(Image.fromarray(np.array([[0, 70000]], np.int32)))


def test_a_folder_of_too_few_images_counts_what_it_skipped(authors, tmp_path, capsys):
    folder = images(tmp_path / "val", 2)
    (folder / "a.txt").write_text("one")
    (folder / "b.txt").write_text("two")
    refused([authors / "crate.pth", "--heads", "2", "--images", folder], capsys,
            f"images: {str(folder)!r} holds 2 images; 2 files skipped, not images (a.txt, b.txt); the audit's rule "
            "needs at least 3", prefix=False)
    refused([authors / "crate.pth", "--heads", "2", "--images", folder / "000.png"], capsys,
            f"images: {str(folder / '000.png')!r} is a file, not a folder of images (give the folder that holds it)",
            prefix=False)


def test_truncated_and_tiny_images_are_one_line_naming_the_file(authors, tmp_path, capsys):
    common = [authors / "crate.pth", "--heads", "2", "--out", tmp_path / "out", "--images"]
    truncated = images(tmp_path / "truncated", 4)
    data = (truncated / "001.png").read_bytes()
    (truncated / "001.png").write_bytes(data[:len(data) // 2])
    refused([*common, truncated], capsys, f"images: unreadable image {truncated / '001.png'}: OSError: ")
    tiny = images(tmp_path / "tiny", 4)
    Image.new("RGB", (1, 1)).save(tiny / "002.png")
    refused([*common, tiny], capsys, "images: '002.png' is 1×1 pixels, fewer a side than the model's 4×4 patches "
                                     "(upscaled, each patch would hold less than a pixel); remove it", prefix=False)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("limit", [1000, 500])
def test_an_image_past_pillows_limit_is_one_line_naming_it(authors, tmp_path, capsys, monkeypatch, limit):
    """A decompression bomb, in small: each image holds 40 × 44 = 1,760 pixels, past Pillow's limit (where it only
    warns, and decoded it) and past twice its limit (where it refuses)."""
    large = images(tmp_path / "large", 4)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", limit)
    line = refused([authors / "crate.pth", "--heads", "2", "--images", large], capsys, "images: '00")
    assert line.endswith(f"is larger than Pillow's limit of {limit:,} pixels (PIL.Image.MAX_IMAGE_PIXELS, against "
                         "decompression bombs)")


# --------------------------------------------------------------------------------------------- text files
@pytest.fixture(scope="module")
def gpt(tmp_path_factory):
    path = tmp_path_factory.mktemp("gpt") / "gpt.pt"
    torch.manual_seed(0)
    model = crate_nn.create_model("crate_gpt_small", dim=32, depth=3, heads=2, vocab_size=300, block_size=16)
    crate_nn.save(path, model)
    return path


@pytest.mark.parametrize("content, message", [
    (b"", "text: {path!r} is empty"),
    (b"some text\x00\x01\x02 and a binary tail", "text: {path!r} holds NUL bytes (the first at byte 9): a binary "
                                                  "file, not text"),
])
def test_empty_and_binary_text_files_are_refused(gpt, tmp_path, capsys, content, message):
    path = tmp_path / "book.txt"
    path.write_bytes(content)
    refused([gpt, "--text", path, "--tokenizer", "bytes"], capsys, message.format(path=str(path)), prefix=False)


# --------------------------------------------------------------------------------------------- the report folder
def test_an_out_that_is_a_file_or_read_only_is_refused_before_measuring(authors, tmp_path, capsys, monkeypatch):
    folder = images(tmp_path / "val", 6)
    common = [authors / "crate.pth", "--heads", "2", "--images", folder, *FAST, "--out"]
    (tmp_path / "file").write_text("mine")
    refused([*common, tmp_path / "file"], capsys, f"out: {str(tmp_path / 'file')!r} is a file, not a folder",
            prefix=False)
    assert (tmp_path / "file").read_text() == "mine"
    locked = tmp_path / "read-only"
    locked.mkdir()
    (locked / "keep.txt").write_text("mine")
    locked.chmod(0o555)
    if os.geteuid() == 0:  # root writes anywhere: the operating system's refusal is simulated
        real = os.mkdir

        def read_only(path, *args, **kwargs):
            if str(path).startswith(str(locked)):
                raise PermissionError(13, "Permission denied", str(path))
            return real(path, *args, **kwargs)

        monkeypatch.setattr(os, "mkdir", read_only)
    measured = []
    monkeypatch.setattr(checkpoint, "measure", lambda *a, **k: measured.append(1))
    refused([*common, locked], capsys, f"out: cannot write in {str(locked)!r}: Permission denied", prefix=False)
    assert measured == [] and {p.name for p in locked.iterdir()} - {".network-audit.lock"} == {"keep.txt"}
    locked.chmod(0o755)


def test_a_folder_another_audit_writes_is_refused_naming_it(authors, tmp_path, capsys):
    folder = images(tmp_path / "val", 6)
    out = tmp_path / "out"
    with FileLock(out / ".network-audit.lock"):  # another audit of the same --out, holding its lock
        line = refused([authors / "crate.pth", "--heads", "2", "--images", folder, *FAST, "--out", out], capsys,
                       f"out: {str(out)!r} is being written by another audit (process {os.getpid()} on ")
        assert line.endswith("; wait for it, or pass another --out")
    assert sorted(p.name for p in out.iterdir()) == [".network-audit.lock"]  # nothing of the refused audit


def test_the_arguments_and_inputs_are_checked_before_the_report_folder(authors, tmp_path, capsys):
    """``--out`` holding a report used to be the first complaint, whatever else was wrong."""
    folder = images(tmp_path / "val", 6)
    out = tmp_path / "out"
    assert network.main([str(authors / "crate.pth"), "--heads", "2", "--images", str(folder), *FAST, "--out",
                         str(out)]) == 0
    capsys.readouterr()
    with pytest.raises(SystemExit):
        network.main([str(authors / "crate.pth"), "--dataset", "digitz", "--out", str(out)])
    assert capsys.readouterr().err.startswith("python -m verify.network: argument --dataset: expected one of ")
    refused([authors / "crate.pth", "--heads", "2", "--images", tmp_path / "absent", "--out", out], capsys,
            f"images: {str(tmp_path / 'absent')!r} does not exist", prefix=False)
    refused([authors / "crate.pth", "--images", folder, "--out", out], capsys,
            f"model: {str(authors / 'crate.pth')!r} (authors' CRATE classifier): heads cannot be inferred from the "
            "tensors; pass --heads K or a registered --name NAME", prefix=False)
    refused([authors / "crate.pth", "--heads", "2", "--images", folder, "--against", authors / "crate.pth", "--out",
             out], capsys, f"against: {str(authors / 'crate.pth')!r} (authors' CRATE classifier): heads cannot be "
                           "inferred from the tensors; pass --against-heads K or a registered --against-name NAME",
            prefix=False)
    refused([authors / "crate.pth", "--heads", "2", "--images", folder, *FAST, "--out", out], capsys,
            f"out: {str(out)!r} holds a report already; pass --overwrite")


def test_a_report_is_replaced_whole_and_others_files_are_kept(authors, tmp_path):
    folder = images(tmp_path / "val", 6)
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("a user's file")
    common = [str(authors / "crate.pth"), "--heads", "2", "--images", str(folder), *FAST, "--out", str(out)]
    assert network.main(common) == 0
    first = json.loads((out / "report.json").read_text())
    (out / "figures" / "stale.png").write_bytes(b"from an older report")
    assert network.main([*common, "--seed", "1", "--overwrite"]) == 0
    second = json.loads((out / "report.json").read_text())
    assert first["inputs"]["seed"] == 0 and second["inputs"]["seed"] == 1
    assert sorted(p.name for p in (out / "figures").iterdir()) == sorted(Path(f).name for f in second["figures"])
    assert sorted(p.name for p in out.iterdir()) == [".network-audit.lock", "figures", "layers.csv", "mine.txt",
                                                     "report.json", "report.md", "values.npz"]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_mid_audit_stops_it_within_seconds_leaving_no_report(authors, tmp_path, signum):
    folder = images(tmp_path / "val", 64)
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": ROOT, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    process = subprocess.Popen([sys.executable, "-m", "verify.network", str(authors / "crate.pth"), "--heads", "2",
                                "--images", str(folder), "--init-seeds", "30", "--out", str(out)], cwd=ROOT, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not list(out.glob(".network-audit-partial-*")):  # the folder is taken: measuring has begun
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.05)
    process.send_signal(signum)
    sent = time.monotonic()
    _, err = process.communicate(timeout=60)
    assert time.monotonic() - sent < 10
    assert process.returncode == 128 + signum
    assert err == f"python -m verify.network: stopped by {signal.Signals(signum).name}; no report written\n"
    assert not out.exists()  # the audit made it, and leaves nothing of it


# --------------------------------------------------------------------------------------------- arguments
@pytest.mark.parametrize("arguments, message", [
    (["--n", "0"], "argument --n: expected a positive integer, got 0"),
    (["--n", "-5"], "argument --n: expected a positive integer, got -5"),
    (["--control-n", "0"], "argument --control-n: expected a positive integer, got 0"),
    (["--n", "2"], "arguments --n, --control-n: the audit's rule needs at least 3 inputs"),
    (["--control-n", str(10**12)], f"argument --control-n: {10**12} exceeds --n 256"),
    (["--init-seeds", "-1"], "argument --init-seeds: expected 0 or 3 to 100, got -1"),
    (["--init-seeds", "2"], "argument --init-seeds: expected 0 or 3 to 100, got 2"),
    (["--init-seeds", str(10**9)], f"argument --init-seeds: expected 0 or 3 to 100, got {10**9}"),
    (["--seed", "-1"], "argument --seed: expected 0 to 2**63 − 1, got -1"),
    (["--seed", str(2**64)], f"argument --seed: expected 0 to 2**63 − 1, got {2**64}"),
    (["--threads", "0"], "argument --threads: expected a positive integer, got 0"),
    (["--batch-size", "-1"], "argument --batch-size: expected a positive integer, got -1"),
    (["--heads", "0"], "argument --heads: expected a positive integer, got 0"),
    (["--mean", "0.5"], "arguments --mean, --std: give both"),
    (["--mean", "nan", "--std", "1"], "argument --mean: expected a finite number, got 'nan'"),
    (["--mean", "0.5", "--std", "0"], "argument --std: expected positive values, got [0.0]"),
    (["--channels", "2"], "argument --channels: invalid choice: 2 (choose from 1, 3)"),
    (["--n", "x"], "argument --n: invalid int value: 'x'"),
])
def test_arguments_at_zero_negative_or_absurd_are_one_line(arguments, message, capsys):
    with pytest.raises(SystemExit) as stop:
        network.main(["model.pt", "--images", "val", *arguments])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.startswith(f"python -m verify.network: {message}") and err.count("\n") == 1


def test_an_n_larger_than_the_inputs_is_refused_naming_n(authors, tmp_path, capsys):
    folder = images(tmp_path / "val", 6)
    refused([authors / "crate.pth", "--heads", "2", "--images", folder, "--n", str(10**9), "--control-n", "4"],
            capsys, f"n: {str(folder)!r} holds 6 images; pass --n 6 or less", prefix=False)


# --------------------------------------------------------------------------------------------- the model's file
def test_tensors_that_contradict_the_config_are_one_line(authors, tmp_path, capsys):
    folder = images(tmp_path / "val", 6)
    payload = crate_nn.checkpoint.read(authors / "ours.pt")
    payload["model"]["encoder.layers.1.mssa.qkv.weight"] = torch.zeros(16, 32)  # the config says K·p = 32
    payload.pop("checksum", None)
    torch.save({**payload, "checksum": payload_digest(payload)}, tmp_path / "ours.pt")  # a valid checksum
    line = refused([tmp_path / "ours.pt", "--images", folder, *FAST], capsys,
                   f"model: {str(tmp_path / 'ours.pt')!r} does not hold the model its config describes: ")
    assert "encoder.layers.1.mssa.qkv.weight" in line and "(16, 32)" in line
    theirs = torch.load(authors / "crate.pth", weights_only=True)
    theirs["transformer.layers.2.0.fn.qkv.weight"] = torch.zeros(8, 32)
    torch.save(theirs, tmp_path / "theirs.pth")
    line = refused([tmp_path / "theirs.pth", "--heads", "2", "--images", folder, *FAST], capsys,
                   f"model: {str(tmp_path / 'theirs.pth')!r} (authors' CRATE classifier): shape mismatch: "
                   "transformer.layers.2.0.fn.qkv.weight: checkpoint (8, 32) vs model (32, 32)")


def test_a_hub_name_that_climbs_out_of_the_cache_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    folder = images(tmp_path / "val", 6)
    for spec, message in (
            ("hf-hub:org/..", "path: '..' in 'hf-hub:org/..' is not a name the Hub allows (letters, digits, '-', '_' "
                              "and '.', neither first nor last a '-' or '.', no '..')"),
            ("hf-hub:org/crate@../../x", "path: the revision '../../x' of 'hf-hub:org/crate@../../x' leaves the "
                                         "repository (an absolute path or '..'); name a file inside it"),
            ("hf-hub:org/crate:/etc/passwd", "path: the path '/etc/passwd' of 'hf-hub:org/crate:/etc/passwd' leaves "
                                             "the repository (an absolute path or '..'); name a file inside it")):
        refused([spec, "--images", folder, *FAST], capsys, message, prefix=False)


# --------------------------------------------------------------------------------------------- the report
def _decisions(controls, verdicts: dict[str, str]) -> list[Decision]:
    """The checkpoint's rows for ``controls`` ((label, kind, a CRATE?)), each with the verdict ``verdicts`` names by
    its id."""
    rows = checkpoint.rows([Control(kind, label) for label, kind, _ in controls], [crate for *_, crate in controls])
    return [Decision(row, Result("", verdicts[Decision(row, Result("", "holds")).id])) for row in rows]


def test_the_conclusion_answers_whether_it_compresses_and_sparsifies_against_what():
    verdicts = {"rc-falls-official": "holds", "rc-falls-paper": "holds", "sparsity-rises": "fails",
                **{f"rc-below-random-init-{p}": "inconclusive" for p in ("official", "paper")},
                "joint-random-init": "fails", "sparser-than-random-init": "inconclusive",
                "fig26-compression-vs-vit": "holds", "fig26-sparsity-vs-vit": "fails"}
    controls = [("random init", "random", True), ("vit", "network", False)]
    assert report.network_conclusion(_decisions(controls, verdicts), 64, 3) == (
        "On these 64 inputs, with depth this network compresses (R^c from layer 2 to L, authors' protocol and paper's "
        "formula: holds, holds) and does not sparsify (‖Z‖₀/(dn) from layer 1 to L − 1: fails); against 3 random "
        "initialisations of its architecture it is not shown to compress more (R^c below at every layer, both "
        "protocols, and jointly: inconclusive, inconclusive, fails) and is not shown to be sparser (every "
        "layer but the last: inconclusive); against vit it compresses more ((R_1 − R_L)/R_1: holds) and is not "
        "sparser (|Z| ≥ τ for every τ: fails).")
    alone = [("random init", "random", True)]
    verdicts["rc-falls-official"] = "inconclusive"
    assert "with depth this network is not shown to compress (" in report.network_conclusion(
        _decisions(alone, verdicts), 64, 3)
    verdicts.update({"rc-falls-paper": "fails", "rc-falls-official": "holds"})
    assert "with depth this network compresses by some measures, not by others (" in report.network_conclusion(
        _decisions(alone, verdicts), 64, 3)
    own = {**verdicts, **{f"rc-below-run-init-{p}": "holds" for p in ("official", "paper")}, "joint-run-init": "holds",
           "sparser-than-run-init": "holds"}
    assert "; against the run's starting weights it compresses more (" in report.network_conclusion(
        _decisions([("run init", "init", True)], own), 8, 0)
    epoch = {**verdicts, **{f"rc-below-epoch-1-{p}": "fails" for p in ("official", "paper")}, "joint-epoch-1": "fails",
             "sparser-than-epoch-1": "fails"}
    assert "; against epoch 1 it does not compress more (" in report.network_conclusion(
        _decisions([("epoch 1", "network", True)], epoch), 8, 0)


def test_figure_titles_fit_and_labels_are_mathtext(tmp_path, monkeypatch):
    from matplotlib import mathtext

    parser = mathtext.MathTextParser("path")
    for label in report.NETWORK_AXES.values():
        outside = "".join(label.split("$")[::2])  # the text outside $…$
        assert "^" not in outside and "_" not in outside and "\\" not in outside, label
        parser.parse(label)  # ValueError for a label mathtext cannot typeset
    drawn = []
    real = plots._save
    monkeypatch.setattr(plots, "_save", lambda fig, path: drawn.append(fig) or real(fig, path))
    measures = {name: np.random.default_rng(0).random((5, 3)) for name in report.NETWORK_NAMES}
    heads = {name: {"this network": np.random.default_rng(1).random((3, 2)).tolist()} for name in checkpoint.RATES}
    title = "hf-hub:UCSC-VLAA/CRATE-alpha:torch/crate_alpha_B16.pth: per-layer means, 95% bands (over inputs; " \
            "random initialisations: over seeds)"
    report.network_figures(tmp_path, {"this network": measures}, {}, heads, title)
    assert len(drawn) == len(report.NETWORK_NAMES) + 1  # and one of the rates per head
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    for fig in drawn:
        canvas = FigureCanvasAgg(fig)
        canvas.draw()  # laid out as saved (tight_layout ran before savefig)
        renderer = canvas.get_renderer()
        box = fig.bbox
        for text in [fig._suptitle, *(t for ax in fig.axes for t in (ax.yaxis.label, ax.xaxis.label, ax.title))]:
            extent = text.get_window_extent(renderer)
            assert box.x0 - 0.5 <= extent.x0 and extent.x1 <= box.x1 + 0.5, (text.get_text(), extent, box)
            assert box.y0 - 0.5 <= extent.y0 and extent.y1 <= box.y1 + 0.5, (text.get_text(), extent, box)


class _Creates:
    """An object whose unpickling would create the file ``path``."""

    def __init__(self, path) -> None:
        self.path = str(path)

    def __reduce__(self):
        return os.system, (f"touch {self.path}",)


def test_hostile_weights_files_are_one_line_and_nothing_of_theirs_runs(tmp_path, capsys):
    """The loader's refusals (tests/weights/test_hostile_files.py) reach the command as one line, exit status 2."""
    import io
    import zipfile

    folder = images(tmp_path / "val", 6)
    witness = tmp_path / "executed"
    torch.save({"model": {"w": torch.zeros(1)}, "hook": _Creates(witness)}, tmp_path / "pickle.pth")
    objects = np.empty(1, dtype=object)
    objects[0] = _Creates(witness)
    buffer = io.BytesIO()
    np.save(buffer, objects, allow_pickle=True)
    with zipfile.ZipFile(tmp_path / "objects.npz", "w") as zf:
        zf.writestr("params/embedding/kernel.npy", buffer.getvalue())
    with zipfile.ZipFile(tmp_path / "climbs.npz", "w") as zf:
        zf.writestr("../params/embedding/kernel.npy", buffer.getvalue())
    for name, said in (("pickle.pth", "holds Python objects beyond tensors and plain values"),
                       ("objects.npz", "its array 'params/embedding/kernel' holds Python objects"),
                       ("climbs.npz", "is not a plain array name")):
        line = refused([tmp_path / name, "--images", folder, *FAST], capsys, f"model: {str(tmp_path / name)!r}")
        assert said in line and "weights_only" not in line, line
    assert not witness.exists()
