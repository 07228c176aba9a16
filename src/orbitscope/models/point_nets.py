"""Small point-cloud classifiers for NERO's point-cloud case study, sized to train on 2 CPU cores.

Convention: clouds ``(B, N, 3)`` float32, right-handed (x, y, z), normalised as NERO did
(centroid at the origin, largest norm 1) -> logits ``(B, classes)``. None of the three needs a
fixed ``N``. PointNet and DGCNN are invariant to the order of the points (up to float rounding and
exact ties); DistanceNet is with ``pairs=0``, and nearly so with its default sample of pairs.

* :class:`PointNet` (Qi et al., "PointNet: Deep Learning on Point Sets for 3D Classification and
  Segmentation", CVPR 2017): a shared per-point MLP, a global max pool, an MLP head. The input and
  feature transform networks (T-Nets) of the paper are left out: they are the paper's attempt at
  learned pose alignment, and NERO's question is exactly how a plain network reacts to rotation.
  Not rotation-invariant; trained with random rotations it becomes more so (only approximately).
* :class:`DGCNN` (Wang et al., "Dynamic Graph CNN for Learning on Point Clouds", ACM TOG 2019):
  two EdgeConv layers on k-nearest-neighbour graphs recomputed in each layer's input feature space.
  Not rotation-invariant (its first graph is, its edge features are not). Clouds larger than
  ``max_points`` (256) are first reduced to that many points by farthest-point sampling (see the
  class: a kNN graph depends on the density of the points).
* :class:`DistanceNet`: rotation- (and translation-) invariant by construction. It sees a cloud
  only through a soft histogram of its pairwise distances (the D2 shape distribution of Osada
  et al., "Shape Distributions", ACM TOG 2002) and one of the distances of its points to their
  centroid, then an MLP. The NERO score of such a model is flat over any orbit of rotations, up to
  float rounding of the rotated input (measured on the mesh shapes, trained: logits within
  9e-6 over 50 random rotations of float32 clouds, and bit-identical when the clouds are rotated
  in float64). By default the distance histogram uses a fixed sample of 65,536 pairs chosen by
  index (about 3 ms per 1,024-point cloud instead of 17 ms for all pairs, one core).

Sizes with 10 classes and the defaults, and eval-mode forward times for a batch of 32 clouds of
1,024 points measured on this project's 2-core CPU machine (2 threads; 1 thread in brackets):
PointNet 19,754 parameters, 10 ms (25 ms); DGCNN 25,994 parameters, 90 ms (120 ms), of which
farthest-point sampling to 256 points is about 50 ms (330 ms and 610 ms with ``max_points=0``);
DistanceNet 17,418 parameters, 80 ms (95 ms) (360 ms and 470 ms with all pairs).

Each model carries ``config`` (``{"arch": name, **constructor args}``) and its architecture is
registered (``"pointnet"``, ``"dgcnn"``, ``"distance-net"``) so that
:func:`orbitscope.models.build_model` / :func:`~orbitscope.models.loading.load_model` rebuild it
from a saved safetensors file once this module has been imported.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
from torch import Tensor, nn

from ..errors import DataError
from .registry import register_model

__all__ = ["PointNet", "DGCNN", "DistanceNet", "EdgeConv", "SharedMLP", "knn_indices", "farthest_point_indices",
           "pairwise_distance_features"]


def _check_cloud(points: Tensor, who: str) -> Tensor:
    if not isinstance(points, Tensor):
        raise DataError(f"{who} needs a torch tensor of clouds (B, N, 3), got {type(points).__name__}")
    if points.ndim != 3 or points.shape[-1] != 3:
        raise DataError(f"{who} needs point clouds of shape (B, N, 3), got {tuple(points.shape)}")
    if points.shape[1] < 1:
        raise DataError(f"{who} needs at least one point per cloud, got shape {tuple(points.shape)}")
    return points


def _positive(**values: int) -> None:
    for name, value in values.items():
        if int(value) < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")


def _head(cin: int, hidden: int, classes: int, dropout: float) -> nn.Sequential:
    return nn.Sequential(nn.Linear(cin, hidden, bias=False), nn.BatchNorm1d(hidden), nn.ReLU(inplace=True),
                         nn.Dropout(dropout), nn.Linear(hidden, classes))


class SharedMLP(nn.Module):
    """The same ``Linear → BatchNorm → activation`` stack applied to every point of ``(B, N, C)``
    features (a 1×1 convolution, computed as one matrix product over all ``B·N`` points, which is
    faster on a CPU than ``Conv1d``'s backward pass)."""

    def __init__(self, channels: Sequence[int], negative_slope: float = 0.0) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for cin, cout in zip(channels[:-1], channels[1:]):
            act: nn.Module = nn.LeakyReLU(negative_slope) if negative_slope else nn.ReLU(inplace=True)
            layers += [nn.Linear(int(cin), int(cout), bias=False), nn.BatchNorm1d(int(cout)), act]
        self.layers = nn.Sequential(*layers)

    def forward(self, x: Tensor) -> Tensor:
        """``x`` (B, N, C_in) -> (B, N, C_out)."""
        b, n, c = x.shape
        return self.layers(x.reshape(b * n, c)).reshape(b, n, -1)


# --------------------------------------------------------------------------- PointNet


class PointNet(nn.Module):
    """PointNet without T-Nets (Qi et al., CVPR 2017; see the module docstring).

    Per point: 1×1 convolutions ``3 → w → 2w → 4w`` (each with BatchNorm and ReLU, ``w = width``),
    then the max over points (the symmetric function that makes it order-invariant), then a head
    ``4w → 2w → classes`` (BatchNorm, ReLU, dropout). With the default ``width=32`` that is
    3 → 32 → 64 → 128, max pool, 128 → 64 → classes.

    Args:
        classes: number of classes (logits out).
        width: channels of the first per-point layer.
        dropout: dropout probability in the head (training only).
    """

    def __init__(self, classes: int, width: int = 32, dropout: float = 0.3) -> None:
        super().__init__()
        _positive(classes=classes, width=width)
        if not 0.0 <= float(dropout) < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout!r}")
        self.config: dict[str, Any] = {"arch": "pointnet", "classes": int(classes), "width": int(width),
                                       "dropout": float(dropout)}
        w = int(width)
        self.features = SharedMLP((3, w, 2 * w, 4 * w))
        self.head = _head(4 * w, 2 * w, int(classes), float(dropout))

    def global_feature(self, points: Tensor) -> Tensor:
        """The max-pooled global feature ``(B, 4 * width)`` of clouds ``(B, N, 3)``."""
        return self.features(_check_cloud(points, "PointNet")).amax(dim=1)

    def forward(self, points: Tensor) -> Tensor:
        return self.head(self.global_feature(points))


