"""The built-in detection scenes: deterministic, boxes tight around the pasted digits (checked on a
black background, where the digit's pixels are the only non-zero ones), usable as key-object data."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("skimage")

from orbitscope.data import key_object_contexts  # noqa: E402
from orbitscope.data import scenes  # noqa: E402


def test_scenes_are_deterministic_and_real():
    a, b = scenes.digit_scenes(4, seed=3), scenes.digit_scenes(4, seed=3)
    for i in range(4):
        np.testing.assert_array_equal(a.image(i), b.image(i))
        np.testing.assert_array_equal(a.target(i)["boxes"], b.target(i)["boxes"])
    c = scenes.digit_scenes(4, seed=4)
    assert not np.array_equal(a.image(0), c.image(0))
    assert a.image(0).shape == (3, 128, 128) and a.data_id != c.data_id
    assert all(1 <= len(a.target(i)["boxes"]) <= 3 for i in range(4))
    assert len(scenes.photo_backgrounds()) == len(scenes.BACKGROUNDS)


def test_boxes_are_tight_around_the_pasted_digits(monkeypatch):
    monkeypatch.setattr(scenes, "photo_backgrounds", lambda: [np.zeros((200, 200, 3), np.uint8)])
    data = scenes.digit_scenes(12, seed=1, objects=(1, 1))
    for i in range(12):
        img = data.image(i).max(0).astype(float)
        (box,) = data.target(i)["boxes"]
        x0, y0, x1, y1 = box.astype(int)

        def bbox(mask):
            r, c = np.flatnonzero(mask.any(1)), np.flatnonzero(mask.any(0))
            return c[0], r[0], c[-1] + 1, r[-1] + 1

        # alpha > 0.1 lies between out > 0.1·255 (colour <= 255) and out > 0.1·160 (colour >= 160)
        inner, outer = bbox(img > 0.1 * 255 + 0.5), bbox(img > 0.1 * 160 - 0.5)
        assert x0 <= inner[0] and y0 <= inner[1] and inner[2] <= x1 and inner[3] <= y1
        assert outer[0] <= x0 and outer[1] <= y0 and x1 <= outer[2] and y1 <= outer[3]


def test_scenes_give_key_object_contexts_with_every_box_labelled_by_its_digit():
    data = scenes.digit_scenes(60, size=192, scale=(28, 44), seed=0)
    ctx = key_object_contexts(data, view=64, max_shift=32, area=(0.10, 0.50))
    assert len(ctx) >= 5
    for i in range(len(ctx)):
        t = ctx.target(i)
        assert ctx.image(i).shape == (3, 128, 128)
        assert set(t["labels"].tolist()) <= set(range(10))
        key = t["boxes"][0]
        assert abs((key[0] + key[2]) / 2 - 64) <= 1 and abs((key[1] + key[3]) / 2 - 64) <= 1
