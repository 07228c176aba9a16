"""Datasets and data specs: IDX files, the MNIST subset, Fashion-MNIST, image folders, arrays,
COCO-format detection data, PIV pairs (synthetic and from folders, Middlebury .flo files)."""

from .coco import DetectionSet, key_object_contexts, read_coco, write_coco
from .scenes import digit_scenes
from .face_scenes import face_contexts, face_scenes
from .text_scenes import text_contexts, text_lines
from .piv import (
    FLOW_TYPES,
    FlowField,
    FlowFolder,
    ParticleOptions,
    PIVPairs,
    flow_field,
    flow_folder,
    particle_pair,
    piv_synthetic,
    read_flo,
    render_particles,
    write_flo,
)

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

__all__ = ["DetectionSet", "digit_scenes", "face_scenes", "face_contexts", "key_object_contexts", "read_coco", "write_coco", "DATA_SPECS", "FASHION_MNIST_CLASSES", "ArrayDataset", "ImageFolder", "fashion_mnist", "load_idx_dataset",
           "mnist_subset", "parse_data_spec", "read_idx", "register_data_spec"]
__all__ += ["FLOW_TYPES", "FlowField", "FlowFolder", "ParticleOptions", "PIVPairs", "flow_field", "flow_folder",
            "particle_pair", "piv_synthetic", "read_flo", "render_particles", "write_flo"]

from .meshes import MESH_CLASSES, MeshClouds, mesh_clouds
from .modelnet import ModelNetFolder, modelnet_folder, read_off

__all__ += ["MESH_CLASSES", "MeshClouds", "mesh_clouds", "ModelNetFolder", "modelnet_folder", "read_off"]
__all__ += ["text_contexts", "text_lines"]