# --------------------------------------------------------------------------- DGCNN


def knn_indices(features: Tensor, k: int) -> Tensor:
    """Indices ``(B, N, k)`` of the ``k`` nearest neighbours of every point (itself included, at
    distance 0) in ``features`` ``(B, N, C)``, by squared Euclidean distance (in no set order).

    The ``N × N`` distance matrices are made and searched a few clouds at a time (about 2^20
    entries), which keeps them in cache (about 35 % faster than all at once at N = 1,024) and makes
    each cloud's neighbours independent of the batch it is in."""
    b, n, _ = features.shape
    step = max(1, (1 << 20) // max(n * n, 1))
    out = []
    with torch.no_grad():
        for s in range(0, b, step):
            f = features[s:s + step].detach()
            sq = (f * f).sum(-1)  # (b, N)
            # -|x_i - x_j|^2 = 2 x_i.x_j - |x_i|^2 - |x_j|^2; the largest are the nearest
            neg = torch.baddbmm(-sq.unsqueeze(2) - sq.unsqueeze(1), f, f.transpose(1, 2), alpha=2.0)
            out.append(neg.topk(k, dim=-1, sorted=False).indices)
    return out[0] if len(out) == 1 else torch.cat(out)


class EdgeConv(nn.Module):
    """One EdgeConv layer (Wang et al., TOG 2019) with a linear edge function and max aggregation:
    ``h_i = LeakyReLU(BN(max_j W [x_i, x_j - x_i]))`` over the ``k`` nearest neighbours ``j`` of
    ``i`` in the layer's input features (the point itself included).

    Two exact rearrangements make it cheap on a CPU:

    * ``W [x_i, x_j - x_i] = (W_a - W_b) x_i + W_b x_j``: both terms are computed once per point
      and only the second is gathered per edge, so no ``(B, N, k, 2C)`` edge tensor is built;
      the first does not depend on ``j`` and comes out of the max.
    * The max over neighbours is taken without autograd; when gradients are needed, only the
      winning neighbour of each point and channel is gathered again with them: the same values and
      (sub)gradients as a differentiable max over the ``(B, N, k, cout)`` gathered values (at a
      tie, one winner takes the whole gradient), with a backward pass ``k`` times smaller.
    * BatchNorm and LeakyReLU are applied per point after the max over neighbours, not per edge
      before it. Both are increasing per channel whenever BN's scale is positive, and then the two
      orders give the same function (up to BN's batch statistics, taken here over points rather
      than edges); it saves BN's forward and backward passes over ``k`` times more values (about
      3× faster training at ``k = 16``).
    """

    def __init__(self, cin: int, cout: int, k: int) -> None:
        super().__init__()
        self.k = int(k)
        self.linear = nn.Linear(2 * cin, cout, bias=False)  # acts on [x_i, x_j - x_i]
        self.bn = nn.BatchNorm1d(cout)
        self.act = nn.LeakyReLU(0.2)

    def forward(self, x: Tensor) -> Tensor:
        """``x`` (B, N, C) -> (B, N, cout)."""
        b, n, c = x.shape
        k = min(self.k, n)
        idx = knn_indices(x, k)  # (B, N, k)
        w_centre, w_edge = self.linear.weight[:, :c], self.linear.weight[:, c:]
        centre = x @ (w_centre - w_edge).T  # (B, N, cout)
        neigh = x @ w_edge.T  # (B, N, cout)
        cout = neigh.shape[-1]
        rows = (idx + torch.arange(b, device=x.device).view(b, 1, 1) * n).reshape(-1)  # into (B·N, cout)
        with torch.no_grad():
            cand = neigh.detach().reshape(b * n, cout)[rows].reshape(b, n, k, cout)  # x_j's term per edge
            best = cand.amax(dim=2)  # (B, N, cout)
        if torch.is_grad_enabled() and neigh.requires_grad:
            with torch.no_grad():  # which neighbour wins, per point and channel (the last one of ties)
                order = torch.arange(k, device=x.device, dtype=torch.uint8 if k < 256 else torch.int64)
                win = ((cand == best.unsqueeze(2)) * order.view(1, 1, k, 1)).amax(dim=2).long()
                del cand
            best = neigh.gather(1, idx.gather(2, win))  # the winners again, with a (B, N, cout) backward
        agg = centre + best  # (B, N, cout)
        return self.act(self.bn(agg.reshape(b * n, -1))).reshape(b, n, -1)


def farthest_point_indices(points: Tensor, m: int, start: Tensor | None = None) -> Tensor:
    """Indices ``(B, m)`` of ``m`` points of each cloud ``(B, N, 3)`` picked by farthest-point
    sampling (as in PointNet++, Qi et al., NeurIPS 2017): each next point is the one farthest from
    those picked so far. It starts at ``start`` ``(B,)`` (indices), or by default at the point
    farthest from the cloud's centroid, so that the subset depends on the geometry alone: the
    same points (as a set) whatever their order, and the same points of a rotated or shifted
    cloud (ties and float rounding aside). ``m >= N`` gives all indices in order."""
    b, n, _ = points.shape
    if m >= n:
        return torch.arange(n, device=points.device).expand(b, n)
    with torch.no_grad():
        p = points.detach()
        rows = torch.arange(b, device=p.device)
        if start is None:
            far = (p - p.mean(dim=1, keepdim=True)).square().sum(-1).argmax(dim=1)
        else:
            far = start.to(device=p.device, dtype=torch.int64).reshape(b)
        coords = [c.contiguous() for c in p.unbind(-1)]  # x, y, z as (B, N): contiguous updates
        picked = torch.empty(b, m, dtype=torch.int64, device=p.device)
        nearest = torch.full((b, n), float("inf"), dtype=p.dtype, device=p.device)
        for i in range(m):
            picked[:, i] = far
            q = p[rows, far]  # (B, 3)
            d = (coords[0] - q[:, 0:1]).square_()
            d += (coords[1] - q[:, 1:2]).square_()
            d += (coords[2] - q[:, 2:3]).square_()
            torch.minimum(nearest, d, out=nearest)
            far = nearest.argmax(dim=1)
    return picked


class DGCNN(nn.Module):
    """A small dynamic-graph CNN (Wang et al., "Dynamic Graph CNN for Learning on Point Clouds",
    ACM TOG 2019).

    Two :class:`EdgeConv` layers (``3 → w`` on the kNN graph of the coordinates, ``w → 2w`` on the
    kNN graph of the first layer's features: the graph is recomputed per layer), their outputs
    concatenated (``3w``), a per-point 1×1 convolution to ``emb`` channels, a global max pool and a
    head ``emb → 64 → classes``. With ``k`` larger than the number of points, all points are
    neighbours.

    Unlike the paper, a cloud of more than ``max_points`` points is first reduced to
    ``max_points`` of them by :func:`farthest_point_sampling <farthest_point_indices>` (from the
    point farthest from the centroid). A kNN graph depends on the density of the points (its
    neighbourhoods shrink as points are added), so a DGCNN trained on clouds of one size fails on
    another (measured: trained on 256 random points with random rotations, 96 % accurate on 256
    points, 34 % on 1,024); the reduction gives it clouds of one size and an even density,
    whatever it is given, and makes it cheap on 1,024-point clouds (the ``N × N`` kNN searches are
    its main cost). ``max_points=0`` turns this off.

    Args:
        classes: number of classes (logits out).
        k: neighbours per point (the point itself included).
        width: channels of the first EdgeConv (the second has twice that).
        emb: channels of the global feature.
        dropout: dropout probability in the head (training only).
        max_points: larger clouds are reduced to this many points first (0: never).
    """

    def __init__(self, classes: int, k: int = 16, width: int = 32, emb: int = 128, dropout: float = 0.3,
                 max_points: int = 256) -> None:
        super().__init__()
        _positive(classes=classes, k=k, width=width, emb=emb)
        if not 0.0 <= float(dropout) < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout!r}")
        if isinstance(max_points, bool) or int(max_points) < 0:
            raise ValueError(f"max_points must be a non-negative integer (0: all points), got {max_points!r}")
        self.config: dict[str, Any] = {"arch": "dgcnn", "classes": int(classes), "k": int(k), "width": int(width),
                                       "emb": int(emb), "dropout": float(dropout), "max_points": int(max_points)}
        w = int(width)
        self.max_points = int(max_points)
        self.edge1 = EdgeConv(3, w, int(k))
        self.edge2 = EdgeConv(w, 2 * w, int(k))
        self.embed = SharedMLP((3 * w, int(emb)), negative_slope=0.2)
        self.head = _head(int(emb), 64, int(classes), float(dropout))

    def reduce(self, points: Tensor) -> Tensor:
        """``points`` reduced to ``max_points`` by farthest-point sampling (as is when not larger)."""
        x = _check_cloud(points, "DGCNN")
        if not 0 < self.max_points < x.shape[1]:
            return x
        idx = farthest_point_indices(x, self.max_points)
        return x.gather(1, idx.unsqueeze(2).expand(-1, -1, 3))

    def global_feature(self, points: Tensor) -> Tensor:
        """The max-pooled global feature ``(B, emb)`` of clouds ``(B, N, 3)``."""
        x = self.reduce(points)
        f1 = self.edge1(x)
        f2 = self.edge2(f1)
        return self.embed(torch.cat([f1, f2], dim=2)).amax(dim=1)

    def forward(self, points: Tensor) -> Tensor:
        return self.head(self.global_feature(points))


