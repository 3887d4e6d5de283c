"""What a model's inputs went through in training, recorded beside its weights so that whoever loads them feeds the
model what it was trained on.

    model = crate_nn.load("runs/digits/checkpoints/last.pt")
    model.preprocessing          # Preprocessing(mean=(…), std=(…), image_size=8, patch_size=4, tokenizer=None)

Every registered model has a ``preprocessing`` attribute: None until something sets it. A training run sets it from
its task (`crate_nn.engine.task.Task.preprocessing`), `crate_nn.save` writes it (a ``"preprocessing"`` entry of our
checkpoints, a ``"preprocessing"`` JSON field of a ``.safetensors`` header) and `crate_nn.load` restores it; a file
written before it existed gets it from the training config it holds (`from_training`), or None. Another codebase's
checkpoint records none, so its model's is None: the command lines then use ImageNet's mean and std
(`normalisation`), what they always did.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from .data.images import IMAGENET_MEAN, IMAGENET_STD


@dataclass(frozen=True)
class Preprocessing:
    """The input pipeline of a trained model; a field the training did not fix is None.

    mean, std: per-channel normalisation (C values each) of images scaled to [0, 1]: ``(x - mean) / std``.
    image_size: side of the square images (H = W) the model was trained on. patch_size: side P of its patches.
    tokenizer: the `crate_nn.data.tokenizers.get_tokenizer` spec of a language model's tokens (``"bytes"``,
    ``"tiktoken:gpt2"``, ``"hf:roberta-base"``).
    """

    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None
    image_size: int | None = None
    patch_size: int | None = None
    tokenizer: str | None = None

    def __post_init__(self) -> None:
        for name in ("mean", "std"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, tuple(float(v) for v in value))
        if (self.mean is None) != (self.std is None) or (self.mean is not None and len(self.mean) != len(self.std)):
            raise ValueError(f"mean, std: expected both or neither, one value per channel in each; got mean "
                             f"{self.mean} and std {self.std}")

    def to_dict(self) -> dict:
        """The fields that are set, as plain values (lists for the tuples): what a checkpoint stores."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls, values: Mapping, source: str) -> Preprocessing:
        """The inverse of `to_dict`; ValueError naming ``source`` (the file) for an entry it does not know."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"{source}: unknown preprocessing entries {unknown}; known: {sorted(known)}")
        return cls(**values)


def from_training(train_config: Mapping, model_config) -> Preprocessing:
    """The preprocessing a training config (`crate_nn.engine.config.TrainConfig.to_dict`) fixes: its ``mean``,
    ``std``, ``image_size`` and ``tokenizer`` where it has them, the patch size of ``model_config``."""
    return Preprocessing(mean=train_config.get("mean"), std=train_config.get("std"),
                         image_size=train_config.get("image_size", getattr(model_config, "image_size", None)),
                         patch_size=getattr(model_config, "patch_size", None), tokenizer=train_config.get("tokenizer"))


def normalisation(model) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(mean, std) of ``model.preprocessing`` when it records them, else ImageNet's (what the command lines used
    before checkpoints recorded them)."""
    recorded = getattr(model, "preprocessing", None)
    if recorded is not None and recorded.mean is not None:
        return recorded.mean, recorded.std
    return IMAGENET_MEAN, IMAGENET_STD
