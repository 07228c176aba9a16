"""Built-in text data with exact ground truth: words rendered onto real photographs.

For the PP-OCR text detector and orientation classifier (:mod:`orbitscope.models.ppocr`).

* :func:`text_contexts`: NERO detection contexts, (view + 2·max_shift)² RGB crops of a real
  photograph with a **key word** centred (box 0; centre of its box within half a pixel of the
  crop's centre, so with the ``window`` input kind the field of view shows it centred at shift 0
  and displaced by +t at shift t) and 0–2 other words elsewhere (the boxes after it, clipped to
  the crop). Label 0 = text. The same form as :func:`~orbitscope.data.coco.key_object_contexts`
  gives, drawn directly at the context's size.
* :func:`text_lines`: text-line crops (height × width, default 48 × 192, the orientation
  classifier's input) with one upright word centred, on a plain colour or a photo crop; label 0
  (class "0", upright). Rotating them by θ makes "180" the right answer for θ in (90°, 270°).

Rendering: the font is matplotlib's bundled DejaVu Sans (``matplotlib.get_data_path()``, always
installed, so the scenes are the same on every machine; ``font=`` takes another TrueType file,
e.g. ``/usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf``). A word is drawn with PIL at a
font size in pixels into an 8-bit coverage mask a ∈ [0, 1]; it is composited as
out = (1 − a)·background + a·colour, with a colour that contrasts with the background under the
word (dark, each channel in [0, 50], on a background of mean luminance above 128; light,
[205, 255], otherwise). A word's **box** is the tight box of the pixels where a > 0.1 (the
ink), in pixel edges (x1 = last column + 1), exact by construction.

Backgrounds (:data:`TEXT_BACKGROUNDS`): real photographs and textures that ship with
scikit-image (nothing downloaded). Everything is drawn from ``numpy.random.default_rng([seed,
i])`` for item ``i``: deterministic, bit for bit.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path

import numpy as np

from ..errors import DataError
from .arrays import ArrayDataset
from .coco import DetectionSet

__all__ = ["TEXT_BACKGROUNDS", "WORDS", "default_font", "render_word", "text_backgrounds", "text_contexts",
           "text_lines"]

#: scikit-image photographs and textures used as backgrounds, in this order
TEXT_BACKGROUNDS = ("coffee", "rocket", "brick", "grass", "gravel", "chelsea", "astronaut", "camera")
#: the words drawn (common English words of 3–10 letters, mixed case)
WORDS = ("exit", "open", "STOP", "Coffee", "river", "garden", "Station", "market", "north", "Hotel", "bakery",
         "city", "PARK", "library", "museum", "Bridge", "street", "window", "orbit", "signal", "Harbour", "forest",
         "ticket", "Office", "bank", "camera", "rocket", "School", "theatre", "gallery", "Avenue", "central",
         "planet", "yellow", "SALE", "Welcome", "corner", "Square", "village", "mountain", "sunrise", "Pizza",
         "kitchen", "OPEN", "table", "music", "Airport", "Pharmacy", "DANGER", "police", "number", "letters",
         "paper", "silver", "winter", "summer", "harvest", "Bicycle", "green", "Tower")
_ALPHA_EDGE = 0.1  # a pixel is ink where the coverage exceeds this
_GAP = 6  # least gap in pixels between two words' boxes (besides the unclip margin below)


def default_font() -> Path:
    """matplotlib's bundled DejaVu Sans (always installed with matplotlib)."""
    import matplotlib

    path = Path(matplotlib.get_data_path()) / "fonts" / "ttf" / "DejaVuSans.ttf"
    if not path.is_file():  # pragma: no cover - part of every matplotlib wheel
        raise DataError(f"matplotlib's DejaVuSans.ttf is missing at {path}; pass font= a TrueType file")
    return path


@lru_cache(maxsize=512)
def _rendered(word: str, size: int, font: str) -> np.ndarray:
    from PIL import Image, ImageDraw, ImageFont

    face = ImageFont.truetype(font, size)
    left, top, right, bottom = face.getbbox(word)
    img = Image.new("L", (right - left + 4, bottom - top + 4), 0)
    ImageDraw.Draw(img).text((2 - left, 2 - top), word, fill=255, font=face)
    alpha = np.asarray(img, np.float64) / 255.0
    on = alpha > _ALPHA_EDGE
    rows, cols = np.flatnonzero(on.any(1)), np.flatnonzero(on.any(0))
    if rows.size == 0:
        raise DataError(f"the word {word!r} renders to no ink at font size {size}")
    return alpha[rows[0]:rows[-1] + 1, cols[0]:cols[-1] + 1]


def render_word(word: str, size: int, font: str | Path | None = None) -> np.ndarray:
    """Coverage mask (h, w) float64 in [0, 1] of ``word`` at font size ``size`` px, cropped to its
    ink (every border row and column has a pixel above 0.1; fainter antialiasing outside it is
    cut)."""
    if size < 4:
        raise DataError(f"font size must be at least 4 px, got {size}")
    return _rendered(str(word), int(size), str(font or default_font())).copy()


