"""Module analysis in several threads at once: every crawl_module report is
the report the same crawl gives alone, and module hooks (crawl_module's,
a custom handler's, measure_flops(modules=True)'s process-global ones) do
nothing on threads they do not scan. The switch interval is cut to a few
microseconds so that the threads interleave inside each other's hooks."""

import sys
import threading

import pytest
import torch
import torch.nn as nn

import torchscan


def _handler(module, args, kwargs, output):
    return {"module_flops": 5}


def _crawls():
    """name -> (model, crawl): different models, each exercising one kind of
    crawl state (plain hooks, the token analysis, a custom handler)."""
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8))
    encoder = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
    small_encoder = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
    conv = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(4, 2))
    handled = nn.Sequential(nn.Linear(4, 4), nn.GELU(), nn.Linear(4, 4))
    return {
        "mlp": (mlp, lambda: torchscan.crawl_module(mlp, (8,))),
        "encoder": (encoder, lambda: torchscan.crawl_module(encoder, (5, 16))),
        "small_encoder": (small_encoder, lambda: torchscan.crawl_module(small_encoder, (3, 8))),
        "conv": (conv, lambda: torchscan.crawl_module(conv, (3, 8, 8))),
        "handled": (handled, lambda: torchscan.crawl_module(handled, (4,), custom_modules={nn.GELU: _handler})),
    }


CRAWLS = _crawls()


@pytest.fixture
def interleaved():
    previous = sys.getswitchinterval()
    sys.setswitchinterval(5e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(previous)


def _in_threads(jobs: dict, rounds: int) -> dict:
    """Runs each job (name -> callable) in its own thread, `rounds` times,
    the threads starting each round together; name -> list of results.
    An exception in any thread fails the test with it."""
    results = {name: [] for name in jobs}
    errors = []
    barrier = threading.Barrier(len(jobs))

    def work(name, job):
        try:
            for _ in range(rounds):
                barrier.wait()
                results[name].append(job())
        except BaseException as e:  # noqa: BLE001 -- reported below
            errors.append((name, e))
            barrier.abort()

    threads = [threading.Thread(target=work, args=item) for item in jobs.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        name, error = errors[0]
        raise AssertionError(f"thread {name} raised {type(error).__name__}: {error}") from error
    return results


@pytest.mark.parametrize("names", [("encoder", "small_encoder"), ("mlp", "encoder", "conv", "handled")])
def test_threads_crawling_at_once_each_get_the_crawl_alone(names, interleaved):
    alone = {name: CRAWLS[name][1]() for name in names}
    # Sanity: each crawl alone sees every layer call (the encoder layer and
    # its 8 submodules) and token rows (its analysis runs paused).
    assert len(alone["encoder"]["layers"]) == 9
    assert alone["encoder"]["totals"]["operator_flops"]["status"] == "complete"
    assert any("token_dependencies" in layer for layer in alone["encoder"]["layers"])
    results = _in_threads({name: CRAWLS[name][1] for name in names}, rounds=200)
    for name in names:
        for k, report in enumerate(results[name]):
            assert report == alone[name], f"{name}, round {k}: differs from the same crawl alone"


def test_forwards_of_the_crawled_model_in_other_threads_are_not_the_crawl(interleaved):
    # The hooks are on the model's modules: another thread's forward of the
    # same modules runs through them, and must pass untouched.
    model, crawl = CRAWLS["handled"]
    alone = crawl()
    x = torch.rand(3, 4)
    expected = model(x)

    def forward():
        with torch.no_grad():
            y = model(x)
        assert torch.equal(y, expected)
        return None

    results = _in_threads({"crawl": crawl, "forward-1": forward, "forward-2": forward}, rounds=100)
    for k, report in enumerate(results["crawl"]):
        assert report == alone, f"round {k}: differs from the crawl alone"


def test_measure_flops_module_hooks_leave_unscanned_threads_alone(interleaved):
    # measure_flops(modules=True) hooks every module call in the process;
    # other threads' forwards (of another model and of the scanned one) are
    # not its calls: they neither raise nor change its report.
    scanned = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    other = nn.Sequential(nn.Linear(4, 4), nn.Tanh())
    x, y = torch.rand(2, 8), torch.rand(3, 4)

    def measure():
        return torchscan.measure_flops(lambda: scanned(x), modules=True)

    def forward(model, inp):
        def run():
            with torch.no_grad():
                model(inp)
        return run

    alone = measure()
    # Linear(8,16) on 2 rows: 2*2*8*16 = 512 FLOPs; Linear(16,4): 2*2*16*4 = 256.
    assert alone["by_module"]["Sequential.0"] == 512
    assert alone["by_module"]["Sequential.2"] == 256
    results = _in_threads({"measure": measure, "other": forward(other, y), "same": forward(scanned, x)},
                          rounds=150)
    for k, report in enumerate(results["measure"]):
        assert report == alone, f"round {k}: differs from measure_flops alone"


class _Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x):
        return self.proj(x).relu()


def test_all_threads_module_labels_are_per_thread(interleaved):
    # scan(threads="all", modules=True): each thread has its own active
    # labels, so two threads in the same module both count for it.
    block, x = _Block(), torch.rand(2, 8)

    def forwards():
        with torch.no_grad():
            for _ in range(20):
                block(x)

    for _ in range(40):
        with torchscan.scan(threads="all", modules=True) as s:
            _in_threads({"a": forwards, "b": forwards}, rounds=1)
        by_module = s.report()["by_module"]
        # Per call: Linear(8, 8) on 2 rows 2*2*8*8 = 256 FLOPs, ReLU 2*8 = 16;
        # 20 calls in each of 2 threads.
        assert by_module["_Block"] == 40 * 272 and by_module["_Block.proj"] == 40 * 256, by_module


def test_threads_crawling_one_model_at_once_break_no_forward(interleaved):
    # Each crawl adds its hooks to the same modules and takes them out again
    # while the other threads run forwards through them: PyTorch may then
    # call a hook without its kwargs (Note [Hooks other threads call]), and
    # no thread may raise for it. In eval mode, as a served model is: a
    # crawl puts a model in eval mode for its forward, which a training-mode
    # forward elsewhere would see.
    torch.manual_seed(1)
    model = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True).eval()

    def crawl():
        return torchscan.crawl_module(model, (5, 16))

    alone = crawl()
    x = torch.rand(2, 5, 16)
    with torch.no_grad():
        expected = model(x)

    def forward():
        with torch.no_grad():
            y = model(x)
        # PyTorch's fused encoder path is off while the layer's modules have
        # hooks: the same values, rounded otherwise.
        assert torch.allclose(y, expected, rtol=1e-5, atol=1e-6)

    results = _in_threads({"crawl-1": crawl, "crawl-2": crawl, "crawl-3": crawl, "forward": forward}, rounds=150)
    for name in ("crawl-1", "crawl-2", "crawl-3"):
        for k, report in enumerate(results[name]):
            assert report == alone, f"{name}, round {k}: differs from the crawl alone"


