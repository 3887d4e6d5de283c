"""``crate-segment`` on every image family's checkpoint (a classifier, a CRATE-MAE's encoder, a DINO run's teacher)
through `image_backbone`, and a one-line refusal of anything else (a language model, a CRATE-MAE without a class
token)."""
import numpy as np
import pytest
import torch
from PIL import Image

import crate_nn
from crate_nn.analysis.segmentation import cls_attention, image_backbone, patch_codes
from crate_nn.models.dino_head import DINO, DINOConfig
from crate_nn.models.mae import CRATEMAE, CRATEMAEConfig
from crate_nn.segment import main as crate_segment

IMAGE = dict(image_size=16, patch_size=4, dim=16, depth=2, heads=2)  # a 4×4 patch grid


def build(family):
    torch.manual_seed(0)
    if family == "classifier":
        return crate_nn.create_model("crate_tiny", **IMAGE, num_classes=3)
    if family == "mae":
        return CRATEMAE(CRATEMAEConfig(**IMAGE))
    if family == "mae_paper":
        return CRATEMAE(CRATEMAEConfig(**IMAGE, wiring="paper"))
    if family == "dino":  # as DINOTrainConfig.model_config builds it: the backbone takes any multiple of the patch
        return DINO(DINOConfig(**IMAGE, dynamic_img_size=True, out_dim=8, hidden_dim=16, bottleneck_dim=8))
    if family == "gpt":
        return crate_nn.create_model("crate_gpt_small", dim=16, heads=2, depth=1, vocab_size=258, block_size=16)
    raise AssertionError(family)


@pytest.fixture
def photo(tmp_path):
    path = tmp_path / "photo.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (40, 50, 3), dtype=np.uint8)).save(path)
    return str(path)


@pytest.mark.parametrize("family", ["classifier", "mae", "dino"])
@pytest.mark.parametrize("size", [None, 24])
def test_crate_segment_maps_any_image_family(family, size, tmp_path, photo):
    """The command's maps on a saved checkpoint of each family, at the model's size and at another (position
    embedding resampled)."""
    ckpt = tmp_path / f"{family}.pt"
    crate_nn.save(ckpt, build(family))
    out = tmp_path / "maps"
    extra = [] if size is None else ["--image-size", str(size)]
    assert crate_segment(["maps", str(ckpt), photo, "--output-dir", str(out), *extra]) == 0
    assert {p.name for p in out.iterdir()} == {"photo_attention.png", "photo_maskcut.png", "pca.png", "boxes.json"}


def test_the_backbone_of_each_family_is_its_image_encoder():
    images = torch.randn(2, 3, 16, 16)
    classifier = build("classifier")
    assert image_backbone(classifier) is classifier
    dino = build("dino")
    assert image_backbone(dino) is dino.teacher.backbone
    # the CRATE-MAE encoder rebuilt as a classifier reads the same tokens at every layer (float32 round-off only:
    # the same weights, the same operations in the same order)
    mae = build("mae").eval()
    encoder = image_backbone(mae)
    assert isinstance(encoder.head, torch.nn.Identity)
    for layer in range(IMAGE["depth"]):
        torch.testing.assert_close(patch_codes(encoder, images, layer), patch_codes(mae, images, layer),
                                   rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(cls_attention(encoder, images, layer), cls_attention(mae, images, layer),
                                   rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("family, expected", [
    ("gpt", "holds a 'gpt' model, not an image model with patches; expected a checkpoint of one of the families "
            "classifier, mae, dino"),
    ("mae_paper", "holds a CRATE-MAE in the paper wiring (eq. 69), which has no class token"),
])
def test_crate_segment_refuses_other_checkpoints_in_one_line(family, expected, tmp_path, photo, capsys):
    ckpt = tmp_path / f"{family}.pt"
    crate_nn.save(ckpt, build(family))
    for command in (["maps", str(ckpt), photo, "--output-dir", str(tmp_path / "maps")],
                    ["experiment", "--extra", f"x={ckpt}", "--output-dir", str(tmp_path / "runs")]):
        assert crate_segment(command) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and expected in err, err
        assert err.startswith(("crate-segment: checkpoint: ", "crate-segment: extra: checkpoint ")), err
    assert not (tmp_path / "maps").exists() and not (tmp_path / "runs").exists()


def test_crate_segment_experiment_refuses_an_extra_of_other_images(tmp_path, capsys):
    """A DINO run on the 1-channel digits cannot be measured on the RGB objects: refused before any training."""
    torch.manual_seed(0)
    ckpt = tmp_path / "dino_digits.pt"
    crate_nn.save(ckpt, DINO(DINOConfig(**IMAGE, in_channels=1, out_dim=8, hidden_dim=16, bottleneck_dim=8)))
    assert crate_segment(["experiment", "--extra", f"crate_dino={ckpt}", "--output-dir", str(tmp_path / "runs")]) == 2
    assert capsys.readouterr().err == (f"crate-segment: extra: checkpoint {ckpt} takes 1-channel images; the objects "
                                       "images have 3\n")
    assert not (tmp_path / "runs").exists()
