"""The C++ test macro: every suite is GoogleTest on LibTorch's runtime."""

load("@rules_cc//cc:defs.bzl", "cc_test")

_COMMON = [
    "@gtest//:gtest_main",
    "@nlohmann_json//:json",
    "@torch//:runtime",
]

def torchscan_test(name, srcs, deps = [], size = "small", copts = [], **kwargs):
    """A C++ suite. `deps` names the layer under test (and helpers); the
    test framework, JSON and LibTorch's runtime are added here. The suite's
    own code compiles without optimisation (the code it tests keeps the
    build's): a test file is mostly GoogleTest macros and LibTorch headers,
    whose optimisation costs compile time and saves no run time worth it."""
    cc_test(
        name = name,
        size = size,
        srcs = srcs,
        copts = ["-O0"] + copts,
        deps = deps + [d for d in _COMMON if d not in deps],
        **kwargs
    )
