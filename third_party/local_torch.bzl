"""Repository rule exposing the installed torch wheel's LibTorch to Bazel.

The plugin must be compiled against the same torch that loads it, so the
headers and libraries come from `python3 -c "import torch"`, never from a
download.
"""

def _local_torch_impl(rctx):
    python = rctx.os.environ.get("TORCHSCAN_PYTHON", "python3")
    res = rctx.execute([python, "-c", "\n".join([
        "import os, torch",
        "print(os.path.dirname(torch.__file__))",
        "print(torch.__version__)",
        "print(int(torch._C._GLIBCXX_USE_CXX11_ABI))",
    ])])
    if res.return_code != 0:
        fail("local_torch: cannot import torch with %s (run tools/setup.sh first):\n%s" % (python, res.stderr))
    root, version, abi = res.stdout.strip().split("\n")
    rctx.symlink(root + "/include", "include")
    rctx.symlink(root + "/lib", "lib")
    rctx.file("BUILD", """
package(default_visibility = ["//visibility:public"])

cc_library(
    name = "libtorch",
    hdrs = glob(["include/ATen/**", "include/c10/**", "include/torch/*.h",
                 "include/torch/csrc/**/*.h", "include/torch/headeronly/**",
                 "include/caffe2/**", "include/fmt/**"]),
    includes = ["include", "include/torch/csrc/api/include", "built_against"],
    textual_hdrs = ["built_against/torchscan_built_against.h"],
    defines = ["_GLIBCXX_USE_CXX11_ABI={abi}"],
    # Linked by name, not as srcs: the shipped libtorchscan.so then records
    # no build-machine path (Bazel adds a RUNPATH to every srcs library's
    # directory). It needs only the two libraries every LibTorch program
    # loads (not the libtorch.so stub), so the loader finds them already
    # loaded, through the program's own search path.
    linkopts = ["-L{root}/lib", "-lc10", "-ltorch_cpu"],
)

# Programs run from the build tree (the tests) find LibTorch here. They also
# load libtorch.so, as every LibTorch program built with CMake's
# TORCH_LIBRARIES does: code torch generates at run time relies on it being
# loaded already (in the CUDA builds, an AOTInductor package's model library
# names libtorch.so without a search path; the CPU builds' do not).
cc_library(
    name = "runtime",
    linkopts = ["-Wl,-rpath,{root}/lib", "-L{root}/lib", "-ltorch"],
    deps = [":libtorch"],
)
""".format(abi = abi, root = root))
    # The exact torch the plugin was built against, for load-time checks.
    rctx.file("built_against/torchscan_built_against.h",
              "#pragma once\n#define TORCHSCAN_BUILT_TORCH_VERSION \"%s\"\n" % version)
    rctx.file("version.bzl", "TORCH_VERSION = %r\nTORCH_LIB_DIR = %r\n" % (version, root + "/lib"))

local_torch = repository_rule(
    implementation = _local_torch_impl,
    environ = ["TORCHSCAN_PYTHON"],
    local = True,
)