# --------------------------------------------------------------------------- DistanceNet


def _linear_histogram(values: Tensor, bins: int, top: float) -> Tensor:
    """Counts ``(B, bins)`` of ``values`` (B, M) with linear (triangular) binning on ``bins``
    centres evenly spaced on [0, top]: each value splits its unit weight between its two nearest
    centres in proportion to closeness (values beyond ``top`` go to the last centre). A continuous,
    piecewise-linear function of each value, so a tiny change of a value changes it only a little.
    ``values`` is overwritten (it is scaled in place)."""
    b = values.shape[0]
    if bins == 1:
        return torch.full((b, 1), float(values.shape[1]), dtype=values.dtype, device=values.device)
    pos = values.mul_((bins - 1) / top).clamp_(0.0, bins - 1.0)
    lo = pos.to(torch.int64).clamp_(max=bins - 2)  # truncation is floor here: pos >= 0
    frac = pos.sub_(lo)  # in [0, 1]
    flat = (lo + (torch.arange(b, device=values.device) * bins).unsqueeze(1)).reshape(-1)
    count = torch.bincount(flat, minlength=b * bins).to(values.dtype).reshape(b, bins)
    upper = torch.zeros(b * bins, dtype=values.dtype, device=values.device)
    upper = upper.index_add_(0, flat, frac.reshape(-1)).reshape(b, bins)  # weight moved to the next centre
    out = count - upper
    out[:, 1:] += upper[:, :-1]
    return out


