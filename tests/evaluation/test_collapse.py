"""CollapseMonitors: a student/teacher model's collapse monitors on held-out images, by an objective; a model and
data, never a task."""
import pytest
import torch

from crate_nn.evaluation import CollapseMonitors
from crate_nn.models.dino_head import DINO, DINOConfig
from crate_nn.tasks.dino_loss import DINOLoss
from crate_nn.tasks.simdino import SimDINOLoss

TINY = dict(image_size=8, patch_size=4, dim=16, depth=1, heads=2, in_channels=1, dynamic_img_size=True,
            out_dim=32, hidden_dim=24, bottleneck_dim=8)


class Images(torch.utils.data.Dataset):
    """``n`` fixed gray 8×8 images with labels 0, as the image data sets give them (image, label, index)."""

    def __init__(self, n: int) -> None:
        self.images = torch.rand(n, 1, 8, 8, generator=torch.Generator().manual_seed(0))

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i):
        return self.images[i], 0, i


def halve(images: torch.Tensor) -> torch.Tensor:
    return images / 2


@pytest.mark.parametrize("projection", ["dino", "simdino"])
def test_monitors_are_the_objectives_of_the_models_outputs_on_the_first_images(projection):
    torch.manual_seed(0)
    model = DINO(DINOConfig(**TINY, projection=projection)).eval()
    with torch.no_grad():
        model.teacher.backbone.cls_token.add_(1.0)  # teacher ≠ student
    if projection == "dino":
        objective = DINOLoss(32, student_temp=0.1, teacher_temp=0.07, warmup_teacher_temp=0.02,
                             warmup_teacher_temp_epochs=3)
        with torch.no_grad():
            objective.center.normal_()
    else:
        objective = SimDINOLoss(0.5)
    data = Images(7)
    monitors = CollapseMonitors(data, halve, "cpu", samples=5)
    with torch.no_grad():
        student, teacher = model(data.images[:5] / 2)
    for epoch in (0, 1, 5):  # DINO's τ_t warms up over epochs 0–2
        expected = objective.monitors(student, teacher, epoch)
        assert monitors(model, objective, epoch) == expected  # the same images through the same operations
    if projection == "dino":
        assert monitors(model, objective, 0) != monitors(model, objective, 5)
        assert not objective.teacher_sum.any() and objective.teacher_count == 0  # monitoring is not training
    assert len(CollapseMonitors(data, halve, "cpu", samples=100).images) == 7  # at most the data set


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="samples: expected a positive integer, got 0"):
        CollapseMonitors(Images(3), halve, "cpu", samples=0)
    with pytest.raises(ValueError, match="dataset: no images to monitor"):
        CollapseMonitors(Images(0), halve, "cpu")
