"""Receptive fields per spatial axis.

Conventions (README, receptive fields): along one spatial axis, output
position o of a layer sees input positions
[o*stride - padding, o*stride - padding + rf - 1] of the model input.
A convolution (kernel k, stride s, padding p, dilation d, k_eff = d(k-1)+1)
maps (rf, stride, padding) to (rf + (k_eff-1)*stride, stride*s,
padding + p*stride). Every expected value below is derived by hand in the
comment next to it.
"""

import torch
import torch.nn as nn

FIELD = ("receptive_field", "effective_stride", "effective_padding")


def row(report, path, call_index=0):
    return [l for l in report["layers"] if l["path"] == path and l["call_index"] == call_index][0]["metrics"]


def axes(metrics, name):
    """(dims, values) of a metric's per-axis entries."""
    entries = metrics[name].get("axes", [])
    return [a["dim"] for a in entries], [a["value"] for a in entries]


def scalar(metrics):
    return tuple(metrics[k]["value"] if metrics[k]["status"] == "complete" else None for k in FIELD)


def assert_unavailable(metrics, method, reason_part):
    for k in FIELD:
        m = metrics[k]
        assert (m["status"], m["value"], m["known_value"], m["method"]) == ("unavailable", None, None, method), m
        assert reason_part in m["reason"], m["reason"]


# ---- every spatial axis, the scalar only when they agree


def test_asymmetric_kernel_reports_each_axis(torchscan):
    report = torchscan.crawl_module(nn.Conv2d(1, 2, (1, 7)), (1, 10, 10))
    m = row(report, "")
    # Kernel (1, 7): H sees 1 row, W sees 7 columns (was: 1 complete, the H axis only).
    assert axes(m, "receptive_field") == ([2, 3], [1, 7])
    rf = m["receptive_field"]
    assert (rf["status"], rf["value"], rf["method"]) == ("unavailable", None, "data_flow")
    assert "axes differ" in rf["reason"]
    # Stride 1 and padding 0 on both axes agree: complete scalars, axes still listed.
    assert scalar(m)[1:] == (1, 0)
    assert axes(m, "effective_stride") == ([2, 3], [1, 1])
    assert axes(m, "effective_padding") == ([2, 3], [0, 0])


def test_inception_style_factorised_branch(torchscan):
    # (1,7) with padding (0,3), then (7,1) with padding (3,0), stride 1:
    # after the first: rf (1, 7), padding (0, 3); after the second:
    # rf (1+6, 7) = (7, 7), padding (0+3, 3) = (3, 3): the axes agree again.
    model = nn.Sequential(nn.Conv2d(1, 2, (1, 7), padding=(0, 3)), nn.Conv2d(2, 2, (7, 1), padding=(3, 0)))
    report = torchscan.crawl_module(model, (1, 9, 9))
    first = row(report, "0")
    assert axes(first, "receptive_field")[1] == [1, 7]
    assert axes(first, "effective_padding")[1] == [0, 3]
    assert scalar(first) == (None, 1, None)
    assert scalar(row(report, "1")) == (7, 1, 3)


# ---- transposed convolution


def test_transposed_convolution_padding(torchscan):
    # ConvTranspose2d(3, 8, 3): input i is written to outputs i..i+2, so
    # output o reads inputs o-2..o: rf 3, stride 1, and output 0's window
    # starts 2 before input 0: padding k-1-p = 3-1-0 = 2 (was: 0, the input's).
    report = torchscan.crawl_module(nn.ConvTranspose2d(3, 8, 3), (3, 5, 5))
    assert scalar(row(report, "")) == (3, 1, 2)
    # padding=1 moves every output one step later: k-1-p = 1.
    report = torchscan.crawl_module(nn.ConvTranspose2d(3, 8, 3, padding=1), (3, 5, 5))
    assert scalar(row(report, "")) == (3, 1, 1)


def test_transposed_convolution_stride_dilation_output_padding(torchscan):
    # Stride 2, padding 1, output_padding 1, k 3: input i goes to outputs
    # 2i-1+j, j=0..2; output o reads i=(o+1-j)/2 where that is an integer.
    # o=0: j=1 -> i=0 (one input); o=1: j=0 -> 1, j=2 -> 0 (two inputs).
    # rf = 2 (the widest), stride 1/2, output 0 starts at input 0: padding 0.
    # output_padding only appends outputs at the end.
    model = nn.ConvTranspose1d(1, 1, 3, stride=2, padding=1, output_padding=1)
    assert scalar(row(torchscan.crawl_module(model, (1, 6)), "")) == (2, 0.5, 0)
    # Stride 3, dilation 2, k 3, padding 0: output o reads i=(o-2j)/3; 2j mod 3
    # takes the values 0, 2, 1 for j=0,1,2, so exactly one tap divides for each
    # o: rf 1, stride 1/3; output 0 reads input 0 (j=0): padding 0.
    model = nn.ConvTranspose1d(1, 1, 3, stride=3, dilation=2)
    rf, stride, padding = scalar(row(torchscan.crawl_module(model, (1, 6)), ""))
    assert (rf, padding) == (1, 0) and abs(stride - 1 / 3) < 1e-12
    # Stride 1, dilation 2, k 3, padding 1: output o reads o+1-2j = o+1, o-1,
    # o-3: span 5; output 0 starts at input -3: padding (k_eff-1) - p = 4 - 1 = 3.
    model = nn.ConvTranspose1d(1, 1, 3, dilation=2, padding=1)
    assert scalar(row(torchscan.crawl_module(model, (1, 6)), "")) == (5, 1, 3)


