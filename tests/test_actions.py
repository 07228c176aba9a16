"""Actions on every data kind: exactness, composition, agreement with scipy and between kinds."""

import numpy as np
import pytest
import torch
from scipy import ndimage

from orbitscope.kinds import (
    act,
    list_kinds,
    rotate_images,
    transform_boxes,
    transform_flow,
    transform_frames,
    transform_keypoints,
    transform_points,
    warp_images,
)
from orbitscope.group import (
    Brightness,
    Contrast,
    Rotation,
    Rotation3D,
    Scale,
    Transforms,
    Translation,
    quaternion_to_matrix,
    rotation_matrix,
)

GEN = torch.Generator().manual_seed(0)


def smooth_images(b=3, c=2, h=32, w=32) -> torch.Tensor:
    """Smooth images vanishing near the border (so interpolation/padding effects stay small)."""
    x = torch.rand(b, c, h, w, generator=torch.Generator().manual_seed(b * 100 + c))
    x = torch.tensor(ndimage.gaussian_filter(x.numpy(), sigma=(0, 0, 2, 2)))
    yy, xx = torch.meshgrid(torch.arange(h) + 0.5 - h / 2, torch.arange(w) + 0.5 - w / 2, indexing="ij")
    window = torch.exp(-(((xx**2 + yy**2) / (0.3 * min(h, w)) ** 2) ** 2))  # smooth fall-off to 0
    return (x * window).clamp(0, 1)


def test_quarter_rotations_are_exact_and_match_rot90():
    x = torch.rand(4, 3, 9, 9, generator=GEN)
    out = warp_images(x, Rotation([0, 90, 180, 270, 360, -90]).transforms())
    for i, k in enumerate([0, 1, 2, 3, 0, 3]):
        assert torch.equal(out[i], torch.rot90(x, k, dims=(-2, -1))), k
    even = torch.rand(2, 1, 8, 8, generator=GEN)
    assert torch.equal(warp_images(even, Rotation([90]).transforms())[0], torch.rot90(even, 1, dims=(-2, -1)))


def test_mirror_and_integer_shift_are_exact():
    x = torch.rand(2, 1, 7, 10, generator=GEN)
    mirror = Transforms.create(1, linear=np.diag([-1.0, 1.0]))
    assert torch.equal(warp_images(x, mirror)[0], torch.flip(x, dims=(-1,)))
    out = warp_images(x, Translation([2.0], [-1.0]).transforms())[0]
    ref = torch.zeros_like(x)
    ref[..., 0:6, 2:10] = x[..., 1:7, 0:8]  # content moves right by 2 and up by 1
    assert torch.equal(out, ref)


@pytest.mark.parametrize("angle", [5.0, 33.0, -71.0, 135.0])
def test_rotation_matches_scipy(angle):
    x = smooth_images(b=2, c=1)
    ours = rotate_images(x, torch.tensor([angle, angle]))
    ref = np.stack([ndimage.rotate(img[0], angle, reshape=False, order=1, mode="constant") for img in x.numpy()])
    np.testing.assert_allclose(ours[:, 0].numpy(), ref, atol=2e-3)


def test_scale_and_shift_match_scipy_affine_transform():
    x = smooth_images(b=1, c=1)
    img = x[0, 0].numpy().astype(np.float64)
    h, w = img.shape
    centre = np.array([h / 2 - 0.5, w / 2 - 0.5])  # (row, col) of the centre in index coords
    for s, (tx, ty) in [(1.25, (0.0, 0.0)), (0.8, (1.5, -2.25))]:
        t = Scale([s]).transforms()
        t = Translation([tx], [ty]).transforms().compose(t)
        ours = warp_images(x, t)[0, 0, 0].numpy()
        # output (r, c) samples input at centre + ((r, c) - centre - (ty, tx)) / s
        offset = centre - (centre + np.array([ty, tx])) / s
        ref = ndimage.affine_transform(img, np.eye(2) / s, offset=offset, order=1, mode="constant")
        np.testing.assert_allclose(ours, ref, atol=2e-3)


def test_composition_law_on_images():
    x = smooth_images()
    g = Rotation([23.0]).transforms().compose(Scale([0.9]).transforms())
    h = Rotation([-61.0]).transforms().compose(Translation([1.0], [2.0]).transforms())
    twice = warp_images(warp_images(x, h)[0], g)[0]
    once = warp_images(x, g.compose(h))[0]
    wrong_order = warp_images(x, h.compose(g))[0]
    err = (twice - once).abs().mean()
    # double bilinear resampling blurs a little; the wrong composition order is far off
    assert err < 0.01 and err < 0.4 * (twice - wrong_order).abs().mean()
    # exact for the exact subgroup
    r = Rotation([90.0]).transforms()
    assert torch.equal(warp_images(warp_images(x, r)[0], r)[0], warp_images(x, r.compose(r))[0])
    # inverse brings the image back (interior)
    back = warp_images(warp_images(x, g)[0], g.inverse())[0]
    assert (back - x).abs().mean() < 0.01


