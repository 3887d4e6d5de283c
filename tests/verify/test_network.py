"""`python -m verify.network`: the papers' layer-wise claims on a checkpoint a user brings — a stand-in CRATE-α in the
authors' torch format on an image folder, a run directory with its own initialisation, another CRATE checkpoint as
a control, a language model on a text file; bad input refused in one line. The rows' verdicts flipped on constructed
measurements: tests/verify/test_layerwise.py."""
import json

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image

import crate_nn
from crate_nn.analysis.diagnostics import half_logdet
from crate_nn.data.inputs import folder_images
from crate_nn.engine import initial_model, recorded_config
from crate_nn.tasks import get_preset
from verify import checkpoint, network

SMALL = dict(dim=32, depth=3, heads=2, image_size=32, patch_size=8, num_classes=5)


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    """The collapse floors go to a per-worker temporary cache (computed once per size there)."""
    monkeypatch.setenv("CRATE_WHITEBOX_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


def write_images(folder, count, classes=()):
    """``count`` small RGB files, in class sub-folders when ``classes`` are given (ImageNet's validation layout)."""
    rng = np.random.default_rng(0)
    for i in range(count):
        where = folder / classes[i % len(classes)] if classes else folder
        where.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (36, 44, 3), dtype=np.uint8)).save(where / f"{i:03d}.png")
    return folder


@pytest.fixture
def stand_in(tmp_path):
    """A CRATE-α (a shrunk B/16) in CRATE-α's torch format, and a ViT of the same size in ours."""
    torch.manual_seed(0)
    crate_nn.save(tmp_path / "ours.pt", crate_nn.create_model("crate_alpha_b16", **SMALL))
    from crate_nn.export import main as export

    assert export([str(tmp_path / "ours.pt"), str(tmp_path / "alpha.pth"), "--format", "crate-alpha"]) == 0
    crate_nn.save(tmp_path / "vit.pt", crate_nn.create_model("vit_tiny", **SMALL))
    return tmp_path


def test_a_crate_alpha_file_on_an_image_folder_against_a_vit(stand_in, capsys):
    images = write_images(stand_in / "val", 12, classes=("n01", "n02"))
    out = stand_in / "report"
    assert network.main([str(stand_in / "alpha.pth"), "--images", str(images), "--heads", "2", "--n", "10",
                         "--control-n", "6", "--against", str(stand_in / "vit.pt"), "--out", str(out)]) == 0
    printed = capsys.readouterr().out.strip().splitlines()
    assert len(printed) <= 15 and printed[-1] == f"report: {out / 'report.md'}"
    report = json.loads((out / "report.json").read_text())
    assert report["model"]["format"] == "CRATE-α" and report["model"]["layers"] == 3
    assert report["inputs"]["n"] == 10 and report["inputs"]["control_n"] == 6
    assert len(set(report["inputs"]["names"])) == 10 and all(n.startswith("n0") for n in report["inputs"]["names"])
    ids = {v["id"]: v["verdict"] for v in report["verdicts"]}
    assert set(ids) == {"rc-falls-official", "rc-falls-paper", "rc-below-random-init-official",
                        "rc-below-random-init-paper", "joint-random-init", "sparsity-rises",
                        "sparser-than-random-init", "fig26-compression-vs-vit", "fig26-sparsity-vs-vit"}
    assert set(ids.values()) <= {"holds", "fails", "inconclusive"}
    assert all(v["scope"] == "paper" for v in report["verdicts"])
    assert {f.split("/")[-1] for f in report["figures"]} >= {"official.png", "paper.png", "sparsity.png",
                                                             "specific.png", "spread.png"}
    assert all((out / f).is_file() for f in report["figures"]) and "joint-random-init" in (out / "report.md").read_text()


