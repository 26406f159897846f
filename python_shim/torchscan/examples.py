"""Example models built from code, used by the demo, the docs and the tests."""

from __future__ import annotations

from typing import List, Sequence

import torch
import torch.nn as nn

__all__ = ["mlp", "SmallCNN", "small_cnn"]


def mlp(in_features: int = 784, hidden: Sequence[int] = (256, 128),
        out_features: int = 10) -> nn.Sequential:
    """A plain MLP: Linear/ReLU stacks then a Linear head. Input (B, in_features)."""
    layers: List[nn.Module] = []
    prev = in_features
    for h in hidden:
        layers += [nn.Linear(prev, h), nn.ReLU()]
        prev = h
    layers.append(nn.Linear(prev, out_features))
    return nn.Sequential(*layers)


class SmallCNN(nn.Module):
    """Covers conv, grouped conv, depthwise conv, conv-transpose and pooling.

    Input (B, in_channels, 32, 32) -> logits (B, num_classes).
    """

    def __init__(self, in_channels: int = 3, num_classes: int = 10) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_channels, 16, kernel_size=3, padding=1)
        self.bn = nn.BatchNorm2d(16)
        self.act = nn.ReLU()
        self.maxpool = nn.MaxPool2d(2)                                      # 32 -> 16
        self.grouped = nn.Conv2d(16, 32, kernel_size=3, padding=1, groups=4)
        self.depthwise = nn.Conv2d(32, 32, kernel_size=3, padding=1, groups=32)
        self.pointwise = nn.Conv2d(32, 32, kernel_size=1)
        self.avgpool = nn.AvgPool2d(2)                                      # 16 -> 8
        self.up = nn.ConvTranspose2d(32, 16, kernel_size=2, stride=2)       # 8 -> 16
        self.gap = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(16, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.act(self.bn(self.conv(x))))
        x = self.act(self.grouped(x))
        x = self.act(self.pointwise(self.depthwise(x)))
        x = self.avgpool(x)
        x = self.act(self.up(x))
        x = torch.flatten(self.gap(x), 1)
        return self.fc(x)


def small_cnn(in_channels: int = 3, num_classes: int = 10) -> SmallCNN:
    return SmallCNN(in_channels, num_classes)