def test_orbit_layout_equals_paired_layout():
    x = smooth_images(b=2)
    t = Rotation([0, 10, 90, 200]).transforms()
    orbit = warp_images(x, t)
    for k in range(len(t)):
        paired = warp_images(x, t[[k] * 2], layout="paired")
        assert torch.allclose(orbit[k], paired, atol=1e-6)
    with pytest.raises(ValueError, match="one element per sample"):
        warp_images(x, t, layout="paired")


def test_photometric_actions():
    x = torch.rand(2, 3, 5, 5, generator=GEN)
    out = warp_images(x, Brightness([0.5, 1.5]).transforms())
    assert torch.allclose(out[0], x * 0.5) and torch.allclose(out[1], (x * 1.5).clamp(0, 1))
    c = warp_images(x, Contrast([0.5]).transforms())[0]
    mean = x.mean(dim=(1, 2, 3), keepdim=True)
    assert torch.allclose(c, mean + 0.5 * (x - mean), atol=1e-6)
    # group law without clipping
    g, h = Contrast([1.7]).transforms(), Brightness([0.6]).transforms()
    two = warp_images(warp_images(x, h, clip=False)[0], g, clip=False)[0]
    one = warp_images(x, g.compose(h), clip=False)[0]
    assert torch.allclose(two, one, atol=1e-6)


def test_image_and_keypoint_actions_agree():
    """A bright blob moves to where the keypoint action sends its centre."""
    h, w = 40, 48
    yy, xx = torch.meshgrid(torch.arange(h) + 0.5, torch.arange(w) + 0.5, indexing="ij")
    p = torch.tensor([30.0, 12.0])  # (x, y) in pixels
    blob = torch.exp(-((xx - p[0]) ** 2 + (yy - p[1]) ** 2) / (2 * 1.5**2))[None, None]
    t = Transforms.concat([
        Rotation([37.0]).transforms(), Scale([1.2]).transforms(), Translation([-5.0], [3.0]).transforms(),
        Rotation([90.0]).transforms(),
    ])
    warped = warp_images(blob, t)[:, 0, 0]
    moved = transform_keypoints(p.reshape(1, 1, 2), t, (h, w))[:, 0, 0]
    for k in range(len(t)):
        m = warped[k]
        centroid = torch.stack([(m * xx).sum() / m.sum(), (m * yy).sum() / m.sum()])
        assert torch.allclose(centroid, moved[k], atol=0.05), (k, centroid, moved[k])


def test_boxes_follow_image_content():
    h, w = 32, 32
    img = torch.zeros(1, 1, h, w)
    img[..., 8:14, 18:28] = 1.0  # box x in [18, 28), y in [8, 14)
    box = torch.tensor([[[18.0, 8.0, 28.0, 14.0]]])
    t = Rotation([90.0, 180.0]).transforms()
    for k, warped in enumerate(warp_images(img, t)[:, 0, 0]):
        rows, cols = torch.nonzero(warped > 0.5, as_tuple=True)
        exact = torch.tensor([cols.min(), rows.min(), cols.max() + 1, rows.max() + 1], dtype=torch.float32)
        assert torch.equal(transform_boxes(box, t, (h, w))[k, 0, 0], exact)
    # a rotated box's bounding box contains the rotated content
    r = Rotation([30.0]).transforms()
    rb = transform_boxes(box, r, (h, w))[0, 0, 0]
    rows, cols = torch.nonzero(warp_images(img, r)[0, 0, 0] > 0.5, as_tuple=True)
    # compare pixel centres (index + 0.5) of the resampled content with the continuous box
    assert rb[0] <= cols.min() + 0.5 and rb[1] <= rows.min() + 0.5
    assert rb[2] >= cols.max() + 0.5 and rb[3] >= rows.max() + 0.5


def _gradient_field(img: torch.Tensor) -> torch.Tensor:
    """Central-difference gradient (d/dx, d/dy) of (B, 1, H, W) -> (B, 2, H, W)."""
    gx = torch.zeros_like(img)
    gy = torch.zeros_like(img)
    gx[..., :, 1:-1] = (img[..., :, 2:] - img[..., :, :-2]) / 2
    gy[..., 1:-1, :] = (img[..., 2:, :] - img[..., :-2, :]) / 2
    return torch.cat([gx, gy], 1)


def test_flow_action_matches_image_action_for_gradients():
    """∇(g·I) = g·∇I: the image warp and the vector rotation of flow fields agree (exact for D4)."""
    img = torch.rand(2, 1, 12, 12, generator=GEN, dtype=torch.float64)
    mirror = Transforms.create(1, linear=np.diag([-1.0, 1.0]))
    vflip = Transforms.create(1, linear=np.diag([1.0, -1.0]))
    t = Transforms.concat([Rotation([90.0, 180.0, 270.0]).transforms(), mirror, vflip])
    lhs = _gradient_field(warp_images(img, t, clip=False).reshape(-1, 1, 12, 12)).reshape(len(t), 2, 2, 12, 12)
    rhs = transform_flow(_gradient_field(img), t)
    inner = (..., slice(1, -1), slice(1, -1))
    assert torch.allclose(lhs[inner], rhs[inner], atol=1e-12)
    # NERO's convention: a horizontal flip negates u, a vertical flip negates v
    f = torch.rand(1, 2, 6, 6, generator=GEN)
    assert torch.equal(transform_flow(f, mirror)[0, 0, 0], -torch.flip(f[0, 0], dims=(-1,)))
    assert torch.equal(transform_flow(f, vflip)[0, 0, 1], -torch.flip(f[0, 1], dims=(-2,)))


