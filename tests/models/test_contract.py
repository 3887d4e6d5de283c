"""The model contract, for every registered model and every model family, on the CPU in seconds.

Each model is built small through the registry's overrides: its registered options (attention, ISTA variant,
patch embedding, wiring …) are kept, its width, depth and input sizes shrunk (`TINY`). A forward pass on the
shared example inputs (`tests/_models.py`) returns finite outputs of the family's shapes, and a backward pass gives
every parameter that requires a gradient a finite one. ``tests/gpu`` checks the registered sizes themselves on a
GPU; the per-family tests check their parameter counts.

The ``dino`` and ``bert_classifier`` families have no registered names: their tasks compose them from a registered
backbone (a classifier size and the DINO head's options; a CRATE-BERT checkpoint's config and the number of
labels), so they are built here as those tasks build them (`COMPOSED`).
"""
import dataclasses

import pytest
import torch
from _models import example_inputs, float_tensors, library_families

from crate_nn.models import BERTClassifierConfig
from crate_nn.models.dino_head import DINOConfig
from crate_nn.models.registry import _FAMILIES, build_model, list_models, model_config

TINY = dict(dim=16, heads=2, depth=2, image_size=16, patch_size=4, num_classes=5, vocab_size=32, block_size=8)
BATCH = 3


def shrunk(name: str, **overrides):
    """The config of the registered model ``name`` with the `TINY` values of the fields it has."""
    fields = {f.name for f in dataclasses.fields(model_config(name))}
    return model_config(name, **{k: v for k, v in TINY.items() if k in fields}, **overrides)


COMPOSED = {
    # DINOTrainConfig.model_config: a classifier backbone, dynamic image size (local crops), the head's options
    "dino": lambda: DINOConfig(**dataclasses.asdict(shrunk("crate_tiny", dynamic_img_size=True)), out_dim=24,
                               hidden_dim=16, bottleneck_dim=8),
    # SequenceClassificationTask: the CRATE-BERT config's fields, bidirectional, a head of num_labels classes
    "bert_classifier": lambda: BERTClassifierConfig(**{
        **{k: v for k, v in dataclasses.asdict(shrunk("crate_bert_medium")).items()
           if k in {f.name for f in dataclasses.fields(BERTClassifierConfig)}}, "causal": False, "num_labels": 3}),
}


def expected_shapes(family: str, config) -> list[tuple[int, ...]]:
    """The shapes of the floating-point outputs of a forward pass on `BATCH` example inputs."""
    if family == "classifier":
        return [(BATCH, config.num_classes)]
    if family == "mae":  # loss, predicted patches, each image's loss
        patches = (config.image_size // config.patch_size) ** 2
        return [(), (BATCH, patches, config.patch_size ** 2 * config.in_channels), (BATCH,)]
    if family in ("gpt", "bert"):
        return [(BATCH, config.block_size, config.vocab_size)]
    if family == "bert_classifier":
        return [(BATCH, config.num_labels)]
    if family == "dino":  # the student's and the teacher's outputs of the (global) view
        return [(BATCH, config.prototypes)] * 2
    raise AssertionError(f"family {family!r}: add its output shapes to the contract")


CASES = {**{name: (lambda name=name: shrunk(name)) for name in list_models()}, **COMPOSED}


def test_every_family_is_in_the_contract():
    """A family registered later is checked here too: through a registered name, or composed in `COMPOSED`
    (families registered by tests, e.g. the engine's toy regression, are not the library's)."""
    named = {model_config(name).__class__ for name in list_models()}
    covered = {f.name for f in _FAMILIES.values() if f.config_class in named} | set(COMPOSED)
    assert covered == library_families()


@pytest.mark.parametrize("case", sorted(CASES))
def test_forward_backward_and_output_shapes(case):
    torch.manual_seed(0)
    config = CASES[case]()
    model = build_model(config).train()
    outputs = float_tensors(model(*example_inputs(model, BATCH, "cpu")))
    assert [tuple(o.shape) for o in outputs] == expected_shapes(model.family, config)
    assert all(torch.isfinite(o).all() for o in outputs), f"{case}: non-finite output"
    sum(o.float().mean() for o in outputs).backward()
    trainable = {n: p for n, p in model.named_parameters() if p.requires_grad}
    assert trainable
    missing = sorted(n for n, p in trainable.items() if p.grad is None)
    assert not missing, f"{case}: no gradient reached {missing[:5]}"
    infinite = sorted(n for n, p in trainable.items() if not torch.isfinite(p.grad).all())
    assert not infinite, f"{case}: non-finite gradients of {infinite[:5]}"
