"""ML4ML variance-matrix features: hand-computed values, brute-force references, invariances."""

import math

import numpy as np
import pytest

from orbitscope.ml4ml.assess.features import FEATURE_NAMES, matrix_features, model_features, sensitivity
from orbitscope.ml4ml.matrices import variance_matrix

# --------------------------------------------------------------------------- brute-force references
# Written with explicit loops, independently of the vectorised implementation.


def loop_variance_matrix(S):
    N, n = S.shape
    M = np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            M[i, j] = math.sqrt(sum((S[k, i] - S[k, j]) ** 2 for k in range(N)) / N)
    return M


def pop_std(values):
    mu = sum(values) / len(values)
    return math.sqrt(sum((v - mu) ** 2 for v in values) / len(values))


def loop_features(M, threshold):
    n = len(M)
    cells = [M[i][j] for i in range(n) for j in range(n)]
    m = sum(M[i][j] for i in range(n) for j in range(n) if i != j) / (n * n - n)
    disc = 0.0
    for k in range(1, n):
        diag = [M[i][i + k] for i in range(n - k)]
        disc += (n - k) / n * pop_std(diag)
    # asymmetry by point reflection through the centre: (a, b) against (n-1-a, n-1-b)
    pairs = [abs(M[a][b] - M[n - 1 - a][n - 1 - b]) for a in range(n) for b in range(n) if a + b > n - 1]
    v, h, g = [], [], []
    v_rows, h_cols = {}, {}
    for i in range(n):
        for j in range(i, n):
            if i >= 1:
                v.append(M[i - 1][j] - M[i][j])
                v_rows.setdefault(i, []).append(v[-1])
            if j <= n - 2:
                h.append(M[i][j + 1] - M[i][j])
                h_cols.setdefault(j, []).append(h[-1])
            if i >= 1 and j <= n - 2:
                g.append(M[i - 1][j + 1] - M[i][j])

    def wstd(lines):
        s = [pop_std(x) for x in lines.values() if len(x) >= 2]
        return sum(s) / len(s) if s else 0.0

    mean = sum(cells) / len(cells)
    return {
        "mean": mean,
        "mean_sq": sum(c * c for c in cells) / len(cells),
        "std": pop_std(cells),
        "frac_above": sum(c > threshold for c in cells) / len(cells),
        "discontinuity": disc / m if m > 0 else 0.0,
        "asymmetry": (sum(pairs) / len(pairs)) / m if m > 0 else 0.0,
        # ML4ML's names: "vertical" = differences along a row (h here), "horizontal" = along a column
        "grad_v_mean": sum(h) / len(h),
        "grad_v_std": pop_std(h),
        "grad_v_wstd": wstd(h_cols),
        "grad_h_mean": sum(v) / len(v),
        "grad_h_std": pop_std(v),
        "grad_h_wstd": wstd(v_rows),
        "grad_d_mean": sum(g) / len(g),
        "grad_d_std": pop_std(g),
        "grad_overall": (sum(map(abs, v)) / len(v) + sum(map(abs, h)) / len(h) + sum(map(abs, g)) / len(g)) / 3,
    }


def random_signal(rng, N=12, n=7):
    return rng.normal(size=(N, n)).cumsum(axis=1)


# --------------------------------------------------------------------------- hand-computed values


def test_feature_names_are_the_16():
    assert len(FEATURE_NAMES) == 16 and len(set(FEATURE_NAMES)) == 16
    M = variance_matrix(np.array([[0.0, 1.0, 3.0]]))
    assert list(matrix_features(M)) == list(FEATURE_NAMES)


def test_variance_matrix_against_loops():  # the matrices the features are checked against
    S = random_signal(np.random.default_rng(1))
    M = variance_matrix(S)
    np.testing.assert_allclose(M, loop_variance_matrix(S), rtol=1e-9, atol=1e-9)
    assert np.all(np.diagonal(M) == 0) and np.array_equal(M, M.T)


