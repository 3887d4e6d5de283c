"""`FrozenEvaluator`: the k-NN and the probe of a feature function on constructed data whose answer is known (features
that separate the classes, and the raw pixels of images whose class is a pixel pattern, score 1.0; features blind to
the class score near chance), its metric names, what it runs (nothing when asked for nothing), the same numbers as
`knn_evaluate` and `run_linear_probe` on `extract_features`; `model_features`; `evaluation_data` against the DINO
task's evaluation data; the evaluators' cadences (`crate_nn.evaluation.cadence`, DINO's ``evals``). Sharded =
unsharded: test_features.py (2 gloo processes)."""
import numpy as np
import pytest
import torch
from torch.utils.data import Dataset

from crate_nn import create_model
from crate_nn.engine.distributed import context
from crate_nn.engine.task import RunPlan
from crate_nn.evaluation import (
    FrozenEvaluator,
    extract_features,
    knn_evaluate,
    model_features,
    pooled_features,
    raw_pixels,
    run_linear_probe,
)
from crate_nn.evaluation.cadence import Cadence, due, final
from crate_nn.tasks import get_preset
from crate_nn.tasks.dino import DINOTask
from crate_nn.tasks.images import evaluation_data

CLASSES = 4
PATTERNS = torch.randn(CLASSES, 4, 4, generator=torch.Generator().manual_seed(0))


class Patterns(Dataset):
    """``n`` images (2, 4, 4) labelled ``index mod 4``: channel 0 is the class's random pattern, channel 1 noise of
    the same size as the pattern (independent of the class); both with noise 0.05 drawn from the index + ``offset``."""

    def __init__(self, n: int, offset: int = 0):
        self.n, self.offset = n, offset

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int):
        g = torch.Generator().manual_seed(1000 + index + self.offset)
        label = index % CLASSES
        image = torch.stack([PATTERNS[label], torch.randn(4, 4, generator=g)]) + 0.05 * torch.randn(2, 4, 4,
                                                                                                  generator=g)
        return image, label, index


def pattern(images: torch.Tensor) -> torch.Tensor:
    """Features that separate the classes: the pattern channel."""
    return images[:, 0].flatten(1)


def blind(images: torch.Tensor) -> torch.Tensor:
    """Features blind to the class: the noise channel."""
    return images[:, 1].flatten(1)


MEMORY, HELD_OUT = Patterns(64), Patterns(40, offset=500)


def evaluator(**overrides) -> FrozenEvaluator:
    return FrozenEvaluator(MEMORY, lambda x: x, torch.device("cpu"), **{"knn_ks": (1, 5), "batch_size": 16,
                                                                        **overrides})


def test_features_that_separate_the_classes_and_the_pixels_of_pattern_images_score_one():
    metrics = evaluator(probe=True, pixel_control=True, probe_solver="lbfgs")(blind, HELD_OUT, "val")
    assert metrics["val_raw_pixels_knn_top1"] == metrics["val_raw_pixels_probe_top1"] == 1.0
    assert metrics["val_knn_top1"] < 0.6 and metrics["val_probe_top1"] < 0.6  # chance: 0.25
    separated = evaluator(probe=True)(pattern, HELD_OUT, "test")
    assert separated["test_knn_top1"] == separated["test_knn_top1_k1"] == separated["test_probe_top1"] == 1.0


def test_metric_names_are_the_tasks():
    metrics = evaluator(probe=True, pixel_control=True)(pattern, HELD_OUT, "test")
    names = {"knn_top1", "knn_k", "knn_top1_k1", "knn_top1_k5", "probe_top1", "probe_C"}
    assert set(metrics) == {f"test_{n}" for n in names} | {f"test_raw_pixels_{n}" for n in names}
    assert metrics["test_knn_k"] in (1, 5)
    assert set(evaluator()(pattern, HELD_OUT, "val")) == {"val_knn_top1", "val_knn_k", "val_knn_top1_k1",
                                                          "val_knn_top1_k5"}
    assert set(evaluator()(pattern, HELD_OUT, "val", knn=False, probe=True)) == {"val_probe_top1", "val_probe_C"}


def test_nothing_asked_nothing_extracted():
    calls = []

    def counted(images):
        calls.append(len(images))
        return pattern(images)

    frozen = evaluator(pixel_control=True)
    assert frozen(counted, HELD_OUT, "val", knn=False, probe=False) == {}
    assert frozen.measure(counted, HELD_OUT, knn=False) is None
    assert calls == []
    frozen(counted, HELD_OUT, "val", pixel_control=False)
    assert sum(calls) == len(MEMORY) + len(HELD_OUT)  # each sample once, the pixel control not run


