"""The C++ test macro: every suite is GoogleTest on LibTorch's runtime."""

load("@rules_cc//cc:defs.bzl", "cc_test")

_COMMON = [
    "@gtest//:gtest_main",
    "@nlohmann_json//:json",
    "@torch//:runtime",
]

def torchscan_test(name, srcs, deps = [], size = "small", **kwargs):
    """A C++ suite. `deps` names the layer under test (and helpers); the
    test framework, JSON and LibTorch's runtime are added here."""
    cc_test(
        name = name,
        size = size,
        srcs = srcs,
        deps = deps + [d for d in _COMMON if d not in deps],
        **kwargs
    )
