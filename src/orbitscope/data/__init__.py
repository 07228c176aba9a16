"""Datasets and data specs: IDX files, the MNIST subset, Fashion-MNIST, image folders, arrays."""

from .datasets import (
    FASHION_MNIST_CLASSES,
    ArrayDataset,
    ImageFolder,
    fashion_mnist,
    load_idx_dataset,
    mnist_subset,
    parse_data_spec,
    read_idx,
)

__all__ = ["FASHION_MNIST_CLASSES", "ArrayDataset", "ImageFolder", "fashion_mnist", "load_idx_dataset",
           "mnist_subset", "parse_data_spec", "read_idx"]
