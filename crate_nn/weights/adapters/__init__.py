"""Other codebases' weights formats, one module each; `ADAPTERS` lists them, in the order they are tried.

A new format is one module here defining its `crate_nn.weights.adapter.Adapter` and one line in `ADAPTERS`: reading
(`crate_nn.load`, ``init_from``, ``create_model(checkpoint=)``, the command lines) and writing (``crate-export
--format``) find it there.
"""
from . import alpha, alpha_jax, classifier, gpt, mae, vit

ADAPTERS = (
    classifier.ADAPTER,
    mae.ADAPTER,
    alpha.ADAPTER,
    alpha_jax.ADAPTER,
    gpt.CRATE_LM,
    gpt.NANOGPT,
    vit.TIMM,
    vit.DINO,
)