def test_3x3_by_hand():
    # One image, signal s = [0, 1, 3] at levels -1, 0, +1:
    # M = [[0, 1, 3],
    #      [1, 0, 2],
    #      [3, 2, 0]]
    S = np.array([[0.0, 1.0, 3.0]])
    M = variance_matrix(S)
    np.testing.assert_array_equal(M, [[0, 1, 3], [1, 0, 2], [3, 2, 0]])
    f = matrix_features(M, signal=S, threshold=1.5)
    # one image: every subset is the whole set -> sensitivity 0
    assert f["sensitivity"] == 0.0
    # all 9 cells: sum 12, squares 1+9+1+4+9+4 = 28
    assert f["mean"] == pytest.approx(12 / 9)
    assert f["mean_sq"] == pytest.approx(28 / 9)
    assert f["std"] == pytest.approx(math.sqrt(28 / 9 - (12 / 9) ** 2))  # sqrt(12/9)
    assert f["frac_above"] == pytest.approx(4 / 9)  # 3, 2, 3, 2 > 1.5
    # m = 12 / 6 = 2; diag k=1: [1, 2] std 0.5, weight 2/3; k=2: [3] std 0 -> D = (1/3) / 2
    assert f["discontinuity"] == pytest.approx(1 / 6)
    # M' = M[::-1, :] = [[3, 2, 0], [1, 0, 2], [0, 1, 3]]
    # i>j: |1-2| = 1, |0-0| = 0, |1-2| = 1 -> mean 2/3 -> A = (2/3) / 2
    assert f["asymmetry"] == pytest.approx(1 / 3)
    # H[i,j] = M[i-1,j] - M[i,j] (ML4ML's horizontal), 1<=i<=j: (1,1) 1-0, (1,2) 3-2, (2,2) 2-0 -> [1, 1, 2]
    assert f["grad_h_mean"] == pytest.approx(4 / 3)
    assert f["grad_h_std"] == pytest.approx(math.sqrt(2) / 3)  # var = 6/3 - 16/9 = 2/9
    assert f["grad_h_wstd"] == pytest.approx(0.0)  # row 1: [1, 1]; row 2 has one value
    # V[i,j] = M[i,j+1] - M[i,j] (ML4ML's vertical), i<=j<=1: (0,0) 1, (0,1) 2, (1,1) 2 -> [1, 2, 2]
    assert f["grad_v_mean"] == pytest.approx(5 / 3)
    assert f["grad_v_std"] == pytest.approx(math.sqrt(2) / 3)  # var = 9/3 - 25/9 = 2/9
    assert f["grad_v_wstd"] == pytest.approx(0.0)  # column 1: [2, 2]
    # G[i,j] = M[i-1,j+1] - M[i,j], 1<=i<=j<=1: (1,1) 3 - 0
    assert f["grad_d_mean"] == pytest.approx(3.0)
    assert f["grad_d_std"] == pytest.approx(0.0)
    assert f["grad_overall"] == pytest.approx((4 / 3 + 5 / 3 + 3) / 3)


