"""A model built to hold a file's tensors: on the meta device, compared with the tensors (`check_matches`: every
key and shape that does not fit named), then given them.

No random initialisation is computed only to be overwritten: the model is built on the meta device, its state dict
(keys and shapes) compared with the file's, and the file's tensors assigned. Building is bounded by the file: a
config that declares more than its tensors describe (a depth of 10⁶ beside a dozen tensors) is refused as soon as
the model under construction registers more than `PER_TENSOR` modules, parameters and buffers per tensor of the
file (every registered size registers fewer than 2), before the rest is built — so a small file cannot ask for
minutes of work and gigabytes of modules.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Mapping

import torch
from torch import nn
from torch.nn.modules import module as modules

PER_TENSOR = 4
"""Modules, parameters and buffers a model may register per tensor of the file it is built for (measured: at most
1.91 over every registered size), plus `SLACK`."""
SLACK = 64


def check_matches(state: Mapping[str, torch.Tensor], expected: Mapping[str, torch.Tensor], source: str,
                  optional: Iterable[str] = ()) -> None:
    """ValueError naming every key ``state`` lacks (but the ``optional`` ones) or has beyond ``expected`` (the model's
    state dict, under the other codebase's names for an adapter), else naming every tensor of another shape."""
    missing = sorted(set(expected) - set(state) - set(optional))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        raise ValueError(f"{source} checkpoint does not match the model: missing keys {missing}, unexpected keys "
                         f"{unexpected}")
    wrong = [f"{k}: checkpoint {tuple(state[k].shape)} vs model {tuple(v.shape)}" for k, v in expected.items()
             if k in state and state[k].shape != v.shape]
    if wrong:
        raise ValueError("shape mismatch: " + "; ".join(wrong))


@contextlib.contextmanager
def bounded_by(tensors: int) -> Iterator[None]:
    """Within the block, building modules stops with ValueError once they have registered more than
    ``PER_TENSOR · tensors + SLACK`` modules, parameters and buffers."""
    limit, count = PER_TENSOR * tensors + SLACK, [0]

    def counted(*_) -> None:
        count[0] += 1
        if count[0] > limit:
            raise ValueError(f"its config declares a model larger than its {tensors} tensors (building stopped "
                             f"after {limit} modules, parameters and buffers)")

    hooks = [modules.register_module_module_registration_hook(counted),
             modules.register_module_parameter_registration_hook(counted),
             modules.register_module_buffer_registration_hook(counted)]
    try:
        yield
    finally:
        for hook in hooks:
            hook.remove()


def on_meta(model_class, config, tensors: int) -> nn.Module:
    """``model_class(config)`` on the meta device, bounded by a file of ``tensors`` tensors (`bounded_by`)."""
    with torch.device("meta"), bounded_by(tensors):
        return model_class(config)


def expected_state(model_class, config, tensors: int) -> dict[str, torch.Tensor]:
    """The state dict (meta tensors: keys and shapes) of ``model_class(config)``, built on the meta device and bounded
    by a file of ``tensors`` tensors."""
    return on_meta(model_class, config, tensors).state_dict()


def build_owning(model_class, config, state: Mapping[str, torch.Tensor]) -> nn.Module:
    """`build_loaded` with copies of ``state``'s tensors: for a state dict the caller keeps (an in-memory dict given
    to a loader), which the model must not share."""
    return build_loaded(model_class, config, {k: v.clone() for k, v in state.items()})


def build_loaded(model_class, config, state: Mapping[str, torch.Tensor]) -> nn.Module:
    """``model_class(config)`` holding ``state`` (strictly: every key and shape, else ValueError naming them,
    `check_matches`), in the dtype of its first floating tensor. The model is built on the meta device (`on_meta`)
    and given the tensors themselves (``assign=True``, after the model's own load hooks; `build_owning` copies
    them); parameters shared under several
    names (GPT's tied ``wte``/``lm_head``) are tied again, and a model with a tensor the state does not hold (a non-persistent buffer) is built the ordinary
    way instead (`build_then_copy`), so nothing is left on meta."""
    model = on_meta(model_class, config, len(state))
    tied = shared_parameters(model)
    try:  # the model's own load hooks first (a DINO file's former centre is set aside)
        model.load_state_dict(state, strict=True, assign=True)
    except RuntimeError as err:
        check_matches(state, model.state_dict(), "the")
        raise ValueError(" ".join(str(err).split())) from None
    for names in tied:
        first = model.get_parameter(names[0])
        for name in names[1:]:
            owner, _, attribute = name.rpartition(".")
            setattr(model.get_submodule(owner), attribute, first)
    if any(t.is_meta for t in (*model.parameters(), *model.buffers())):
        return build_then_copy(model_class, config, state)
    first = next(v for v in state.values() if v.is_floating_point())
    return model.to(device=first.device, dtype=first.dtype)


def build_then_copy(model_class, config, state: Mapping[str, torch.Tensor]) -> nn.Module:
    """``model_class(config)`` built (and randomly initialised) on the CPU, moved to the state's device and dtype,
    then given the state by copying: what `build_loaded` falls back to."""
    model = model_class(config)
    first = next(v for v in state.values() if v.is_floating_point())
    model.to(device=first.device, dtype=first.dtype)
    model.load_state_dict(state, strict=True)
    return model


def shared_parameters(model: nn.Module) -> list[list[str]]:
    """Groups of names (≥ 2) under which one Parameter object appears."""
    groups: dict[int, list[str]] = {}
    for name, parameter in model.named_parameters(remove_duplicate=False):
        groups.setdefault(id(parameter), []).append(name)
    return [names for names in groups.values() if len(names) > 1]


def non_finite(model: nn.Module, shown: int = 3) -> str:
    """The tensors of ``model`` holding NaN or ±Inf (the first ``shown`` of them by name, and how many there are),
    "" when every value is finite: a command refuses such a model in one line instead of printing NaN metrics."""
    names = [name for name, t in (*model.named_parameters(), *model.named_buffers())
             if t.is_floating_point() and not bool(torch.isfinite(t).all())]
    if not names:
        return ""
    return f"NaN or Inf in {', '.join(names[:shown])}" + (f" and {len(names) - shown} more" if len(names) > shown else "")