@lru_cache(maxsize=1)
def _backgrounds() -> tuple[np.ndarray, ...]:
    try:
        from skimage import data as skdata
    except ImportError as exc:  # pragma: no cover - installed by make test
        raise DataError("the text scenes need scikit-image's sample photographs: pip install scikit-image") from exc
    out = []
    for name in TEXT_BACKGROUNDS:
        img = getattr(skdata, name)()
        out.append(np.repeat(img[..., None], 3, -1) if img.ndim == 2 else np.ascontiguousarray(img[..., :3]))
    return tuple(out)


def text_backgrounds() -> list[np.ndarray]:
    """The :data:`TEXT_BACKGROUNDS` as RGB uint8 (H, W, 3) arrays (grey ones repeated)."""
    return [b.copy() for b in _backgrounds()]


def _background_index(backgrounds: tuple[str, ...] | None) -> list[int]:
    if backgrounds is None:
        return list(range(len(TEXT_BACKGROUNDS)))
    unknown = [b for b in backgrounds if b not in TEXT_BACKGROUNDS]
    if unknown or not backgrounds:
        raise DataError(f"backgrounds must be a non-empty selection of {TEXT_BACKGROUNDS}, got {backgrounds}")
    return [TEXT_BACKGROUNDS.index(b) for b in backgrounds]


def _crop(rng: np.random.Generator, h: int, w: int, choices: list[int]) -> tuple[np.ndarray, int]:
    b = choices[int(rng.integers(len(choices)))]
    bg = _backgrounds()[b]
    if bg.shape[0] < h or bg.shape[1] < w:
        raise DataError(f"a {h} × {w} crop does not fit the background {TEXT_BACKGROUNDS[b]} {bg.shape[:2]}")
    y0, x0 = int(rng.integers(bg.shape[0] - h + 1)), int(rng.integers(bg.shape[1] - w + 1))
    return bg[y0:y0 + h, x0:x0 + w].astype(np.float64), b


def _paint(canvas: np.ndarray, alpha: np.ndarray, x: int, y: int, rng: np.random.Generator) -> None:
    """Composite the mask at (x, y) (top-left) in a colour contrasting with what is under it."""
    h, w = alpha.shape
    patch = canvas[y:y + h, x:x + w]
    luma = float((patch @ np.array([0.299, 0.587, 0.114])).mean())
    colour = rng.uniform(0, 50, 3) if luma > 128 else rng.uniform(205, 255, 3)
    a = alpha[..., None]
    canvas[y:y + h, x:x + w] = (1 - a) * patch + a * colour


def _word_fitting(rng: np.random.Generator, size: int, max_width: int, font: str) -> tuple[str, np.ndarray]:
    """A random word whose rendering at ``size`` is at most ``max_width`` wide (shorter sizes
    are tried when none fits)."""
    for s in range(size, 3, -2):
        fits = [w for w in WORDS if _rendered(w, s, font).shape[1] <= max_width]
        if fits:
            word = fits[int(rng.integers(len(fits)))]
            return word, _rendered(word, s, font)
    raise DataError(f"no word fits in {max_width} px")


def _apart(box: list[int], boxes: list[list[int]], gap: int) -> bool:
    return all(box[2] + gap <= o[0] or o[2] + gap <= box[0] or box[3] + gap <= o[1] or o[3] + gap <= box[1]
               for o in boxes)


def _font_id(font: str) -> str:
    return f"{Path(font).name}:{hashlib.sha256(Path(font).read_bytes()).hexdigest()[:8]}"


