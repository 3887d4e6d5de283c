"""Frozen features: one process returns every readable sample's features in dataset order; two gloo processes, each
extracting its shard, return exactly the same in both processes — and so do the frozen evaluator's k-NN, probe and
raw-pixel control, and the DINO and MAE tasks' through it, which run once, in the main process. The other evaluators
of the sharded map (classification, MAE's reconstructions, the language models) give both processes one process's
sums."""
from pathlib import Path

import numpy as np
import pytest
import torch
from _sharded_features import Samples, cases, row_features
from _train_cases import torchrun

from crate_nn.engine.distributed import context
from crate_nn.evaluation.features import extract_features

WORKER = Path(__file__).with_name("_sharded_features.py")


@pytest.fixture(scope="module")
def one_process():
    return cases(context("cpu"))


def test_one_process_returns_readable_samples_in_dataset_order(one_process):
    """The features are the feature function of the transformed images of the readable samples, in index order."""
    dataset = Samples(23, corrupt=[5, *range(8, 16)])
    kept = [i for i in range(23) if i not in dataset.corrupt]
    images = torch.stack([dataset[i][0] for i in kept])
    features, labels = one_process["uneven"]
    assert features.dtype == np.float64 and labels.dtype == np.int64
    np.testing.assert_array_equal(features, row_features(images - 1.0).double().numpy())
    np.testing.assert_array_equal(labels, np.array(kept) % 3)
    assert one_process["unreadable"].startswith("dataset: none of its 3 samples could be evaluated")


def test_device_argument_is_the_one_process_context(one_process):
    features, labels = extract_features(row_features, Samples(23, corrupt=[5, *range(8, 16)]), lambda x: x - 1.0,
                                        torch.device("cpu"), batch_size=4)
    np.testing.assert_array_equal(features, one_process["uneven"][0])
    np.testing.assert_array_equal(labels, one_process["uneven"][1])


def test_two_processes_return_what_one_process_returns(tmp_path, one_process):
    """Shards of 12 and 11 samples (23 = 2 × 3 batches of 4 − 1, whole batches unreadable), a shard with no sample
    (1 sample, 2 processes), the error of a dataset with no readable sample, the frozen evaluator (k-NN, L-BFGS probe,
    raw-pixel control), the DINO k-NN and probe (sklearn and L-BFGS) and the MAE probe (Adam): equal bit for bit
    (each sample's features are computed alone, by the same operations, in either run; the k-NN and the probes are
    deterministic functions of them). Each process computes only its shard; the other process gets all the features
    too, but no task metrics."""
    done = torchrun(str(WORKER), str(tmp_path), path=(WORKER.parent,))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-6000:]
    main, other = (torch.load(tmp_path / f"rank{rank}.pt", weights_only=False) for rank in (0, 1))
    for name in ("uneven", "one_sample"):
        for result in (main, other):
            np.testing.assert_array_equal(result[name][0], one_process[name][0])
            np.testing.assert_array_equal(result[name][1], one_process[name][1])
    # process 0 computed 0, 2, …, 22 but 8, 10, 12, 14; process 1 computed 1, 3, …, 21 but 5, 9, 11, 13, 15
    assert (main["uneven_rows"], other["uneven_rows"], one_process["uneven_rows"]) == (8, 6, 14)
    assert (main["one_sample_rows"], other["one_sample_rows"]) == (1, 0)
    assert main["unreadable"] == other["unreadable"] == one_process["unreadable"]
    for name in ("evaluator", "dino_sklearn", "dino_lbfgs", "mae"):
        assert main[name] == one_process[name] and other[name] == {}
    assert {"test_knn_top1", "test_probe_top1", "test_probe_C"} <= set(main["dino_lbfgs"])
    assert {"test_knn_top1", "test_probe_C", "test_raw_pixels_knn_top1_k3", "test_raw_pixels_probe_top1"} <= set(
        main["evaluator"])
    assert set(main["mae"]) == {"probe_top1", "probe_top1_random_init", "probe_top1_raw_pixels"}
    # the sums of the sharded map: every process holds them; they equal one process's up to the order of the float64
    # additions (each process sums its own batches, the all-reduce adds the processes' sums)
    for result in (main, other):
        assert result["sums"].keys() == {"mae", "classification", "lm", "mlm"}
        for name, metrics in result["sums"].items():
            assert metrics == pytest.approx(one_process["sums"][name], rel=1e-12, abs=1e-15)
    assert main["sums"]["classification"]["images"] == 22 and main["sums"]["lm"]["tokens"] == 15 * 8


def test_raw_pixels_is_the_flattened_transformed_batch_and_separates_classes_the_pixels_separate():
    """The raw-pixel control on a constructed set where the answer is known: each class is one random image plus
    noise 0.01 of its size, so the (cosine) 1-NN on the pixels is exact."""
    from crate_nn.evaluation import knn_evaluate, raw_pixels

    images = torch.randn(2, 3, 4, 5)
    assert torch.equal(raw_pixels(images), images.reshape(2, 60))
    generator = torch.Generator().manual_seed(0)
    labels = torch.arange(40) % 10
    prototypes = torch.randn(10, 1, 4, 4, generator=generator)
    pixels = prototypes[labels] + 0.01 * torch.randn(40, 1, 4, 4, generator=generator)
    x = raw_pixels(pixels).double().numpy()
    result = knn_evaluate(x[:30], labels[:30].numpy(), x[30:], labels[30:].numpy(), ks=(1,), temperature=0.07)
    assert result.top1 == 1.0