def test_the_models_rates_are_measure_layers_on_the_same_images(stand_in, tmp_path):
    images = write_images(tmp_path / "flat", 5)
    net = checkpoint.load_network(str(stand_in / "alpha.pth"), "model", heads=2)
    inputs = folder_images(net.model, str(images), 5, 0)
    measured = checkpoint.measure(net, inputs.tensor, joint_n=3, progress=False, batch_size=2)
    for protocol in ("official", "paper"):
        theirs = crate_nn.measure_layers(net.model, inputs.tensor, protocol=protocol)
        # the same float64 rates of the same float32 tokens; batches of 2 against one of 5 reorder float32 sums
        np.testing.assert_allclose(measured[protocol].mean(0), [s.mean for s in theirs.compression], rtol=1e-5)
        # the per-head rates sum to the layer's (float64 sums of the same terms in another order)
        np.testing.assert_allclose(measured[f"{protocol}_heads"].sum(-1), measured[protocol], rtol=1e-12)
    np.testing.assert_allclose(measured["delta_r"], measured["rate"] - measured["paper"], rtol=1e-12)
    assert measured["specific"].shape == (3, 3) and measured["official"].shape == (5, 3)
    assert measured["official_heads"].shape == (5, 3, 2)
    assert measured["sizes"] == {"d": 32, "n": 17, "heads": 2, "p": 16}


def test_a_run_directory_has_its_own_initialisation_as_a_control(tmp_path, capsys):
    config = get_preset("digits").smoke(steps=4, output_dir=str(tmp_path / "run"), curves=False)
    crate_nn.engine.train(config)
    recorded = crate_nn.weights.training_config(tmp_path / "run" / "checkpoints" / "last.pt")
    assert recorded_config(recorded, "classification", "run").to_dict() == config.to_dict()
    own = checkpoint.run_init(str(tmp_path / "run"))
    for key, value in initial_model(config).state_dict().items():
        assert torch.equal(own.model.state_dict()[key], value), key
    assert network.main([str(tmp_path / "run"), "--dataset", "digits", "--n", "16", "--control-n", "8",
                         "--out", str(tmp_path / "out")]) == 0
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert "run init" in report["controls"] and report["sizes"]["memberships"] == "any"
    assert {"joint-run-init", "rc-below-run-init-official", "sparser-than-run-init"} <= {v["id"] for v in
                                                                                         report["verdicts"]}


def test_a_language_model_on_a_text_file(tmp_path):
    torch.manual_seed(0)
    crate_nn.save(tmp_path / "gpt.pt", crate_nn.create_model("crate_gpt_small", dim=32, depth=3, heads=2,
                                                             vocab_size=300, block_size=16))
    (tmp_path / "book.txt").write_text("the white-box transformer compresses and sparsifies. " * 20)
    assert network.main([str(tmp_path / "gpt.pt"), "--text", str(tmp_path / "book.txt"), "--tokenizer", "bytes",
                         "--n", "6", "--out", str(tmp_path / "out")]) == 0
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["sizes"]["n"] == 16 and report["inputs"]["n"] == 6
    assert network.main([str(tmp_path / "gpt.pt"), "--text", str(tmp_path / "book.txt"), "--tokenizer", "bytes",
                         "--window", "17"]) == 2


def test_the_same_seed_gives_the_same_report_and_another_seed_another_sample(stand_in):
    images = write_images(stand_in / "flat", 9)

    def audited(seed, out):
        assert network.main([str(stand_in / "alpha.pth"), "--images", str(images), "--heads", "2", "--n", "6",
                             "--control-n", "4", "--seed", str(seed), "--out", str(stand_in / out)]) == 0
        report = json.loads((stand_in / out / "report.json").read_text())
        return report["inputs"]["names"], report["means"], report["verdicts"]

    first, again, other = audited(0, "a"), audited(0, "b"), audited(1, "c")
    assert first == again
    assert first[0] != other[0]


@pytest.mark.parametrize("arguments, message", [
    (["--images", "absent"], "images: 'absent' does not exist"),
    (["--images", "empty"], "images: 'empty' holds 0 images; the audit's rule needs at least 3"),
    (["--text", "book.txt", "--tokenizer", "bytes"], "text: the model is not a language model"),
])
def test_bad_input_is_one_line(stand_in, monkeypatch, capsys, arguments, message):
    monkeypatch.chdir(stand_in)
    (stand_in / "empty").mkdir()
    (stand_in / "book.txt").write_text("text")
    assert network.main(["alpha.pth", "--heads", "2", *arguments]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"python -m verify.network: {message}") and err.count("\n") == 1