def test_flow_rotation_of_constant_field_and_time_reversal():
    f = torch.zeros(1, 2, 16, 16)
    f[:, 0], f[:, 1] = 1.0, 0.5
    out = transform_flow(f, Rotation([30.0]).transforms())[0, 0, :, 8, 8]
    np.testing.assert_allclose(out.numpy(), rotation_matrix(30.0) @ [1.0, 0.5], atol=1e-6)
    rev = Transforms.create(1, time_reversed=True)
    assert torch.equal(transform_flow(f, rev)[0], -f)


def test_frames_time_reversal():
    fr = torch.rand(2, 3, 1, 5, 5, generator=GEN)
    t = Transforms.create(2, time_reversed=[False, True])
    out = transform_frames(fr, t)
    assert torch.equal(out[0], fr) and torch.equal(out[1], fr.flip(1))
    paired = transform_frames(fr, t, layout="paired")
    assert torch.equal(paired[0], fr[0]) and torch.equal(paired[1], fr[1].flip(0))


def test_point_clouds():
    pts = torch.randn(2, 50, 3, generator=GEN, dtype=torch.float64)
    q = np.random.default_rng(1).normal(size=(3, 4))
    t = Rotation3D(q).transforms()
    out = transform_points(pts, t)
    ref = np.einsum("kij,bnj->kbni", quaternion_to_matrix(q), pts.numpy())
    np.testing.assert_allclose(out.numpy(), ref, atol=1e-12)
    # planar rotation acts about z and leaves z unchanged
    pr = transform_points(pts, Rotation([90.0]).transforms())[0]
    assert torch.equal(pr[..., 2], pts[..., 2])
    assert torch.allclose(pr[..., :2], pts[..., :2] @ torch.tensor(rotation_matrix(90.0)).T)
    # composition law
    g, h = t[0], t[1]
    assert torch.allclose(transform_points(transform_points(pts, h)[0], g)[0], transform_points(pts, g.compose(h))[0])
    with pytest.raises(ValueError, match="3-D rotation"):
        warp_images(torch.rand(1, 1, 4, 4), t)


def test_act_dispatch_and_errors():
    assert set(list_kinds()) == {"image", "window", "frames", "label", "scores", "boxes", "keypoints", "flow", "points"}
    labels = torch.tensor([3, 1])
    # labels are invariant: the orbit layout repeats them per element (K, B), like every kind's
    # (K, B, ...) layout; the paired layout returns them unchanged
    two = Rotation([45.0, 90.0]).transforms()
    assert torch.equal(act("label", labels, two), torch.tensor([[3, 1], [3, 1]]))
    assert act("label", labels, two, layout="paired") is labels
    with pytest.raises(ValueError, match="unknown data kind"):
        act("mesh", labels, Rotation([0.0]).transforms())
    with pytest.raises(ValueError, match="B, C, H, W"):
        warp_images(torch.rand(4, 4), Rotation([0.0]).transforms())
    with pytest.raises(TypeError):
        warp_images(torch.zeros(1, 1, 4, 4, dtype=torch.uint8), Rotation([0.0]).transforms())
    with pytest.raises(ValueError, match="interpolation"):
        warp_images(torch.rand(1, 1, 4, 4), Rotation([0.0]).transforms(), interpolation="cubic")  # type: ignore[arg-type]


def test_equivariant_model_gives_flat_nero_curve():
    """f = D4-symmetric convolution then a pointwise map is exactly equivariant to D4 on square
    images, so m(f(g·x), g·f(x)) is zero at every element: a flat NERO curve (input and target
    actions agree)."""
    kernel = torch.tensor([[1.0, 2.0, 1.0], [2.0, 4.0, 2.0], [1.0, 2.0, 1.0]]).reshape(1, 1, 3, 3) / 16

    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(4 * torch.nn.functional.conv2d(x, kernel, padding=1) - 1)

    x = torch.rand(3, 1, 11, 11, generator=GEN)
    y = f(x)  # the target in the canonical frame
    mirror = Transforms.create(1, linear=np.diag([-1.0, 1.0]))
    rotations = Rotation([0.0, 90.0, 180.0, 270.0]).transforms()
    d4 = Transforms.concat([rotations, rotations.compose(Transforms.concat([mirror] * 4))])
    inputs = warp_images(x, d4)  # (8, B, 1, H, W)
    targets = warp_images(y, d4)
    curve = [(f(inputs[k]) - targets[k]).abs().max().item() for k in range(len(d4))]
    assert max(curve) < 1e-6, curve
    # the same model is not equivariant to a non-symmetric group element, so the check can fail
    r30 = Rotation([30.0]).transforms()
    assert (f(warp_images(x, r30)[0]) - warp_images(y, r30)[0]).abs().max() > 1e-3
