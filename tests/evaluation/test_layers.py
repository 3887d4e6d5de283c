"""The layer-measurement evaluator (crate_nn.evaluation.layers): the record `record_layers` writes for the same
images, a model and a data set in, no task; refusals in one line; the tasks' cadence names it."""
import json

import pytest
import torch

import crate_nn
from crate_nn.analysis.snapshots import record_layers
from crate_nn.data import build_dataset
from crate_nn.data.batching import collate
from crate_nn.data.transforms import DeviceTransform
from crate_nn.evaluation import LayerMeasurements
from crate_nn.tasks import get_preset


def _setup():
    dataset = build_dataset("digits", "val", data_dir=None, train=False, image_size=8, load_size=8, eval_resize=8)
    transform = DeviceTransform(8, (0.5,), (0.5,), train=False)
    model = crate_nn.create_model("crate_tiny", image_size=8, patch_size=2, in_channels=1, num_classes=10, dim=32,
                                  depth=2, heads=2).eval()
    return dataset, transform, model


def test_it_records_what_record_layers_records_for_the_first_images(tmp_path):
    dataset, transform, model = _setup()
    record = LayerMeasurements(dataset, transform, "cpu", samples=12)(model, 3, tmp_path / "a")
    images = transform(collate([dataset[i] for i in range(12)]).images)
    direct = record_layers(model, images, tmp_path / "b", 3)
    assert record == direct  # same images, same model, same code path: equal, not close
    assert json.loads((tmp_path / "a" / "epoch_0003.json").read_text())["epoch"] == 3


def test_bad_input_is_refused_naming_the_argument():
    dataset, transform, _ = _setup()
    with pytest.raises(ValueError, match="samples: expected a positive integer"):
        LayerMeasurements(dataset, transform, "cpu", samples=0)
    with pytest.raises(ValueError, match="dataset: no images"):
        LayerMeasurements(torch.utils.data.Subset(dataset, []), transform, "cpu")


def test_the_image_tasks_name_it_with_its_cadence():
    assert get_preset("digits").evals["layers"].epochs == (0, 30)
    dino = get_preset("dino_digits").evals
    assert dino["layers"].epochs == (0, 15) and {"knn", "probe"} <= set(dino)
    mae = get_preset("mae_digits").evals
    assert mae["reconstructions"].epochs == (0, 10, 60) and mae["probe"].final == get_preset("mae_digits").frozen.probe