def test_a_timm_vit_is_a_subject_against_its_random_initialisations(stand_in, tmp_path):
    """A ViT in timm's layout (``crate-export --format timm`` of a stand-in; tests/weights/test_vit_adapters.py checks
    the layout against timm's forward) as the subject: R^c with depth under each protocol and, against random ViTs of
    its architecture, every layer's R^c, the joint measure and the sparsity — its value rows the subspaces (Fig. 26)."""
    from crate_nn.export import main as export

    torch.manual_seed(0)
    crate_nn.save(tmp_path / "vit.pt", crate_nn.create_model("vit_tiny", **SMALL, patch_embed="conv", norm_eps=1e-6))
    assert export([str(tmp_path / "vit.pt"), str(tmp_path / "vit_timm.pth"), "--format", "timm"]) == 0
    assert set(torch.load(tmp_path / "vit_timm.pth", weights_only=True)) >= {"blocks.0.attn.qkv.weight", "head.weight"}
    images = write_images(tmp_path / "flat", 6)
    assert network.main([str(tmp_path / "vit_timm.pth"), "--heads", "2", "--images", str(images), "--n", "6",
                         "--control-n", "4", "--init-seeds", "3", "--out", str(tmp_path / "out")]) == 0
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["model"]["format"] == "timm ViT" and report["sizes"]["heads"] == 2
    assert {v["id"] for v in report["verdicts"]} == {
        "rc-falls-official", "rc-falls-paper", "rc-below-random-init-official", "rc-below-random-init-paper",
        "joint-random-init", "sparsity-rises", "sparser-than-random-init"}
    values = np.load(tmp_path / "out" / "values.npz")
    assert values["random init 1000/specific"].shape == (4, 3)  # the random ViTs' joint measure, layer by layer


def test_too_few_seeds_are_refused(stand_in, capsys):
    images = write_images(stand_in / "flat", 4)
    with pytest.raises(SystemExit) as stop:
        network.main([str(stand_in / "alpha.pth"), "--images", str(images), "--init-seeds", "2"])
    assert stop.value.code == 2 and "--init-seeds: expected 0 or 3 to 100, got 2" in capsys.readouterr().err


@given(n=st.integers(1, 12), m=st.integers(1, 12), beta=st.floats(1e-3, 1e3), seed=st.integers(0, 2**16))
def test_half_logdet_is_the_singular_values_formula(n, m, beta, seed):
    w = np.random.default_rng(seed).standard_normal((2, n, m))
    s = np.linalg.svd(w, compute_uv=False)
    expected = 0.5 * np.log1p(beta * s**2).sum(-1)
    # float64 Cholesky of a matrix with eigenvalues in [1, 1 + β‖w‖²] against LAPACK's SVD: round-off only
    np.testing.assert_allclose(half_logdet(torch.from_numpy(w), beta).numpy(), expected, rtol=1e-10, atol=1e-12)


def test_an_against_model_that_takes_other_inputs_is_refused(stand_in, capsys):
    images = write_images(stand_in / "flat", 4)
    crate_nn.save(stand_in / "vit64.pt", crate_nn.create_model("vit_tiny", **{**SMALL, "image_size": 64}))
    assert network.main([str(stand_in / "alpha.pth"), "--heads", "2", "--images", str(images), "--against",
                         str(stand_in / "vit64.pt")]) == 2
    assert capsys.readouterr().err == (f"python -m verify.network: against: {str(stand_in / 'vit64.pt')!r} has "
                                       "image_size 64, the model 32; both must take the same inputs\n")