_PAIR_INDEX: dict[tuple[int, int, str], Tensor] = {}


def _pair_index(n: int, pairs: int, device: torch.device) -> Tensor:
    """Flat indices ``i * n + j`` of pairs ``i < j`` of an ``n × n`` matrix: all of them (in row
    order) when ``pairs`` is 0 or at least ``n (n - 1) / 2``, else a fixed sample of ``pairs`` of
    them (sorted), drawn by a generator seeded with ``n`` alone; cached per size."""
    total = n * (n - 1) // 2
    pairs = 0 if pairs >= total else pairs
    key = (n, pairs, str(device))
    if key not in _PAIR_INDEX:
        if len(_PAIR_INDEX) > 16:
            _PAIR_INDEX.clear()
        iu = torch.triu_indices(n, n, 1)
        flat = iu[0] * n + iu[1]
        if pairs:
            pick = torch.randperm(total, generator=torch.Generator().manual_seed(n))[:pairs]
            flat = flat[pick.sort().values]
        _PAIR_INDEX[key] = flat.to(device)
    return _PAIR_INDEX[key]


def pairwise_distance_features(points: Tensor, bins: int = 32, radius: float = 1.0, pairs: int = 0,
                               chunk: int = 8) -> Tensor:
    """Rotation- and translation-invariant features ``(B, 2 * bins)`` float64 of clouds ``(B, N, 3)``.

    The first ``bins`` are the D2 shape distribution (Osada et al., ACM TOG 2002): a linearly
    binned histogram of the distances of pairs of distinct points, on ``bins`` centres over
    ``[0, 2 radius]``, as a density (mean 1 per bin). The last ``bins`` bin the distances of the
    points to their centroid on ``[0, radius]`` likewise.

    ``pairs=0`` uses all ``N (N - 1) / 2`` pairs: then the order of the points does not matter
    either. ``pairs > 0`` uses a fixed sample of that many pairs *of indices* (the same ``(i, j)``
    for every cloud of ``N`` points), so rotation invariance stays exact while the cost drops; the
    features then depend on the order of the points a little (another sample of pairs).

    Computed in float64 (distances from coordinate differences, not from the Gram matrix) in
    chunks of ``chunk`` clouds, so the features of a rotated cloud match to about float32's rounding
    of the rotated coordinates. Cost per cloud of 1,024 points on one CPU core: about 10 ms with
    all 523,776 pairs, about 1.5 ms with 65,536.
    """
    _check_cloud(points, "pairwise_distance_features")
    _positive(bins=bins, chunk=chunk)
    if isinstance(pairs, bool) or int(pairs) < 0:
        raise ValueError(f"pairs must be a non-negative integer (0: all pairs), got {pairs!r}")
    if not float(radius) > 0:
        raise ValueError(f"radius must be positive, got {radius!r}")
    x = points.detach().to(torch.float64)
    b, n = x.shape[:2]
    if n < 2:
        raise DataError(f"pairwise distances need at least 2 points per cloud, got {n}")
    flat = _pair_index(n, int(pairs), x.device)
    sampled = len(flat) < n * (n - 1) // 2
    first, second = flat // n, flat % n
    out = []
    for s in range(0, b, int(chunk)):
        c = x[s:s + int(chunk)]
        if sampled:
            d = (c[:, first] - c[:, second]).norm(dim=2)
        else:
            d = torch.cdist(c, c, compute_mode="donot_use_mm_for_euclid_dist").reshape(len(c), -1)[:, flat]
        hist = _linear_histogram(d, bins, 2.0 * radius) / len(flat)
        cent = (c - c.mean(dim=1, keepdim=True)).norm(dim=2)
        radial = _linear_histogram(cent, bins, float(radius)) / n
        out.append(torch.cat([hist, radial], dim=1) * bins)
    return torch.cat(out, dim=0)


