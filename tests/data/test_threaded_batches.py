"""Reading the training batches in threads (``--loader threads``, `crate_nn.data.batching.ThreadedBatches`): the same
batches in the same order as DataLoader processes and as the main process, errors raised where their batch is
taken, the threads gone when a loop stops early, and a training run equal to the one with worker processes."""
from __future__ import annotations

import gc
import threading

import pytest
import torch
from _train_cases import tiny
from test_shards import pack, write_folder

from crate_nn.data import CorruptImageError, EpochBatches, ShardImages, loader, synthetic
from crate_nn.data.batching import ThreadedBatches
from crate_nn.data.images import ImageFiles, image_folder
from crate_nn.engine import train
from crate_nn.engine.config import LOADERS


def read_all(dataset, workers: int, threads: bool, epoch: int = 0, start_step: int = 0) -> list:
    batches = EpochBatches(len(dataset), global_batch=6, micro_batch=3, seed=4, epoch=epoch, start_step=start_step)
    return list(loader(dataset, batches, workers, threads=threads))


def assert_same_batches(a: list, b: list) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert torch.equal(x.images, y.images) and torch.equal(x.labels, y.labels)
        assert torch.equal(x.indices, y.indices) and x.skipped == y.skipped


@pytest.mark.parametrize("threads", [1, 2, 5])
def test_threads_read_the_batches_of_processes_and_of_the_main_process(tmp_path, threads):
    write_folder(tmp_path / "images", "train", 9)
    pack(tmp_path / "images", tmp_path / "shards")
    shards = ShardImages(tmp_path / "shards" / "train")
    images = synthetic(20, 8, 3, seed=1)
    for dataset in (shards, images):
        for epoch, start in ((0, 0), (1, 1)):  # another epoch's order, a resumed epoch
            main = read_all(dataset, 0, threads=False, epoch=epoch, start_step=start)
            assert_same_batches(read_all(dataset, threads, threads=True, epoch=epoch, start_step=start), main)
            assert_same_batches(read_all(dataset, 2, threads=False, epoch=epoch, start_step=start), main)


def test_a_reading_error_is_raised_where_its_batch_is_taken(tmp_path):
    write_folder(tmp_path / "images", "train", 6)
    broken = tmp_path / "images" / "train" / "cat" / "003.JPEG"
    broken.write_bytes(b"not a JPEG")
    files = ImageFiles(*image_folder(tmp_path / "images" / "train"), train=True, image_size=24, load_size=32,
                       eval_resize=32, strict=True)
    with pytest.raises(CorruptImageError, match="003.JPEG"):
        read_all(files, 2, threads=True)


def test_a_loop_that_stops_early_leaves_no_thread_behind():
    dataset = synthetic(60, 8, 3, seed=1)
    before = set(threading.enumerate())
    batches = iter(loader(dataset, EpochBatches(60, global_batch=4, micro_batch=4), 3, threads=True))
    next(batches)
    started = [t for t in set(threading.enumerate()) - before if t.name.startswith("crate-batches")]
    assert started
    del batches  # what the engine does at an epoch's end or a stop: the generator is closed, its reads cancelled
    gc.collect()
    for thread in started:
        thread.join(timeout=10)
    assert not any(thread.is_alive() for thread in started)


def test_threaded_batches_refuse_no_workers():
    with pytest.raises(ValueError, match="workers"):
        ThreadedBatches(synthetic(4, 8, 3, seed=0), EpochBatches(4, global_batch=2, micro_batch=2), 0)


def test_training_with_threads_equals_training_with_processes(tmp_path):
    assert LOADERS == ("processes", "threads")
    runs = {name: train(tiny(tmp_path / name, num_workers=2, loader=name, max_steps=6, augment="rrc_flip",
                             image_size=8, load_size=8)) for name in LOADERS}
    weights = {name: torch.load(run.checkpoint, weights_only=False)["model"] for name, run in runs.items()}
    assert all(torch.equal(weights["threads"][k], v) for k, v in weights["processes"].items())
    assert runs["threads"].metrics["val_loss"] == runs["processes"].metrics["val_loss"]