def test_the_published_crate_alpha_b16_is_audited_on_32_built_in_inputs(tmp_path):
    """A regression check against real weights: CRATE-α's B/16 from the local Hub cache (skipped, naming the
    repository, when it is not there) audited on 32 built-in synthetic images (its logits are checked against their
    forward by tests/official/test_crate_alpha.py)."""
    from _published import CRATE_ALPHA, cached_files

    spec = cached_files(CRATE_ALPHA, "torch", r"crate_alpha_B16\.pth")[0]
    assert network.main([spec, "--name", "crate_alpha_b16", "--dataset", "synthetic", "--n", "32", "--control-n", "32",
                         "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["model"]["parameters"] == 72_328_936 and report["inputs"]["n"] == 32
    assert {v["verdict"] for v in report["verdicts"]} <= {"holds", "fails", "inconclusive"}


def test_a_short_text_names_n(tmp_path, capsys):
    """The windows themselves: tests/data/test_inputs.py."""
    torch.manual_seed(0)
    crate_nn.save(tmp_path / "gpt.pt", crate_nn.create_model("crate_gpt_small", dim=32, depth=3, heads=2,
                                                             vocab_size=300, block_size=16))
    (tmp_path / "book.txt").write_text("".join(chr(97 + i % 26) for i in range(200)))  # 12 windows of 16 bytes
    assert network.main([str(tmp_path / "gpt.pt"), "--text", str(tmp_path / "book.txt"), "--tokenizer", "bytes",
                         "--n", "13", "--out", str(tmp_path / "out")]) == 2
    assert "(200 tokens) holds 12 non-overlapping windows of 16 tokens (a shorter --window gives more); pass --n 12 " \
           "or less" in capsys.readouterr().err


@pytest.mark.parametrize("arguments, message", [
    (["--window", "0"], "argument --window: expected a positive integer, got 0"),
    (["--control-n", "9", "--n", "5"], "argument --control-n: 9 exceeds --n 5"),
])
def test_arguments_out_of_range_are_refused(stand_in, capsys, arguments, message):
    with pytest.raises(SystemExit) as stop:
        network.main([str(stand_in / "alpha.pth"), "--images", "x", *arguments])
    assert stop.value.code == 2 and message in capsys.readouterr().err


def test_controls_reports_and_refusals_of_a_whole_run(stand_in, capsys):
    images = write_images(stand_in / "flat", 6)
    out = str(stand_in / "out")
    common = [str(stand_in / "alpha.pth"), "--heads", "2", "--images", str(images), "--n", "6", "--control-n", "4",
              "--init-seeds", "3"]
    # no control at all is refused before any work
    assert network.main([*common, "--init-seeds", "0", "--out", out]) == 2
    assert "init-seeds: 0, and no other control" in capsys.readouterr().err
    # two --against files with one stem keep both, each with its verdicts
    (stand_in / "other").mkdir()
    crate_nn.save(stand_in / "other" / "vit.pt", crate_nn.create_model("vit_tiny", **SMALL))
    assert network.main([*common, "--against", str(stand_in / "vit.pt"), "--against",
                         str(stand_in / "other" / "vit.pt"), "--out", out]) == 0
    report = json.loads((stand_in / "out" / "report.json").read_text())
    ids = [v["id"] for v in report["verdicts"]]
    assert {"fig26-sparsity-vs-vit", "fig26-sparsity-vs-vit-2"} <= set(ids)
    assert report["controls"][0] == "random init ×3 (seeds 1000, 1001, 1002)" and report["init_seeds"] == [1000, 1001, 1002]
    seeded = next(v for v in report["verdicts"] if v["id"] == "rc-below-random-init-official")
    assert not seeded["numbers"]["per_layer"][0]["paired"]  # one network against a population of seeds
    assert "|Z^{ℓ+1}| ≥ τ" not in (stand_in / "out" / "report.md").read_text()  # escaped: "\|Z^{ℓ+1}\| ≥ τ"
    # a report already there is kept unless --overwrite
    assert network.main([*common, "--out", out]) == 2
    assert "holds a report already; pass --overwrite" in capsys.readouterr().err
    assert network.main([*common, "--out", out, "--overwrite"]) == 0


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_non_finite_weights_are_refused_naming_the_tensor(stand_in, capsys, value):
    model = crate_nn.load(stand_in / "ours.pt")
    with torch.no_grad():
        model.encoder.layers[1].attn.qkv.weight[0, 0] = value
    crate_nn.save(stand_in / "bad.pt", model)
    images = write_images(stand_in / "flat", 4)
    assert network.main([str(stand_in / "bad.pt"), "--images", str(images), "--out", str(stand_in / "o")]) == 2
    assert capsys.readouterr().err == (f"python -m verify.network: model: {str(stand_in / 'bad.pt')!r} holds "
                                       "non-finite weights (NaN or Inf in encoder.layers.1.mssa.qkv.weight); no "
                                       "measure of it would be finite\n")
    assert not (stand_in / "o").exists()


def test_finite_weights_that_overflow_are_one_line(stand_in, capsys):
    model = crate_nn.load(stand_in / "ours.pt")
    with torch.no_grad():
        model.encoder.layers[1].attn.out.weight.fill_(3e38)  # finite, but its outputs overflow float32
    crate_nn.save(stand_in / "huge.pt", model)
    images = write_images(stand_in / "flat", 4)
    assert network.main([str(stand_in / "huge.pt"), "--images", str(images), "--out", str(stand_in / "o")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("python -m verify.network: model: this network") and "non-finite tokens" in err, err
    assert err.count("\n") == 1 and not (stand_in / "o").exists()


def test_another_crate_checkpoint_is_a_control_named_by_its_name(stand_in, capsys):
    """Fig. 15's epoch 1 against epoch N of one's own run: a CRATE given as --against gets the rows of an
    initialisation control (paired over the inputs both saw), named by --against-name — else by its run's folder,
    never by the file name ``last``; every verdict reaches the console; the per-input values and the per-head means
    are written beside the report."""
    images = write_images(stand_in / "flat", 8)
    torch.manual_seed(1)
    earlier = stand_in / "runs" / "epoch1" / "checkpoints"
    earlier.mkdir(parents=True)
    crate_nn.save(earlier / "last.pt", crate_nn.create_model("crate_alpha_b16", **SMALL))
    common = [str(stand_in / "alpha.pth"), "--heads", "2", "--images", str(images), "--n", "8", "--control-n", "4",
              "--init-seeds", "3", "--against", str(earlier / "last.pt")]
    assert network.main([*common, "--out", str(stand_in / "a")]) == 0
    assert "rc-below-epoch1-official" in capsys.readouterr().out
    assert network.main([*common, "--against", str(stand_in / "vit.pt"), "--against-name", "first", "--out",
                         str(stand_in / "b")]) == 0
    printed = capsys.readouterr().out.strip().splitlines()
    report = json.loads((stand_in / "b" / "report.json").read_text())
    ids = [v["id"] for v in report["verdicts"]]
    assert {"rc-below-first-official", "rc-below-first-paper", "joint-first", "sparser-than-first",
            "fig26-compression-vs-vit", "fig26-sparsity-vs-vit"} <= set(ids)
    assert not any(i.startswith("fig26") and "first" in i for i in ids) and not any("last" in i for i in ids)
    assert len(printed) == 3 + len(ids) + 1 and all(any(line.split()[1].startswith(i) for line in printed)
                                                    for i in ids)
    assert "against first it " in report["conclusion"] and "against vit it " in report["conclusion"]
    paired = next(v for v in report["verdicts"] if v["id"] == "rc-below-first-official")
    assert paired["numbers"]["per_layer"][0]["paired"] and paired["numbers"]["unit"].startswith("4 inputs, paired")
    values = np.load(stand_in / "b" / "values.npz")
    assert values["this network/official"].shape == (8, 3) and values["this network/official_heads"].shape == (8, 3, 2)
    assert values["first/official"].shape == (4, 3) and values["random init 1002/sparsity"].shape == (4, 3)
    # layers.csv: one row per network, measure, layer and head (empty for the whole layer's), the mean over its inputs
    rows = (stand_in / "b" / "layers.csv").read_text().splitlines()
    assert rows[0] == "network,measure,layer,head,mean,inputs"
    heads = [r.split(",") for r in rows if r.startswith("this network,official,2,")]
    assert [h[3] for h in heads] == ["", "1", "2"]
    assert float(heads[0][4]) == pytest.approx(values["this network/official"][:, 1].mean(), rel=1e-9)
    assert float(heads[1][4]) == pytest.approx(values["this network/official_heads"][:, 1, 0].mean(), rel=1e-9)
    assert "heads.png" in {f.split("/")[-1] for f in report["figures"]} and len(report["heads"]["official"]["first"]) == 3


def test_a_crate_control_of_another_depth_is_refused(stand_in, capsys):
    images = write_images(stand_in / "flat", 4)
    crate_nn.save(stand_in / "deep.pt", crate_nn.create_model("crate_alpha_b16", **{**SMALL, "depth": 4}))
    assert network.main([str(stand_in / "alpha.pth"), "--heads", "2", "--images", str(images), "--against",
                         str(stand_in / "deep.pt"), "--out", str(stand_in / "o")]) == 2
    assert capsys.readouterr().err == (f"python -m verify.network: against: {str(stand_in / 'deep.pt')!r} is a CRATE of "
                                       "4 layers, the model has 3; a CRATE control is compared layer by layer (a ViT "
                                       "by Fig. 26's rows)\n")
    with pytest.raises(SystemExit) as stop:
        network.main([str(stand_in / "alpha.pth"), "--images", str(images), "--against", str(stand_in / "vit.pt"),
                      "--against-name", "a", "--against-name", "b"])
    assert stop.value.code == 2 and "argument --against-name: 2 names for 1 --against networks" in \
        capsys.readouterr().err
