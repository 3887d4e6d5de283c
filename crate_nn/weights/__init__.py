"""Weights: every file a model is read from or written to — ours and other codebases' — and the one place that
decides which a file is.

    stored = crate_nn.weights.read_state("crate_alpha_B16.pth", heads=12)   # what the file is, under our names
    stored.format, stored.family, stored.config, stored.state, stored.preprocessing
    model = stored.build()                                                # = crate_nn.load(path, heads=12)
    crate_nn.weights.init_from(model, "hf-hub:ORG/NAME:path/in/repo.pth") # fine-tuning, by the family's policy

Modules (nothing outside this package tests a file's format):

    reading.py    read_state — the one decision: ours, else the adapter whose sniff claims the file; load,
                  create_model(checkpoint=), sniff, training_config
    ours.py       our format (torch and .safetensors, both with a checksum), save, and Checkpoint: what any file
                  becomes under our names
    adapter.py    Adapter: another codebase's format (sniff, to ours, to theirs, the options its files lack)
    adapters/     one module per other codebase, listed once in adapters/__init__.py's ADAPTERS
    transfer.py   init_from and the per-family fine-tuning policies (heads left fresh, positions resampled or cropped)
    build.py      a model built on the meta device, compared with the tensors, given them; bounded by the file
    keys.py       what adapters share: unwrapping a state dict, renaming keys by templates
    storage.py    the bytes: atomic writes, safe torch reads, safetensors
    hub.py        hf-hub:ORG/NAME[@revision][:path] in the local Hugging Face cache, confined to it

Adding another codebase's format (e.g. timm's ViT keys): a module ``adapters/<name>.py`` that defines
``ADAPTER = Adapter(name=…, family=…, claims=…, to_ours=…, to_theirs=…, export=…)`` — ``claims(state)`` tells its
state dicts from every other format's, ``to_ours(payload, **options)`` returns (config, our state) with every key and
shape checked (`crate_nn.weights.keys.KeyMap` renames, `crate_nn.weights.build.check_matches` names what does not
fit), ``to_theirs(model)`` what ``torch.save`` writes for ``crate-export --format <export>`` — and one line in
`adapters.ADAPTERS`. `crate_nn.load`, ``create_model(checkpoint=)``, every task's ``init_from``, the command lines
and ``crate-export`` then read and write it; ``tests/test_export.py`` checks that every adapter round-trips.
"""
from .adapter import Adapter
from .adapters import ADAPTERS
from .build import non_finite
from .ours import FORMAT, Checkpoint, save
from .reading import create_model, load, read_state, sniff, training_config
from .transfer import POLICIES, FineTuning, init_from, starting_points

__all__ = ["ADAPTERS", "FORMAT", "POLICIES", "Adapter", "Checkpoint", "FineTuning", "create_model", "init_from", "load",
           "non_finite", "read_state", "save", "sniff", "starting_points", "training_config"]