class DistanceNet(nn.Module):
    """A classifier that is rotation-invariant by construction: an MLP on
    :func:`pairwise_distance_features` (the D2 shape distribution of Osada et al., ACM TOG 2002,
    and a histogram of distances to the centroid). The features have no parameters and depend on
    the cloud only through its pairwise distances (the centroid distances are functions of them
    too), so any rotation (and translation) leaves the logits unchanged up to the float rounding of
    the rotated input. With ``pairs=0`` (all pairs) the order of the points does not matter
    either; the default samples a fixed set of 65,536 index pairs (an eighth of the pairs of a
    1,024-point cloud, and all of them up to 362 points), about 6× cheaper (about 3 ms per cloud of
    1,024 points on one core) and just as invariant to rotations, since the pairs are chosen by
    index, not by position.

    Args:
        classes: number of classes (logits out).
        bins: bins of each of the two histograms (the MLP sees ``2 * bins`` inputs).
        radius: expected largest distance from the origin (1 for NERO-normalised clouds).
        pairs: pairs of points in the distance histogram (0: all; see
            :func:`pairwise_distance_features`).
        hidden: width of the MLP's two hidden layers (``hidden`` and ``hidden // 2``).
        dropout: dropout probability before the last layer (training only).
    """

    def __init__(self, classes: int, bins: int = 32, radius: float = 1.0, hidden: int = 128,
                 dropout: float = 0.2, pairs: int = 65536) -> None:
        super().__init__()
        _positive(classes=classes, bins=bins, hidden=hidden)
        if not float(radius) > 0:
            raise ValueError(f"radius must be positive, got {radius!r}")
        if not 0.0 <= float(dropout) < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout!r}")
        if isinstance(pairs, bool) or int(pairs) < 0:
            raise ValueError(f"pairs must be a non-negative integer (0: all pairs), got {pairs!r}")
        self.config: dict[str, Any] = {"arch": "distance-net", "classes": int(classes), "bins": int(bins),
                                       "radius": float(radius), "hidden": int(hidden), "dropout": float(dropout),
                                       "pairs": int(pairs)}
        self.pairs = int(pairs)
        self.bins, self.radius = int(bins), float(radius)
        h = int(hidden)
        self.mlp = nn.Sequential(nn.Linear(2 * self.bins, h, bias=False), nn.BatchNorm1d(h), nn.ReLU(inplace=True),
                                 _head(h, max(h // 2, 1), int(classes), float(dropout)))

    def features(self, points: Tensor) -> Tensor:
        """The invariant features ``(B, 2 * bins)`` (float32) of clouds ``(B, N, 3)``."""
        return pairwise_distance_features(points, self.bins, self.radius, self.pairs).to(torch.float32)

    def classify(self, features: Tensor) -> Tensor:
        """Logits ``(B, classes)`` from precomputed :meth:`features`."""
        return self.mlp(features.to(self.mlp[0].weight.dtype))

    def forward(self, points: Tensor) -> Tensor:
        x = _check_cloud(points, "DistanceNet")
        return self.classify(self.features(x).to(x.device))


register_model("pointnet", PointNet)
register_model("dgcnn", DGCNN)
register_model("distance-net", DistanceNet)