def test_4x4_by_hand():
    M = np.array([[0, 1, 2, 4], [1, 0, 1, 3], [2, 1, 0, 1], [4, 3, 1, 0]], dtype=float)
    f = matrix_features(M, threshold=1.5)
    assert math.isnan(f["sensitivity"])  # no signal
    # sum 2*(1+2+4+1+3+1) = 24 over 16 cells; squares 2*(1+4+16+1+9+1) = 64
    assert f["mean"] == pytest.approx(24 / 16)
    assert f["mean_sq"] == pytest.approx(64 / 16)
    assert f["std"] == pytest.approx(math.sqrt(4 - 2.25))
    assert f["frac_above"] == pytest.approx(6 / 16)  # 2, 4, 3 twice each
    # m = 24/12 = 2; k=1: [1,1,1] std 0; k=2: [2,3] std 0.5 weight 2/4; k=3: [4] -> D = 0.25/2
    assert f["discontinuity"] == pytest.approx(1 / 8)
    # M' = M[::-1, :] rows: [4,3,1,0], [2,1,0,1], [1,0,1,3], [0,1,2,4]
    # i>j: (1,0) |2-3|=1, (2,0) |1-1|=0, (2,1) |0-0|=0, (3,0) |0-0|=0, (3,1) |1-1|=0, (3,2) |2-3|=1
    # mean 2/6 -> A = (1/3)/2
    assert f["asymmetry"] == pytest.approx(1 / 6)
    # H (ML4ML's horizontal, along a column): row 1: M[0,1:]-M[1,1:] = [1-0, 2-1, 4-3] = [1,1,1]; row 2: M[1,2:]-M[2,2:] = [1-0, 3-1] = [1,2];
    #    row 3: [1]. values [1,1,1,1,2,1]: mean 7/6, var 9/6 - 49/36 = 5/36
    assert f["grad_h_mean"] == pytest.approx(7 / 6)
    assert f["grad_h_std"] == pytest.approx(math.sqrt(5) / 6)
    assert f["grad_h_wstd"] == pytest.approx((0.0 + 0.5) / 2)  # rows 1 and 2
    # V (ML4ML's vertical, along a row): col 0: [M01-M00] = [1]; col 1: [M02-M01, M12-M11] = [1, 1]; col 2: [M03-M02, M13-M12, M23-M22]
    #    = [2, 2, 1]. values [1,1,1,2,2,1]: mean 4/3, var 12/6 - 16/9 = 2/9
    assert f["grad_v_mean"] == pytest.approx(4 / 3)
    assert f["grad_v_std"] == pytest.approx(math.sqrt(2) / 3)
    assert f["grad_v_wstd"] == pytest.approx((0.0 + math.sqrt(2) / 3) / 2)  # [2,2,1]: var 9/3-25/9
    # G: (1,1) M02-M11 = 2; (1,2) M03-M12 = 3; (2,2) M13-M22 = 3 -> mean 8/3, var 22/3 - 64/9 = 2/9
    assert f["grad_d_mean"] == pytest.approx(8 / 3)
    assert f["grad_d_std"] == pytest.approx(math.sqrt(2) / 3)
    assert f["grad_overall"] == pytest.approx((7 / 6 + 4 / 3 + 8 / 3) / 3)


def test_features_match_loop_reference_on_random_matrices():
    rng = np.random.default_rng(2)
    for n in (3, 4, 7, 10):
        M = variance_matrix(random_signal(rng, N=9, n=n))
        f = matrix_features(M, threshold=1.0)
        ref = loop_features(M.tolist(), 1.0)
        for name, value in ref.items():
            assert f[name] == pytest.approx(value, rel=1e-10, abs=1e-12), (n, name)


# --------------------------------------------------------------------------- sensitivity