def text_contexts(n: int, *, view: int = 160, max_shift: int = 24, words: tuple[int, int] = (1, 3),
                  size: tuple[int, int] = (16, 30), seed: int = 0, font: str | Path | None = None,
                  backgrounds: tuple[str, ...] | None = None) -> DetectionSet:
    """``n`` detection contexts of (view + 2·max_shift)² RGB pixels, each with a key word centred
    (box 0) and up to ``words[1] − 1`` more words (see the module docstring); label 0 = text.

    Args:
        view: the field of view the contexts are made for (``evaluate(..., view_size=(view, view))``).
        max_shift: the largest window shift; the key word is at most view − 2·max_shift − 8 px
            wide, so it stays inside the view at every shift of the orbit.
        words: (least, most) words per context, the key word included.
        size: (least, most) font size in pixels.
        seed: the draw; item ``i`` uses ``default_rng([seed, i])``.
        font: a TrueType file (default :func:`default_font`).
        backgrounds: names from :data:`TEXT_BACKGROUNDS` to draw from (default: all).
    """
    if n < 1 or view < 32 or max_shift < 0:
        raise DataError(f"need n >= 1, view >= 32 and max_shift >= 0, got n={n}, view={view}, max_shift={max_shift}")
    lo, hi = size
    if not 6 <= lo <= hi:
        raise DataError(f"size must satisfy 6 <= low <= high, got {size}")
    if not 1 <= words[0] <= words[1]:
        raise DataError(f"words must satisfy 1 <= low <= high, got {words}")
    key_width = view - 2 * max_shift - 8
    if key_width < 24:
        raise DataError(f"max_shift={max_shift} leaves {key_width} px for the key word in a {view}-px view; "
                        "lower max_shift or enlarge the view")
    font_path = str(font or default_font())
    choices = _background_index(backgrounds)
    side = view + 2 * max_shift
    images, targets, names = [], [], []
    for i in range(n):
        rng = np.random.default_rng([seed, i])
        canvas, b = _crop(rng, side, side, choices)
        word, alpha = _word_fitting(rng, int(rng.integers(lo, hi + 1)), key_width, font_path)
        h, w = alpha.shape
        x, y = side // 2 - w // 2, side // 2 - h // 2  # box centre within half a pixel of side / 2
        _paint(canvas, alpha, x, y, rng)
        boxes = [[x, y, x + w, y + h]]
        for _ in range(int(rng.integers(words[0], words[1] + 1)) - 1):
            other, a2 = _word_fitting(rng, int(rng.integers(lo, hi + 1)), side - 4, font_path)
            h2, w2 = a2.shape
            gap = _GAP + max(h, h2)  # DB's unclip grows a box by about its height: keep words apart
            for _attempt in range(20):
                x2, y2 = int(rng.integers(side - w2 + 1)), int(rng.integers(side - h2 + 1))
                if _apart([x2, y2, x2 + w2, y2 + h2], boxes, gap):
                    _paint(canvas, a2, x2, y2, rng)
                    boxes.append([x2, y2, x2 + w2, y2 + h2])
                    break
        images.append(np.ascontiguousarray(np.moveaxis(np.clip(np.round(canvas), 0, 255).astype(np.uint8), -1, 0)))
        targets.append({"boxes": np.asarray(boxes, np.float32), "labels": np.zeros(len(boxes), np.int64)})
        names.append(f"text{i:05d}-{TEXT_BACKGROUNDS[b]}-{word}.png")
    return DetectionSet.from_arrays(images, targets, {0: "text"},
                                    f"text-contexts:n{n}:v{view}:s{max_shift}:w{words[0]}-{words[1]}:f{lo}-{hi}:"
                                    f"seed{seed}:{_font_id(font_path)}"
                                    + (f":bg{','.join(backgrounds)}" if backgrounds is not None else ""), names=names)


def text_lines(n: int, *, height: int = 48, width: int = 192, size: tuple[int, int] = (30, 38),
               plain: float = 0.5, seed: int = 0, font: str | Path | None = None,
               backgrounds: tuple[str, ...] | None = None) -> ArrayDataset:
    """``n`` upright text-line crops (3, height, width), uint8 RGB, one word centred on a plain
    colour (a fraction ``plain`` of them) or a photo crop; label 0 (class ``"0"``, upright;
    classes ``["0", "180"]`` as the orientation classifier's). ``backgrounds``: as for
    :func:`text_contexts`. See the module docstring."""
    if n < 1 or height < 8 or width < 8:
        raise DataError(f"need n >= 1 crops of at least 8 × 8 px, got n={n}, {height} × {width}")
    lo, hi = size
    if not 6 <= lo <= hi:
        raise DataError(f"size must satisfy 6 <= low <= high, got {size}")
    font_path = str(font or default_font())
    choices = _background_index(backgrounds)
    out = np.empty((n, 3, height, width), np.uint8)
    for i in range(n):
        rng = np.random.default_rng([seed, i])
        if rng.random() < plain:
            canvas = np.broadcast_to(rng.uniform(0, 255, 3), (height, width, 3)).copy()
        else:
            canvas, _ = _crop(rng, height, width, choices)
        _, alpha = _word_fitting(rng, int(rng.integers(lo, hi + 1)), width - 8, font_path)
        h, w = alpha.shape
        if h > height - 2:
            raise DataError(f"font size up to {hi} px draws words {h} px tall, too tall for {height}-px crops")
        _paint(canvas, alpha, (width - w) // 2, (height - h) // 2, rng)
        out[i] = np.moveaxis(np.clip(np.round(canvas), 0, 255).astype(np.uint8), -1, 0)
    return ArrayDataset(out, np.zeros(n, np.int64), classes=["0", "180"],
                        data_id=f"text-lines:n{n}:{height}x{width}:f{lo}-{hi}:p{plain:g}:seed{seed}:{_font_id(font_path)}"
                        + (f":bg{','.join(backgrounds)}" if backgrounds is not None else ""))
