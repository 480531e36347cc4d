"""torchvision-layout ResNet-18 trunk (stem, ``layer1`` .. ``layer4`` of BasicBlocks; no pooling or fc).

Mirrors torchvision ``models/resnet.py`` (``BasicBlock``, ``ResNet``) as lerobot uses it:
- ACT (``src/lerobot/policies/act/modeling_act.py``): ``IntermediateLayerGetter`` over resnet18 built with
  ``norm_layer=FrozenBatchNorm2d`` keeps the child names (``backbone.layer4.0.conv1.weight``);
- Diffusion Policy (``src/lerobot/policies/diffusion/modeling_diffusion.py``): ``nn.Sequential(*children()[:-2])``
  numbers the children (``backbone.0.weight`` is ``conv1``, ``backbone.7`` is ``layer4``) and every BatchNorm2d is
  replaced by ``GroupNorm(num_features // 16, num_features)``.
"""

from __future__ import annotations

from collections import OrderedDict

import torch.nn.functional as F
from torch import Tensor, nn

from vlabench.models.specs_visuomotor import ResNetSpec

GROUP_NORM_CHANNELS_PER_GROUP = 16  # lerobot: GroupNorm(num_groups=num_features // 16)


class FrozenBatchNorm2d(nn.BatchNorm2d):
    """BatchNorm2d that always normalizes with its running statistics (torchvision ``FrozenBatchNorm2d``).

    Its state-dict keys are FrozenBatchNorm2d's (``weight``, ``bias``, ``running_mean``, ``running_var``): no
    ``num_batches_tracked``. ``weight`` and ``bias`` stay parameters so generic initializers treat it as a norm.
    """

    def __init__(self, num_features: int) -> None:
        super().__init__(num_features)
        self.num_batches_tracked = None

    def forward(self, x: Tensor) -> Tensor:
        return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, False, 0.0, self.eps)

    def _load_from_state_dict(self, *args, **kwargs) -> None:
        # Skip _NormBase's hook, which would inject a num_batches_tracked entry this module does not hold.
        nn.Module._load_from_state_dict(self, *args, **kwargs)


def norm_layer(kind: str, channels: int) -> nn.Module:
    """The trunk's normalization: frozen BatchNorm (ACT) or GroupNorm with 16 channels per group (Diffusion Policy)."""
    if kind == "batch":
        return FrozenBatchNorm2d(channels)
    return nn.GroupNorm(channels // GROUP_NORM_CHANNELS_PER_GROUP, channels)


class BasicBlock(nn.Module):
    """torchvision's ResNet BasicBlock: two 3×3 convs with a residual (1×1 conv + norm when the shape changes)."""

    def __init__(self, in_channels: int, out_channels: int, stride: int, norm: str) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1, bias=False)
        self.bn1 = norm_layer(norm, out_channels)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, stride=1, padding=1, bias=False)
        self.bn2 = norm_layer(norm, out_channels)
        self.downsample = (
            nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False), norm_layer(norm, out_channels)
            )
            if stride != 1 or in_channels != out_channels
            else None
        )

    def forward(self, x: Tensor) -> Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        identity = x if self.downsample is None else self.downsample(x)
        return self.relu(out + identity)


def resnet_trunk(spec: ResNetSpec) -> nn.Sequential:
    """The trunk with torchvision's child names; ``nn.Sequential(*trunk.children())`` gives lerobot DP's numbering."""
    widths, blocks = spec.widths, spec.blocks
    children: OrderedDict[str, nn.Module] = OrderedDict(
        conv1=nn.Conv2d(3, widths[0], 7, stride=2, padding=3, bias=False),
        bn1=norm_layer(spec.norm, widths[0]),
        relu=nn.ReLU(),
        maxpool=nn.MaxPool2d(3, stride=2, padding=1),
    )
    in_channels = widths[0]
    for stage, (width, count) in enumerate(zip(widths, blocks, strict=True)):
        first = BasicBlock(in_channels, width, 1 if stage == 0 else 2, spec.norm)
        rest = [BasicBlock(width, width, 1, spec.norm) for _ in range(count - 1)]
        children[f"layer{stage + 1}"] = nn.Sequential(first, *rest)
        in_channels = width
    return nn.Sequential(children)
