"""Data kinds: gradients flow through the actions (gradcheck), and the action laws hold on every
device (CPU always, CUDA when present) and in float32 and float64."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from orbitscope.group import D4, Octahedral, Rotation, SO3Grid, Transforms, Translation, d4_time_reversal
from orbitscope.kinds import Boxes, get_kind, transform_flow, transform_points, warp_images, warp_window

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
DTYPES = [torch.float32, torch.float64]


def _pairs(t: Transforms):
    """All (g, h) index pairs of a small group."""
    n = len(t)
    return [(i, j) for i in range(n) for j in range(n)]


def test_gradcheck_image_window_flow_and_point_actions():
    gen = torch.Generator().manual_seed(0)
    rot = Rotation([30.0]).transforms()
    x = torch.rand(2, 1, 6, 6, generator=gen, dtype=torch.float64, requires_grad=True)
    # no clipping inside the check: clip has a kink at 0 and 1
    assert torch.autograd.gradcheck(lambda v: warp_images(v, rot, clip=False), (x,))
    ctx = torch.rand(1, 1, 10, 10, generator=gen, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda v: warp_window(v, rot, (6, 6), clip=False), (ctx,))
    f = torch.randn(2, 2, 6, 6, generator=gen, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda v: transform_flow(v, rot), (f,))
    p = torch.randn(2, 5, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda v: transform_points(v, SO3Grid(3).transforms()), (p,))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_images_flow_and_frames_obey_the_group_law_exactly_under_d4_time_reversal(device, dtype):
    """act(g, act(h, x)) == act(g ∘ h, x), bit for bit: D4 permutes pixels of square images."""
    gen = torch.Generator().manual_seed(1)
    t = d4_time_reversal().transforms()
    img = torch.rand(2, 1, 8, 8, generator=gen).to(device=device, dtype=dtype)
    flow = torch.randn(2, 2, 8, 8, generator=gen).to(device=device, dtype=dtype)
    frames = torch.rand(2, 2, 1, 8, 8, generator=gen).to(device=device, dtype=dtype)
    for i, j in _pairs(t):
        g, h, gh = t[[i] * 2], t[[j] * 2], t[[i] * 2].compose(t[[j] * 2])
        for kind, x in (("image", img), ("flow", flow), ("frames", frames)):
            k = get_kind(kind)
            twice = k.act(k.act(x, h, layout="paired"), g, layout="paired")
            assert torch.equal(twice, k.act(x, gh, layout="paired")), (kind, i, j)
            assert twice.dtype == dtype and twice.device.type == device


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_points_and_boxes_obey_the_group_law(device, dtype):
    gen = torch.Generator().manual_seed(2)
    t = Octahedral().transforms()
    pts = torch.randn(1, 7, 3, generator=gen).to(device=device, dtype=dtype)
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    for i, j in _pairs(t)[::7]:
        g, h, gh = t[[i]], t[[j]], t[[i]].compose(t[[j]])
        twice = transform_points(transform_points(pts, h, layout="paired"), g, layout="paired")
        torch.testing.assert_close(twice, transform_points(pts, gh, layout="paired"), atol=tol, rtol=0)
    # boxes under integer shifts: the corners move exactly, clipping happens in the frame
    boxes = Boxes(torch.tensor([[[2.0, 3.0, 6.0, 7.0]]], dtype=dtype, device=device),
                  torch.tensor([[1]], device=device), torch.tensor([[True]], device=device))
    sh = Translation([3], [-2]).transforms()
    moved = get_kind("boxes").act(boxes, sh, image_size=(8, 8))
    assert moved.xyxy.tolist() == [[[[5.0, 1.0, 8.0, 5.0]]]]  # x1 = 9 clipped to the 8-pixel frame
    assert moved.valid.tolist() == [[[True]]] and moved.xyxy.dtype == dtype
    gone = get_kind("boxes").act(boxes, Translation([20], [0]).transforms(), image_size=(8, 8))
    assert gone.valid.tolist() == [[[False]]]  # moved out of view: no longer a target


@pytest.mark.parametrize("device", DEVICES)
def test_points_equal_a_plain_loop_with_and_without_shifts(device):
    """transform_points against a loop over elements and points (``p -> L p + t``, float64),
    for pure rotations (where the zero shift is not added) and for elements with shifts; pure
    rotations also bit for bit the former ``einsum + shift`` with the zero shift added."""
    gen = torch.Generator().manual_seed(5)
    pts = torch.randn(3, 11, 3, generator=gen).to(device)
    rot = SO3Grid(7).transforms()
    lin = rot.linear
    shifted = Transforms.create(linear=lin, shift=np.random.default_rng(5).normal(size=(len(lin), 3)), dim=3)
    planar = Translation([3, -1], [2, 5]).transforms()  # planar shifts embed as (tx, ty, 0)
    for t in (rot, shifted, planar):
        lin3, shift3 = t.embedded(3)
        p64 = pts.double().cpu().numpy()
        want = np.empty((len(t), *p64.shape))
        for k in range(len(t)):
            for b in range(p64.shape[0]):
                for n in range(p64.shape[1]):
                    want[k, b, n] = lin3[k] @ p64[b, n] + shift3[k]
        got = transform_points(pts, t)
        assert got.shape == want.shape and got.dtype == torch.float32
        np.testing.assert_allclose(got.cpu().numpy(), want, atol=1e-5, rtol=0)
        n = min(len(t), len(pts))  # paired: sample b under element b
        paired = transform_points(pts[:n], t[:n], layout="paired")
        np.testing.assert_allclose(paired.cpu().numpy(), want[np.arange(n), np.arange(n)], atol=1e-5, rtol=0)
    old = torch.einsum("kij,bnj->kbni", torch.as_tensor(lin, dtype=torch.float32, device=device), pts) \
        + torch.zeros(len(lin), 3, device=device)[:, None, None, :]
    assert torch.equal(transform_points(pts, rot), old)


@pytest.mark.parametrize("device", DEVICES)
def test_window_equals_warp_then_centre_crop(device):
    gen = torch.Generator().manual_seed(3)
    ctx = torch.rand(3, 2, 20, 20, generator=gen).to(device)
    t = Rotation([0.0, 17.0, 90.0]).transforms().compose(Translation([2], [-1]).transforms()[[0, 0, 0]])
    full = warp_images(ctx, t)
    view = warp_window(ctx, t, (10, 10))
    torch.testing.assert_close(view, full[..., 5:15, 5:15], atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="even"):
        warp_window(ctx, t, (9, 10))


def test_d4_on_images_is_torch_rot90_and_flip():
    x = torch.arange(16.0).reshape(1, 1, 4, 4) / 16
    t = D4().transforms()
    out = warp_images(x, t)[:, 0, 0]
    ref = {0: x, 2: torch.rot90(x, 1, (-2, -1)), 4: torch.rot90(x, 2, (-2, -1)), 6: torch.rot90(x, 3, (-2, -1)),
           3: torch.flip(x, (-1,)), 7: torch.flip(x, (-2,)), 5: x.transpose(-1, -2),
           1: torch.rot90(x, 2, (-2, -1)).transpose(-1, -2)}
    for k, r in ref.items():
        assert torch.equal(out[k], r[0, 0]), D4.NAMES[k]
    assert np.allclose(t.linear[2], [[0, 1], [-1, 0]])  # rot90 counter-clockwise as displayed (y down)


def _shifted_reference(ctx: np.ndarray, tx: float, ty: float, view: tuple[int, int], padding: str) -> np.ndarray:
    """Plain loop over output pixels, from the convention (content moves by +t; the view is the
    centre of the context): view pixel (i, j) shows context pixel (i + (Hc - h)/2 - ty, j + (Wc - w)/2 - tx),
    zero (``zeros``) or the nearest edge pixel (``border``) outside the context."""
    c, hc, wc = ctx.shape
    h, w = view
    out = np.zeros((c, h, w), ctx.dtype)
    for i in range(h):
        for j in range(w):
            r, q = int(i + (hc - h) // 2 - ty), int(j + (wc - w) // 2 - tx)
            if padding == "border":
                r, q = min(max(r, 0), hc - 1), min(max(q, 0), wc - 1)
            if 0 <= r < hc and 0 <= q < wc:
                out[:, i, j] = ctx[:, r, q]
    return out


@pytest.mark.parametrize("padding", ["zeros", "border"])
def test_whole_pixel_shifts_of_a_window_and_an_image_are_exact_crops(padding):
    """Integer shifts (NERO's window orbit) are cut as crops: equal, bit for bit, to a plain loop
    over pixels, inside the context and partly outside it (zero fill), in both layouts. A border
    fill outside the context stays grid_sample's (equal to the loop within float32 rounding)."""
    gen = torch.Generator().manual_seed(4)
    ctx = torch.rand(2, 3, 16, 20, generator=gen)
    t = Translation([0, 3, -3, 5, -6, 9], [0, -2, 4, -3]).transforms()  # 24 shifts, some leave the context
    pairs = torch.arange(len(t)) % 2  # the paired layout: element k acts on sample k % 2
    for view in ((8, 10), (16, 20)):  # a window over context, and the whole image (warp_images)
        if view == (16, 20):
            orbit = warp_images(ctx, t, padding=padding)
            paired = warp_images(ctx[pairs], t, layout="paired", padding=padding)
        else:
            orbit = warp_window(ctx, t, view, padding=padding)
            paired = warp_window(ctx[pairs], t, view, layout="paired", padding=padding)
        for k, (tx, ty) in enumerate(np.asarray(t.shift).tolist()):
            for b in range(2):
                want = _shifted_reference(ctx[b].numpy(), tx, ty, view, padding)
                got = [orbit[k, b].numpy()] + ([paired[k].numpy()] if b == k % 2 else [])
                inside = np.array_equal(want, _shifted_reference(ctx[b].numpy(), tx, ty, view, "zeros"))
                for g in got:
                    if padding == "zeros" or inside:
                        assert np.array_equal(g, want), (view, tx, ty, b)
                    else:
                        np.testing.assert_allclose(g, want, atol=1e-5)


def test_flow_rows_in_runs_of_one_element_equal_numpy_d4_per_row():
    """Issue 35: a paired flow action over element-major rows (each element's rows one run) warps
    once per run; bit for bit NERO's 16 fields per row (seeds.md: numpy rot90 / flips of the grid,
    the signed permutation of (u, v), negation under time reversal), and a 30° run equals the
    per-row warp."""
    gen = torch.Generator().manual_seed(3)
    t = d4_time_reversal().transforms()
    n = 3
    rows = t.repeat_interleave(n)
    flow = torch.randn(len(rows), 2, 6, 6, generator=gen)
    got = transform_flow(flow, rows, layout="paired")
    grid = [lambda a: a, lambda a: np.swapaxes(a[..., ::-1, ::-1], -1, -2), lambda a: np.rot90(a, 1, (-2, -1)),
            lambda a: a[..., :, ::-1], lambda a: np.rot90(a, 2, (-2, -1)), lambda a: np.swapaxes(a, -1, -2),
            lambda a: np.rot90(a, 3, (-2, -1)), lambda a: a[..., ::-1, :]]
    vec = [[[1, 0], [0, 1]], [[0, -1], [-1, 0]], [[0, 1], [-1, 0]], [[-1, 0], [0, 1]], [[-1, 0], [0, -1]],
           [[0, 1], [1, 0]], [[0, -1], [1, 0]], [[1, 0], [0, -1]]]
    for r in range(len(rows)):
        reversed_, d = divmod(r // n, 8)
        f = grid[d](flow[r].numpy())
        want = np.einsum("ij,jyx->iyx", np.array(vec[d], np.float32), f) * (-1 if reversed_ else 1)
        assert np.array_equal(got[r].numpy(), want.astype(np.float32)), r
    turn = Rotation([30.0, 0.0]).transforms()
    mixed = Transforms.concat([turn[[0, 0, 0]], turn[[1, 1]], rows[:4]])
    f = torch.randn(len(mixed), 2, 6, 6, generator=gen)
    one_by_one = torch.cat([transform_flow(f[[r]], mixed[[r]], layout="paired") for r in range(len(mixed))])
    assert torch.equal(transform_flow(f, mixed, layout="paired"), one_by_one)


def test_frames_of_reversed_slices_equal_numpy_d4_and_frame_swap():
    """Issue 35: a slice of elements that all reverse time swaps the B input pairs before the warp
    (not the K·B warped ones); bit for bit NERO's transformed pairs (seeds.md: numpy rot90 / flips
    of each frame, the two frames swapped under time reversal), for all-reversed, mixed and
    forward slices, in both layouts."""
    from orbitscope.kinds import transform_frames

    gen = torch.Generator().manual_seed(4)
    t = d4_time_reversal().transforms()
    x = torch.rand(3, 2, 1, 6, 6, generator=gen)
    grid = [lambda a: a, lambda a: np.swapaxes(a[..., ::-1, ::-1], -1, -2), lambda a: np.rot90(a, 1, (-2, -1)),
            lambda a: a[..., :, ::-1], lambda a: np.rot90(a, 2, (-2, -1)), lambda a: np.swapaxes(a, -1, -2),
            lambda a: np.rot90(a, 3, (-2, -1)), lambda a: a[..., ::-1, :]]

    def want(k: int, b: int) -> np.ndarray:
        reversed_, d = divmod(k, 8)
        pair = grid[d](x[b].numpy())
        return np.ascontiguousarray(pair[::-1] if reversed_ else pair)

    for ks in (range(8, 12), range(12, 16), range(6, 10), range(0, 4), range(16)):
        got = transform_frames(x, t[list(ks)], layout="orbit")
        for i, k in enumerate(ks):
            for b in range(3):
                assert np.array_equal(got[i, b].numpy(), want(k, b)), (k, b)
    for ks in ([9, 9, 9], [3, 12, 8]):
        got = transform_frames(x, t[ks], layout="paired")
        for b, k in enumerate(ks):
            assert np.array_equal(got[b].numpy(), want(k, b)), (k, b)
    assert torch.equal(x, torch.rand(3, 2, 1, 6, 6, generator=torch.Generator().manual_seed(4)))  # input untouched