def test_transposed_convolution_matches_autograd(torchscan):
    # An independent check of the rule above: with all-one weights, the
    # gradient of output o is non-zero exactly at the inputs it reads.
    conv = nn.ConvTranspose1d(1, 1, 3, stride=2, padding=1, bias=False)
    nn.init.ones_(conv.weight)
    x = torch.ones(1, 1, 8, requires_grad=True)
    y = conv(x)
    spans = []
    for o in range(2, y.shape[-1] - 2):  # interior outputs: no border clipping
        (g,) = torch.autograd.grad(y[0, 0, o], x, retain_graph=True)
        read = g[0, 0].nonzero().flatten().tolist()
        spans.append(read[-1] - read[0] + 1)
    rf = scalar(row(torchscan.crawl_module(conv, (1, 8)), ""))[0]
    assert rf == max(spans) == 2


# ---- axes followed through permute / linear / reshape


class ChannelsLastBlock(nn.Module):
    """conv -> NHWC -> linear over channels -> NCHW -> conv."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(2, 4, 3)
        self.lin = nn.Linear(4, 4)
        self.c2 = nn.Conv2d(4, 4, 3, padding=1)

    def forward(self, x):
        y = self.lin(self.c1(x).permute(0, 2, 3, 1))
        return self.c2(y.permute(0, 3, 1, 2))


def test_permute_linear_permute(torchscan):
    report = torchscan.crawl_module(ChannelsLastBlock(), (2, 12, 12))
    # c1: 3x3 -> rf 3, stride 1, padding 0.
    assert scalar(row(report, "c1")) == (3, 1, 0)
    # lin works on the channels of the NHWC tensor: H and W (now dims 1, 2)
    # keep c1's field (was: unavailable after the permute).
    lin = row(report, "lin")
    assert scalar(lin) == (3, 1, 0)
    assert axes(lin, "receptive_field") == ([1, 2], [3, 3])
    # c2 back in NCHW: 3 + 2*1 = 5, padding 0 + 1*1 = 1.
    assert scalar(row(report, "c2")) == (5, 1, 1)
    assert axes(row(report, "c2"), "receptive_field")[0] == [2, 3]


class ConvNeXtBlock(nn.Module):
    """ConvNeXt's block: depthwise 7x7, then LayerNorm and an MLP in NHWC, residual."""

    def __init__(self, c=8):
        super().__init__()
        self.dwconv = nn.Conv2d(c, c, 7, padding=3, groups=c)
        self.norm = nn.LayerNorm(c)
        self.pw1, self.act, self.pw2 = nn.Linear(c, 4 * c), nn.GELU(), nn.Linear(4 * c, c)
        self.gamma = nn.Parameter(torch.full((c,), 1e-6))

    def forward(self, x):
        y = self.dwconv(x).permute(0, 2, 3, 1)
        y = self.gamma * self.pw2(self.act(self.pw1(self.norm(y))))
        return x + y.permute(0, 3, 1, 2)


def test_convnext_block(torchscan):
    model = nn.Sequential(nn.Conv2d(3, 8, 4, stride=4), ConvNeXtBlock())
    report = torchscan.crawl_module(model, (3, 32, 32))
    # Stem 4x4 stride 4: rf 4, stride 4, padding 0. Depthwise 7x7, padding 3:
    # rf 4 + 6*4 = 28, stride 4, padding 0 + 3*4 = 12. The NHWC layers keep it
    # (the layer-scale parameter gamma is untracked: it adds no positions), and
    # the residual joins the stem's window [4o, 4o+3] with [4o-12, 4o+15]: the
    # wider one, 28 / 4 / 12.
    assert scalar(row(report, "0")) == (4, 4, 0)
    for path in ("1.dwconv", "1.norm", "1.pw1", "1.act", "1.pw2", "1"):
        assert scalar(row(report, path)) == (28, 4, 12), path


# ---- token tensors


