"""Datasets and data specs: IDX files, the MNIST subset, Fashion-MNIST, image folders, arrays."""

from .datasets import (
    DATA_SPECS,
    FASHION_MNIST_CLASSES,
    ArrayDataset,
    ImageFolder,
    fashion_mnist,
    load_idx_dataset,
    mnist_subset,
    parse_data_spec,
    read_idx,
    register_data_spec,
)

__all__ = ["DATA_SPECS", "FASHION_MNIST_CLASSES", "ArrayDataset", "ImageFolder", "fashion_mnist", "load_idx_dataset",
           "mnist_subset", "parse_data_spec", "read_idx", "register_data_spec"]
