"""The controlled experiment's presets (equal sizes, one recipe), its runner end to end on a smoke schedule, its
statistics, and ``crate-segment``."""
import json

import numpy as np
import pytest
from PIL import Image

from crate_nn import checkpoint
from crate_nn.engine import initial_model
from crate_nn.segment import main as crate_segment
from crate_nn.table17 import VARIANTS, run_experiment, splits, stats, summarize, write_report
from crate_nn.tasks import get_preset

SMOKE = dict(max_steps=2, train_split="val")  # two optimizer steps on the 288 validation images


def test_presets_differ_only_in_the_blocks():
    configs = {v: get_preset(f"objects_{v}") for v in VARIANTS}
    base = configs["crate"].to_dict()
    for variant, config in configs.items():
        config.validate()
        fields = config.to_dict()
        assert {k for k in fields if fields[k] != base[k]} <= {"model_args", "output_dir", "preset"}
        blocks = {k: config.network.model_args[k] for k in ("attention", "feedforward")}
        assert blocks == VARIANTS[variant]
        assert {k: v for k, v in config.network.model_args.items() if k not in blocks} == \
               {k: v for k, v in base["model_args"].items() if k not in blocks}
    models = {v: initial_model(c) for v, c in configs.items()}
    assert {type(m.encoder.layers[0].attn).__name__ for m in models.values()} == {"MSSA", "MHSA"}
    assert len({(m.config.dim, m.config.depth, m.config.heads, m.config.patch_size) for m in models.values()}) == 1


def test_stats_and_summary():
    assert stats([0.4])["std"] == 0.0
    spread = stats([0.50, 0.52, 0.54])
    # float64 rounding of a mean and a standard deviation of three numbers
    assert (spread["mean"], spread["std"]) == pytest.approx((0.52, 0.02), abs=1e-12)
    assert spread["values"] == [0.50, 0.52, 0.54]
    scores = {m: {"miou": 0.5, "jaccard": 0.4, "corloc": 0.3, "layer": 1} for m in ("attention", "maskcut")}
    runs = [{"name": "vit", "seed": s, "state": state, "accuracy": acc, "selected": scores}
            for s in range(2) for state, acc in (("trained", 0.8 + s / 10), ("init", 0.1))]
    summary = summarize(runs)
    assert set(summary) == {"vit", "vit init"}
    assert summary["vit"]["accuracy"]["values"] == pytest.approx([0.8, 0.9])
    assert summary["vit init"]["attention_miou"]["mean"] == 0.5


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    root = tmp_path_factory.mktemp("objects")
    results = run_experiment(root, seeds=(0,), variants=("crate", "vit"), overrides=SMOKE, images=16, progress=False)
    return root, results


def test_run_experiment_end_to_end(smoke, tmp_path):
    root, results = smoke
    assert [(r["name"], r["state"]) for r in results["runs"]] == [("crate", "trained"), ("crate", "init"),
                                                                  ("vit", "trained"), ("vit", "init")]
    for run in results["runs"]:
        assert len(run["val"]) == len(run["test"]) == 3 and 0 <= run["accuracy"] <= 1
        for method in ("attention", "maskcut"):
            chosen = run["selected"][method]
            best = max(run["val"], key=lambda layer: layer[method]["miou"])
            assert chosen["layer"] == best["layer"] and chosen["miou"] == run["test"][best["layer"]][method]["miou"]
    assert set(results["summary"]) == {"crate", "crate init", "vit", "vit init"}
    assert results["references"]["patch_ceiling"]["miou"] > results["references"]["pixels_maskcut"]["miou"]
    written = write_report(results, tmp_path, splits(get_preset("objects_crate"), 8)[1].images)
    assert {p.rsplit("/", 1)[-1] for p in written} == {"results.json", "table.md", "summary.png", "layers.png",
                                                      "examples_attention.png", "examples_maskcut.png"}
    table = (tmp_path / "table.md").read_text()
    assert "CRATE (MSSA+ISTA), random init" in table and "patch-resolution ceiling" in table
    assert json.loads((tmp_path / "results.json").read_text())["seeds"] == [0]
    # a second call resumes the finished run instead of training again. The engine drops and rewrites a resumed
    # run's end-of-run ("final") lines, so the training lines are compared: a new run would log its steps again,
    # each with a newly measured throughput, which never repeats the first run's to all printed digits
    log = root / "crate-seed0" / "metrics.jsonl"
    trained = [line for line in log.read_text().splitlines() if "train_loss" in line]
    again = run_experiment(root, seeds=(0,), variants=("crate",), overrides=SMOKE, images=16, progress=False)
    assert set(line for line in log.read_text().splitlines() if "train_loss" in line) <= set(trained)
    assert again["runs"][0]["test"] == results["runs"][0]["test"]


def test_crate_segment_maps_and_errors(smoke, tmp_path, capsys):
    root, _ = smoke
    ckpt = str(root / "crate-seed0" / "checkpoints" / "last.pt")
    image = tmp_path / "photo.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (40, 50, 3), dtype=np.uint8)).save(image)
    out = tmp_path / "maps"
    capsys.readouterr()
    assert crate_segment(["maps", ckpt, str(image), "--layer", "-2", "--output-dir", str(out)]) == 0
    assert {p.name for p in out.iterdir()} == {"photo_attention.png", "photo_maskcut.png", "pca.png", "boxes.json"}
    lines = capsys.readouterr().out.splitlines()  # what it wrote, one file per line
    assert lines[0] == f"crate-segment maps: layer -2 of {ckpt}, 1 image(s); wrote 4 files:"
    assert sorted(line.split()[0] for line in lines[1:]) == sorted(str(p) for p in out.iterdir())
    assert crate_segment(["maps", ckpt, str(image), "--image-size", "30", "--output-dir", str(out)]) == 2
    assert "not divisible by the model's patch size 4" in capsys.readouterr().err
    assert crate_segment(["maps", str(tmp_path / "none.pt"), str(image)]) == 2
    assert crate_segment(["experiment", "--variants", "resnet"]) == 2
    assert "variants" in capsys.readouterr().err
    assert checkpoint.read(ckpt)["train_config"]["dataset"] == "objects"


def test_crate_segment_experiment_help_example_with_a_dino_extra(tmp_path, capsys):
    """The help's ``--extra crate_dino=CKPT``: a DINO checkpoint (its teacher's backbone, as DINOTrainConfig builds
    it for RGB 32² images) joins the table as a row without accuracy (it has no classification head)."""
    import torch

    import crate_nn
    from crate_nn.models.dino_head import DINO, DINOConfig

    torch.manual_seed(0)
    ckpt = tmp_path / "dino.pt"
    crate_nn.save(ckpt, DINO(DINOConfig(image_size=32, patch_size=4, dim=48, depth=3, heads=4, dynamic_img_size=True,
                                        out_dim=8, hidden_dim=16, bottleneck_dim=8)))
    out = tmp_path / "objects"
    assert crate_segment(["experiment", "--variants", "crate", "--seeds", "0", "--max-steps", "2", "--no-progress",
                          "--extra", f"crate_dino={ckpt}", "--output-dir", str(out)]) == 0
    results = json.loads((out / "results.json").read_text())
    dino = [run for run in results["runs"] if run["name"] == "crate_dino"]
    assert len(dino) == 1 and dino[0]["accuracy"] is None and dino[0]["checkpoint"] == str(ckpt)
    assert len(dino[0]["test"]) == 3  # one score per layer of the teacher's backbone
    row = next(line for line in (out / "table.md").read_text().splitlines() if line.startswith("| crate_dino |"))
    assert row.split("|")[3].strip() == "—"  # the top-1 column
