"""The one sharded evaluation map (`crate_nn.evaluation.sharded`): its sharding rule, its sums and rows, and its
refusal to return a number for nothing evaluated. Several processes return what one returns:
``test_features.py::test_two_processes_return_what_one_process_returns`` runs every evaluator through it under
torchrun."""
from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

from crate_nn.data.batching import Corrupt
from crate_nn.engine.distributed import Context
from crate_nn.evaluation.sharded import ShardBatches, map_reduce, shard

CPU = Context(0, 1, 0, torch.device("cpu"))


def rank(r: int, world: int) -> Context:
    return Context(r, world, r, torch.device("cpu"))


@given(n=st.integers(1, 50), world=st.integers(1, 5), batch=st.integers(1, 7), start=st.integers(0, 5))
def test_the_shards_cover_every_item_once_in_order_and_differ_by_one_at_most(n, world, batch, start):
    items = list(range(start, start + 3 * n, 3))  # a chosen subset of a dataset's indices
    shards = [[i for b in ShardBatches(items, batch, rank(r, world)) for i in b] for r in range(world)]
    assert sorted(i for s in shards for i in s) == items
    assert all(s == items[r::world] == list(shard(items, rank(r, world))) for r, s in enumerate(shards))
    assert max(map(len, shards)) - min(map(len, shards)) <= 1
    for r in range(world):
        batches = list(ShardBatches(items, batch, rank(r, world)))
        assert len(batches) == len(ShardBatches(items, batch, rank(r, world)))
        assert all(len(b) == batch for b in batches[:-1]) and all(0 < len(b) <= batch for b in batches)


class Rows(torch.utils.data.Dataset):
    """Item i: (a (1, 1, 2) image [i, i²], label i mod 2, index i); those in ``corrupt`` unreadable."""

    def __init__(self, n: int, corrupt=()):
        self.n, self.corrupt = n, set(corrupt)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        if i in self.corrupt:
            return Corrupt(f"{i}.png", "unreadable")
        return torch.tensor([[[float(i), float(i * i)]]]), i % 2, i


def body(model, batch) -> dict:
    if not len(batch.indices):
        return {"skipped": len(batch.skipped)}
    images = batch.images.flatten(1)
    return {"first": images[:, 0].sum(), "count": len(images), "skipped": len(batch.skipped),
            "row": model(images) if model is not None else images, "index": batch.indices}


def test_sums_and_rows_in_item_order_with_unreadable_samples_dropped():
    data = Rows(11, corrupt=[2, 4, 5])
    kept = [i for i in range(11) if i not in data.corrupt]
    model = nn.Linear(2, 2).train()
    result = map_reduce(model, data, body, CPU, batch_size=3, sums=("first", "count", "skipped"), count="count")
    assert result.sums == {"first": float(sum(kept)), "count": float(len(kept)), "skipped": 3.0}
    images = torch.tensor([[float(i), float(i * i)] for i in kept])
    with torch.no_grad():
        assert torch.equal(result.rows["row"], model(images))
    assert model.training  # its mode given back
    chosen = map_reduce(None, data, body, CPU, batch_size=2, items=[9, 0, 7], sums=("first", "count", "skipped"),
                        count="count")
    assert chosen.sums["count"] == 3 and chosen.rows["row"][:, 0].tolist() == [0.0, 7.0, 9.0]  # item order


def test_rows_without_an_index_are_in_the_order_of_their_items():
    rows = map_reduce(None, list(range(10)), lambda _, batch: {"value": batch * 10}, CPU, batch_size=4,
                      items=[8, 3, 5], collate_fn=torch.tensor).rows
    assert rows["value"].tolist() == [30, 50, 80]


def test_nothing_evaluated_is_an_error_naming_the_data_never_a_zero():
    with pytest.raises(ValueError, match=r"^eval_split 'val': none of its 4 samples could be evaluated \(4 unreadable, "
                                         r"named above\); a metric over none is undefined$"):
        map_reduce(None, Rows(4, corrupt=range(4)), body, CPU, batch_size=2, sums=("first", "count", "skipped"),
                   count="count", what="eval_split 'val'")
    with pytest.raises(ValueError, match="^dataset: none of its 3 samples could be evaluated; a metric over none is "
                                         "undefined$"):
        map_reduce(None, Rows(3, corrupt=range(3)), lambda _, b: {}, CPU, batch_size=2)  # rows, none left
    with pytest.raises(ValueError, match="^tokens: no samples to evaluate$"):
        map_reduce(None, Rows(0), body, CPU, batch_size=2, sums=("count",), count="count", what="tokens")
    with pytest.raises(ValueError, match="^dataset: the evaluation returned first as one number, but first is not "
                                         "among the sums"):
        map_reduce(None, Rows(3), body, CPU, batch_size=2, sums=("count",))
    with pytest.raises(ValueError, match="^batch_size: expected a positive integer, got 0$"):
        map_reduce(None, Rows(3), body, CPU, batch_size=0)
