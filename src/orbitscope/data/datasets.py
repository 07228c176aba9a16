"""Datasets for orbitscope: IDX files, MNIST/Fashion-MNIST, image folders, CLI specs.

Conventions
-----------
* One item is ``(image, label)``: ``image`` is a ``torch.float32`` tensor of shape
  ``(C, H, W)`` with intensities in ``[0, 1]`` (8-bit pixels are divided by 255);
  ``label`` is a Python ``int`` (class index, 0-based). A batch is ``(B, C, H, W)``.
* Arrays are kept as given (a read-only ``np.memmap`` stays a memmap); conversion to
  float happens per item, so construction never copies the whole image array.
* Every dataset has ``data_id`` (a provenance string such as ``"fashion-mnist:test"``)
  and ``classes`` (class names, index = label).
* Labels must be ``(N,)`` integer class indices. Other shapes are refused, never reshaped
  silently, with a :class:`~orbitscope.errors.DataError` saying how to convert: a column
  ``(N, 1)`` -> ``labels.reshape(-1)``; one-hot labels or scores ``(N, K)`` ->
  ``labels.argmax(axis=1)``; whole-number floats -> ``labels.astype(np.int64)``. Images must be ``(N, H, W)`` or channels-first ``(N, C, H, W)``, ``uint8`` or float
  in ``[0, 1]``; channels-last ``(N, H, W, C)`` arrays are refused (transpose them).

Data specs (:func:`parse_data_spec`, the CLI's ``--data``) are ``PREFIX[:ARGS][@N]``; the prefixes
live in the registry :data:`DATA_SPECS` (``mnist-subset``, ``fashion-mnist``, ``idx``, ``folder``,
``npz``), and :func:`register_data_spec` adds your own::

    @register_data_spec("cifar10", usage="cifar10[:train|:test]")
    def _cifar(rest: str) -> ArrayDataset:
        ...
    parse_data_spec("cifar10:test@500")

Layout: :mod:`.idx` (the IDX reader), :mod:`.arrays` (:class:`ArrayDataset` and its image and label
checks), :mod:`.builtin` (the MNIST subset, Fashion-MNIST, :func:`load_idx_dataset`), :mod:`.folder`
(:class:`ImageFolder`) and :mod:`.specs` (the data specs); this module re-exports their public names.
"""

# ``from .m import X as X``: importable from here as before the split, though not in ``__all__``.
from .arrays import ArrayDataset
from .arrays import Indices as Indices
from .builtin import FASHION_MNIST_CLASSES, fashion_mnist, load_idx_dataset, mnist_subset
from .builtin import FASHION_MNIST_DEFAULT_ROOT as FASHION_MNIST_DEFAULT_ROOT
from .builtin import FASHION_MNIST_ENV as FASHION_MNIST_ENV
from .folder import ImageFolder
from .folder import IMAGE_EXTENSIONS as IMAGE_EXTENSIONS
from .idx import read_idx
from .idx import PathLike as PathLike
from .specs import DATA_SPECS, parse_data_spec, register_data_spec
from .specs import DataSpecParser as DataSpecParser

__all__ = [
    "FASHION_MNIST_CLASSES",
    "ArrayDataset",
    "DATA_SPECS",
    "ImageFolder",
    "fashion_mnist",
    "load_idx_dataset",
    "mnist_subset",
    "parse_data_spec",
    "read_idx",
    "register_data_spec",
]
