"""Kernels registered or removed between scans.

Whether a call's children are the whole of its work depends on which kernel
won its dispatch, which TorchScan reads from the operator's computed
dispatch table; that text is kept across scans while the operator's
registrations are unchanged (Note [Computed tables across scans] in
core/op_catalog.cc). A registration made or removed between two scans must
change the next scan's answer.
"""

import torch


def test_a_kernel_registered_then_removed_between_scans(torchscan):
    lib = torch.library.Library("ts_registration_changes", "DEF")
    lib.define("mm_twice(Tensor a, Tensor b) -> Tensor")
    # A decomposition: its one child is the whole of its work.
    lib.impl("mm_twice", lambda a, b: torch.mm(a, b), "CompositeImplicitAutograd")
    op = torch.ops.ts_registration_changes.mm_twice
    a, b = torch.rand(2, 3), torch.rand(3, 4)

    def scan():
        return torchscan.measure_flops(lambda: op(a, b))

    # mm of 2x3 by 3x4: 2 * 2 * 3 * 4 = 48 FLOPs, counted through the child.
    first = scan()
    assert first["total"]["status"] == "complete", first["diagnostics"]
    assert first["total"]["value"] == 48
    assert scan()["total"] == first["total"]  # the kept table gives the same answer

    # A CPU kernel now wins over the decomposition: the operator is opaque
    # (its kernel may compute outside PyTorch), so the total is a lower bound.
    cpu = torch.library.Library("ts_registration_changes", "IMPL")
    cpu.impl("mm_twice", lambda a, b: torch.mm(a, b), "CPU")
    try:
        opaque = scan()
        assert opaque["total"]["status"] == "partial"
        assert "ts_registration_changes" in str(opaque["diagnostics"])
    finally:
        cpu._destroy()

    # The CPU kernel removed: the decomposition wins again.
    again = scan()
    assert again["total"]["status"] == "complete", again["diagnostics"]
    assert again["total"]["value"] == 48
    lib._destroy()