@pytest.mark.parametrize("analysis", ["crawl_module", "custom_modules", "roofline"])
def test_hooks_called_without_kwargs_from_another_thread_return_quietly(analysis):
    # What a thread racing a hook's removal does (Note [Hooks other threads
    # call]): it calls pre(module, args) and post(module, args, output).
    # Every hook TorchScan has on the model, called so from another thread
    # in the middle of the analysis's forward, returns None and leaves the
    # analysis's report as it is alone.
    model = nn.Sequential(nn.Linear(4, 4), nn.GELU(), nn.Linear(4, 4)).eval()
    x = torch.rand(2, 4)
    answers, errors = [], []

    def call_every_hook():
        for m in model.modules():
            for hook in list(m._forward_pre_hooks.values()):
                answers.append(hook(m, (x,)))
            for hook in list(m._forward_hooks.values()):
                answers.append(hook(m, (x,), x))

    def in_thread():
        try:
            call_every_hook()
            errors.append(None)
        except BaseException as e:  # noqa: BLE001 - asserted below
            errors.append(e)

    class Probe(nn.Module):
        def forward(self, y):
            t = threading.Thread(target=in_thread)
            t.start()
            t.join()
            return y

    def run():
        if analysis == "roofline":
            return torchscan.roofline(model, x, gpu="h100-sxm")["totals"]
        options = {"custom_modules": {nn.GELU: _handler}} if analysis == "custom_modules" else {}
        return torchscan.crawl_module(model, args=(x,), **options)

    alone = run()
    model.append(Probe())
    try:
        with_calls = run()
    finally:
        del model[3]
    assert errors == [None] and answers and all(a is None for a in answers)
    if analysis != "roofline":  # the probe is one more layer row
        with_calls["layers"] = [row for row in with_calls["layers"] if row["type"] != "Probe"]
        alone["context"].pop("model_type"), with_calls["context"].pop("model_type")
    assert with_calls == alone