def test_sensitivity_by_hand_with_explicit_subsets():
    # 3 images: s1 = [0,1,2], s2 = s3 = [0,0,0]. Full M: (0,1) sqrt(1/3), (0,2) sqrt(4/3), (1,2) sqrt(1/3).
    # subset {1,2}: M_r = 0 -> sum|M| = 2*(1+2+1)/sqrt(3) = 8/sqrt(3)
    # subset {0,1}: M_r off-diagonals sqrt(1/2), sqrt(2), sqrt(1/2) -> 2*4*(1/sqrt(2) - 1/sqrt(3))
    # average: (8/sqrt(3) + 8/sqrt(2) - 8/sqrt(3)) / 2 = 4/sqrt(2)
    S = np.array([[0.0, 1.0, 2.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    M = variance_matrix(S)
    assert sensitivity(M, S, subsets=[[1, 2], [0, 1]]) == pytest.approx(4 / math.sqrt(2))
    assert sensitivity(M, S, subsets=[[1, 2]]) == pytest.approx(8 / math.sqrt(3))


def test_sensitivity_draws_documented_subsets():
    S = random_signal(np.random.default_rng(3), N=20, n=5)
    M = variance_matrix(S)
    rng = np.random.default_rng(7)
    subsets = [rng.choice(20, size=18, replace=False) for _ in range(4)]
    got = sensitivity(M, S, resamples=4, seed=7)
    assert got == pytest.approx(sensitivity(M, S, subsets=subsets), rel=1e-12)
    assert got > 0
    assert matrix_features(M, signal=S, resamples=4, seed=7)["sensitivity"] == got
    assert sensitivity(M, S, resamples=4, seed=8) != got


def test_sensitivity_zero_for_identical_images():
    row = np.array([0.1, 0.5, 0.9, 0.2, 0.4])
    S = np.tile(row, (10, 1))
    assert sensitivity(variance_matrix(S), S, resamples=3) == pytest.approx(0.0, abs=1e-12)


def test_sensitivity_rejects_a_signal_that_does_not_match():
    rng = np.random.default_rng(4)
    S = random_signal(rng, n=5)
    with pytest.raises(ValueError, match="does not reproduce"):
        sensitivity(variance_matrix(S), S[:, ::-1] * 2)
    with pytest.raises(ValueError, match=r"\(N images, 5 levels\)"):
        sensitivity(variance_matrix(S), S[:, :4])


# --------------------------------------------------------------------------- invariances


def test_constant_signal_gives_all_zero_features_without_nan():
    S = np.repeat(np.array([[0.3], [0.9], [0.5]]), 9, axis=1)  # each image constant over levels
    M = variance_matrix(S)
    f = matrix_features(M, signal=S)
    assert all(v == 0.0 for v in f.values()), f


def test_scaling_the_signal():
    S = random_signal(np.random.default_rng(5), n=9)
    c = 2.5
    f1 = matrix_features(variance_matrix(S), signal=S)
    f2 = matrix_features(variance_matrix(c * S), signal=c * S)
    for name in ("sensitivity", "mean", "std", "grad_v_mean", "grad_v_std", "grad_v_wstd", "grad_h_mean",
                 "grad_h_std", "grad_h_wstd", "grad_d_mean", "grad_d_std", "grad_overall"):
        assert f2[name] == pytest.approx(c * f1[name], rel=1e-9), name
    assert f2["mean_sq"] == pytest.approx(c * c * f1["mean_sq"], rel=1e-9)
    assert f2["discontinuity"] == pytest.approx(f1["discontinuity"], rel=1e-9)
    assert f2["asymmetry"] == pytest.approx(f1["asymmetry"], rel=1e-9)


def test_image_order_does_not_matter():
    rng = np.random.default_rng(6)
    S = random_signal(rng, n=7)
    f1 = matrix_features(variance_matrix(S))
    f2 = matrix_features(variance_matrix(S[rng.permutation(len(S))]))
    for name in FEATURE_NAMES[1:]:
        assert f2[name] == pytest.approx(f1[name], rel=1e-12, abs=1e-15), name


def test_reversing_levels_swaps_vertical_and_horizontal_gradients():
    S = random_signal(np.random.default_rng(7), n=8)
    f = matrix_features(variance_matrix(S))
    r = matrix_features(variance_matrix(S[:, ::-1]))
    swap = {"grad_v_mean": "grad_h_mean", "grad_v_std": "grad_h_std", "grad_v_wstd": "grad_h_wstd"}
    swap.update({b: a for a, b in swap.items()})
    for name in FEATURE_NAMES[1:]:
        assert r[swap.get(name, name)] == pytest.approx(f[name], rel=1e-12, abs=1e-15), name
    assert f["grad_v_mean"] != pytest.approx(f["grad_h_mean"])  # the swap is not vacuous


def test_asymmetry_zero_for_a_signal_symmetric_in_p():
    rng = np.random.default_rng(8)
    p = np.arange(-7, 8)
    S = rng.normal(size=(20, 1)) * p**2 + rng.normal(size=(20, 1)) * np.abs(p) + rng.normal(size=(20, 1))
    f = matrix_features(variance_matrix(S))
    assert f["asymmetry"] == pytest.approx(0.0, abs=1e-12)
    assert f["mean"] > 0


def test_asymmetry_positive_for_a_signal_changing_only_toward_positive_p():
    rng = np.random.default_rng(9)
    p = np.arange(-7, 8)
    S = rng.uniform(0.5, 1.5, size=(20, 1)) * np.clip(p, 0, None) / 7  # flat for p <= 0
    M = variance_matrix(S)
    f = matrix_features(M)
    assert f["asymmetry"] > 0.5
    # the naive comparison of M with its transpose would see nothing: M is symmetric
    assert np.array_equal(M, M.T)
    # all change happens toward +p: ML4ML's vertical gradient (the upper level moving up, along a
    # row of M) carries it
    assert f["grad_v_mean"] > f["grad_h_mean"]
    # the mirror image (change only toward -p) is exactly as asymmetric, with v and h swapped
    g = matrix_features(variance_matrix(S[:, ::-1]))
    assert g["asymmetry"] == pytest.approx(f["asymmetry"])
    assert g["grad_v_mean"] == pytest.approx(f["grad_h_mean"])


def test_discontinuity_zero_when_change_depends_only_on_the_gap():
    rng = np.random.default_rng(10)
    p = np.arange(-5, 6)
    S = rng.normal(size=(15, 1)) * p + rng.normal(size=(15, 1))  # linear in p
    assert matrix_features(variance_matrix(S))["discontinuity"] == pytest.approx(0.0, abs=1e-12)
    S2 = S.copy()
    S2[:, 8] += 3.0  # one jump at a single level
    assert matrix_features(variance_matrix(S2))["discontinuity"] > 0.1


# --------------------------------------------------------------------------- model features, errors


def test_model_features_names_and_vector():
    rng = np.random.default_rng(11)
    S1, S2 = random_signal(rng, n=5), random_signal(rng, n=5)
    mats = {"top1_confidence": variance_matrix(S1), "conv2:max": variance_matrix(S2)}
    names, x = model_features(mats, {"top1_confidence": S1, "conv2:max": S2},
                              threshold={"top1_confidence": 0.15, "conv2:max": 2.0}, resamples=2, seed=3)
    assert names[:2] == ["top1_confidence/sensitivity", "top1_confidence/mean"]
    assert names[16] == "conv2:max/sensitivity" and len(names) == len(x) == 32
    f2 = matrix_features(mats["conv2:max"], signal=S2, threshold=2.0, resamples=2, seed=3)
    np.testing.assert_array_equal(x[16:], [f2[k] for k in FEATURE_NAMES])
    _, x_nosig = model_features(mats, None)
    assert np.isnan(x_nosig[0]) and np.isnan(x_nosig[16]) and np.isfinite(np.delete(x_nosig, [0, 16])).all()


def test_model_features_errors_name_the_matrix():
    S = random_signal(np.random.default_rng(12), n=5)
    mats = {"a": variance_matrix(S), "b": np.ones((5, 5))}
    with pytest.raises(ValueError, match="signals has no entry for matrix 'b'"):
        model_features(mats, {"a": S})
    with pytest.raises(ValueError, match="matrix 'b'.*zero diagonal"):
        model_features(mats)
    with pytest.raises(ValueError, match="empty"):
        model_features({})


@pytest.mark.parametrize(
    ("M", "message"),
    [
        (np.zeros((2, 2)), "at least 3"),
        (np.zeros((3, 4)), "square"),
        (np.array([[0, 1, 2], [1, 0, 1], [3, 1, 0.0]]), "symmetric"),
        (np.array([[0, -1, 2], [-1, 0, 1], [2, 1, 0.0]]), "negative"),
        (np.array([[0, np.nan, 2], [np.nan, 0, 1], [2, 1, 0.0]]), "NaN"),
    ],
)
def test_matrix_checks(M, message):
    with pytest.raises(ValueError, match=message):
        matrix_features(M)