def test_the_same_numbers_as_the_k_nn_and_the_probe_on_the_extracted_features():
    """The evaluator composes `extract_features`, `knn_evaluate` and `run_linear_probe` with its options (seed,
    select_samples, solver) passed through."""
    frozen = evaluator(probe=True, knn_ks=(1, 3, 7), knn_temperature=0.5, knn_select_samples=20, seed=3,
                       probe_solver="lbfgs")
    result = frozen.measure(blind, HELD_OUT)
    train = extract_features(blind, MEMORY, lambda x: x, torch.device("cpu"), batch_size=16)
    test = extract_features(blind, HELD_OUT, lambda x: x, torch.device("cpu"), batch_size=16)
    assert result.knn == knn_evaluate(*train, *test, (1, 3, 7), 0.5, select_samples=20, seed=3)
    probe = run_linear_probe("lbfgs", *train, *test, seed=3)
    assert (result.probe.accuracy, result.probe.C) == (probe.accuracy, probe.C)


@pytest.mark.parametrize("overrides, message", [(dict(probe_solver="svm"), "probe_solver"), (dict(knn_ks=()), "knn_ks"),
                                                (dict(knn_temperature=0.0), "knn_temperature"),
                                                (dict(batch_size=0), "batch_size")])
def test_options_are_checked_when_built(overrides, message):
    with pytest.raises(ValueError, match=message):
        evaluator(**overrides)


def test_model_features_pool_the_unwrapped_model_in_float32():
    torch.manual_seed(0)
    model = create_model("crate_tiny", image_size=8, patch_size=4, dim=16, depth=1, heads=2).eval()
    images = torch.randn(3, 3, 8, 8)
    assert torch.equal(model_features(model)(images), pooled_features(model, model.config.pool)(images))
    wrapped = torch.nn.Module()
    wrapped.module = model  # as DistributedDataParallel holds it
    assert torch.equal(model_features(wrapped, "mean")(images), pooled_features(model, "mean")(images))
    bf16 = model_features(model, precision=torch.bfloat16)(images)
    assert bf16.dtype == torch.float32 and not torch.equal(bf16, model_features(model)(images))
    assert torch.equal(raw_pixels(images), images.flatten(1))


def test_evaluation_data_is_what_the_dino_task_evaluates_on():
    """The audit evaluates a checkpoint on `evaluation_data` without building the training task: the same samples,
    labels and evaluation transform as the task's."""
    config = get_preset("dino_digits", device="cpu")
    data = evaluation_data(config)
    task = DINOTask(config, context("cpu"))
    task.start(RunPlan.resolve(config, task, world_size=1))
    for ours, theirs in ((data.memory, task.feature_set), (data.eval_set, task.eval_set),
                         (data.test_set, task.test_set)):
        assert len(ours) == len(theirs)
        for i in (0, len(ours) // 2, len(ours) - 1):
            assert torch.equal(ours[i][0], theirs[i][0]) and ours[i][1:] == theirs[i][1:]
    images = torch.stack([data.test_set[i][0] for i in range(5)])
    assert torch.equal(data.transform(images), task.eval_transform(images))
    frozen = task.frozen_evaluator()
    assert (frozen.knn, frozen.probe, frozen.pixel_control, frozen.batch_size) == (
        True, bool(config.cadence.probe_epochs), config.data.pixel_control, task.plan.micro_batch)
    assert np.isclose(frozen.knn_temperature, config.frozen.knn_temperature)


def test_cadence_names_the_evaluators_due_after_an_epoch_and_at_the_end():
    evals = {"knn": Cadence((0, 5, 10), final=True), "probe": Cadence([10]), "other": Cadence()}
    assert (due(evals, 0), due(evals, 10), due(evals, 3), due(evals, None)) == ({"knn"}, {"knn", "probe"}, set(), set())
    assert final(evals) == {"knn"} and evals["probe"].epochs == (10,)
    with pytest.raises(ValueError, match="epochs"):
        Cadence((-1,))


def test_dino_evals_are_its_knn_and_probe_fields():
    """``knn_epochs`` and ``probe_epochs`` are the cadences of the evaluators named ``knn`` and ``probe``; the k-NN
    always runs at the end, the probe when it runs at all."""
    config = get_preset("dino_digits")
    assert config.evals["knn"].epochs == config.cadence.knn_epochs and config.evals["knn"].final
    assert config.evals["probe"].epochs == config.cadence.probe_epochs
    assert config.evals["probe"].final == bool(config.cadence.probe_epochs)
    quiet = config.smoke()
    assert quiet.evals["probe"] == Cadence((), final=False)
    assert quiet.evals["knn"].final