class ViTStyle(nn.Module):
    def __init__(self, dim=16):
        super().__init__()
        self.patch = nn.Conv2d(3, dim, 4, stride=4)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.zeros(1, 17, dim))
        self.norm = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, 2, batch_first=True)
        self.head = nn.Linear(dim, 10)

    def forward(self, x):
        tokens = self.patch(x).flatten(2).transpose(1, 2)  # (B, 16, D): the 4x4 grid flattened
        tokens = torch.cat([self.cls.expand(x.shape[0], -1, -1), tokens], dim=1) + self.pos
        t = self.norm(tokens)
        t, _ = self.attn(t, t, t)
        return self.head(t[:, 0])


def test_token_tensors_are_not_applicable(torchscan):
    report = torchscan.crawl_module(ViTStyle().eval(), (3, 16, 16))
    # The patchify conv is spatial: 4x4, stride 4.
    assert scalar(row(report, "patch")) == (4, 4, 0)
    # After flatten(2).transpose(1, 2) the 16 grid positions are one token
    # axis and the embedding axis is not spatial; the untracked class token
    # and position embedding do not start a fresh field of 1 (was: 1/1/0
    # complete on every one of these rows).
    for path in ("norm", "attn"):
        assert_unavailable(row(report, path), "not_applicable", "token")
    # The class token's features and the logits: no spatial axes at all.
    assert_unavailable(row(report, "head"), "not_applicable", "no spatial axes")


class TokensBackToImage(nn.Module):
    """Tokens reshaped back to an image, once straight and once after attention."""

    def __init__(self, dim=8):
        super().__init__()
        self.patch = nn.Conv2d(3, dim, 2, stride=2)
        self.pos = nn.Parameter(torch.zeros(1, 16, dim))
        self.norm = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, 2, batch_first=True)
        self.plain = nn.Conv2d(dim, dim, 3)
        self.mixed = nn.Conv2d(dim, dim, 3)

    def forward(self, x):
        y = self.patch(x)
        b, c, h, w = y.shape
        t = self.norm(y.flatten(2).transpose(1, 2) + self.pos)
        a, _ = self.attn(t, t, t)
        self.plain(t.transpose(1, 2).reshape(b, c, h, w))
        return self.mixed(a.transpose(1, 2).reshape(b, c, h, w))


def test_tokens_reshaped_back(torchscan):
    report = torchscan.crawl_module(TokensBackToImage().eval(), (3, 8, 8))
    # patch 2x2 stride 2: rf 2, stride 2. Flatten + position embedding +
    # LayerNorm (per token) + reshape to (B, C, 4, 4) splits the token axis back
    # into exactly the grid it came from: the field is followed, and a 3x3
    # conv gives 2 + 2*2 = 6, stride 2, padding 0.
    assert scalar(row(report, "plain")) == (6, 2, 0)
    # After attention every token depends on every token: not a window, and
    # token relations are not analysed here: unavailable, never a field.
    assert_unavailable(row(report, "mixed"), "data_flow", "token")


class WindowPartition(nn.Module):
    """Swin's window partition: H and W split into (windows, positions in a window)."""

    def __init__(self, dim=8, ws=2):
        super().__init__()
        self.ws = ws
        self.patch = nn.Conv2d(3, dim, 2, stride=2)
        self.proj = nn.Linear(dim, dim)
        self.out = nn.Conv2d(dim, dim, 1)

    def forward(self, x):
        y = self.patch(x).permute(0, 2, 3, 1)  # (B, H, W, C)
        b, h, w, c = y.shape
        ws = self.ws
        win = y.view(b, h // ws, ws, w // ws, ws, c).permute(0, 1, 3, 2, 4, 5).reshape(-1, ws * ws, c)
        win = self.proj(win)
        y = win.view(b, h // ws, w // ws, ws, ws, c).permute(0, 1, 3, 2, 4, 5).reshape(b, h, w, c)
        return self.out(y.permute(0, 3, 1, 2))


def test_window_partition_is_unavailable_not_wrong(torchscan):
    report = torchscan.crawl_module(WindowPartition(), (3, 8, 8))
    assert scalar(row(report, "patch")) == (2, 2, 0)
    # Splitting an axis into (window, position) is not followed: unavailable
    # with the reason, never a (wrong) complete value.
    for path in ("proj", "out", ""):
        assert_unavailable(row(report, path), "data_flow", "window partition")


def test_summary_shows_per_axis_values(torchscan, capsys):
    torchscan.summary(nn.Conv2d(1, 2, (1, 7)), (1, 10, 10), receptive_field=True)
    line = [l for l in capsys.readouterr().out.splitlines() if l.startswith("(root)")][0]
    # RF differs per axis (1 x 7); stride and padding agree.
    assert line.split()[-3:] == ["1x7", "1", "0"]
