"""Shared pieces of the training tests: a tiny CPU configuration that trains in well under a second."""
from crate_nn.presets import TrainConfig, get_preset

TINY_MODEL = dict(patch_size=4, dim=16, depth=2, heads=2)


def tiny(output_dir, **overrides) -> TrainConfig:
    """The synthetic preset shrunk to 8×8 images, 32 samples, batch 8 (4 steps per epoch), CPU, float32."""
    base = dict(image_size=8, model_args=dict(TINY_MODEL), batch_size=8, synthetic_samples=32, epochs=3,
                warmup_epochs=1.0, progress=False, device="cpu", precision="fp32", output_dir=str(output_dir),
                num_workers=0, augment="none", checkpoint_every=0)
    return get_preset("synthetic", **{**base, **overrides})
