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


def test_an_operator_defined_again_between_scans(torchscan):
    # What a catalog learns from a definition is kept across scans (Note
    # [Operator facts across scans] in core/op_catalog.cc) and must be
    # dropped when the definition goes. First definition: the schema says the
    # result is a view of the input, so the call is zero-cost and the scan
    # is complete with 0 FLOPs.
    lib = torch.library.Library("ts_definition_changes", "DEF")
    x = torch.rand(2, 3)
    try:
        lib.define("pick(Tensor(a) x) -> Tensor(a)")
        lib.impl("pick", lambda x: x.view(x.shape), "CompositeExplicitAutograd")
        first = torchscan.measure_flops(lambda: torch.ops.ts_definition_changes.pick(x))
        assert first["total"]["status"] == "complete", first["diagnostics"]
        assert first["total"]["value"] == 0
    finally:
        lib._destroy()  # also when an assertion fails: the name is defined again below and in no other test

    # The same name defined again, now computing a new tensor in a kernel of
    # its own: not a view, no formula, so its work is unknown and the total
    # is a lower bound. Facts kept from the first definition would still call
    # it a zero-cost view and the total complete.
    again = torch.library.Library("ts_definition_changes", "DEF")
    again.define("pick(Tensor x) -> Tensor")
    again.impl("pick", lambda x: x * 2, "CPU")
    try:
        op = torch.ops.ts_definition_changes.pick.default
        assert "Tensor(a)" not in str(op._schema)  # the new definition is the one called
        second = torchscan.measure_flops(lambda: op(x))
        assert second["total"]["status"] == "partial", second["diagnostics"]
        assert "ts_definition_changes" in str(second["diagnostics"])
    finally:
        again._destroy()


def test_definitions_coming_and_going_while_another_thread_scans(torchscan):
    # The kept facts are dropped while scans read them (the dispatcher calls
    # the listener on the defining thread): every scan still gets the same,
    # complete answer, and nothing waits forever.
    import threading

    x, w = torch.rand(4, 8), torch.rand(8, 3)
    expected = 2 * 4 * 8 * 3  # mm of 4x8 by 8x3: 2 * M * K * N FLOPs
    stop, started = threading.Event(), threading.Event()
    defined = [0]

    def define_and_remove():
        while not stop.is_set():
            lib = torch.library.Library("ts_definitions_churn", "DEF")
            lib.define(f"noop{defined[0] % 3}(Tensor x) -> Tensor")
            lib._destroy()
            defined[0] += 1
            started.set()

    churn = threading.Thread(target=define_and_remove, daemon=True)
    churn.start()
    try:
        # The scans begin once the churn has: 40 small scans can otherwise end
        # before the thread first runs, and the test would check nothing.
        assert started.wait(timeout=60)
        totals = [torchscan.measure_flops(lambda: torch.mm(x, w))["total"] for _ in range(40)]
    finally:
        stop.set()
        churn.join(timeout=60)
    assert not churn.is_alive()
    assert defined[0] > 0
    assert all(t["status"] == "complete" and t["value"] == expected for t in totals), totals
