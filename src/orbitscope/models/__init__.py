"""Models: reference and equivariant architectures, inference optimisation, loading and saving."""

from .centre_detector import CentreDetector
from .flow_cnn import FlowCNN
from .equivariant import P4CNN, Symmetrized, symmetrize
from .c8 import C8CNN
from .mtcnn import MTCNN  # trained weights: facenet-pytorch's package data, read when one is built
from .flow_estimators import DIS, Farneback, HornSchunck, OpenPIV  # cv2, openpiv imported lazily
from .nero_cnn import NeroCNN
from .onnx_model import OnnxModel  # onnxruntime imported when one is built
from .point_nets import DGCNN, DistanceNet, PointNet
from .ppocr import PPOCROrientation, PPOCRTextDetector  # onnxruntime, cv2 and the ONNX files needed when one is built
from .reference import (
    ReferenceCNN,
    SmallCNN,
    default_config,
    eval_mode,
    fold_batchnorm,
    model_device,
    model_hash,
    optimize_for_inference,
    set_eval_mode,
)
from .registry import ARCHITECTURES, build_model, list_models, register_model
from .torchvision_detectors import TORCHVISION_DETECTORS, torchvision_detector  # torchvision imported lazily
from .zoo_nets import VGGBN, SmallResNet

__all__ = ["ARCHITECTURES", "CentreDetector", "FlowCNN", "P4CNN", "C8CNN", "Symmetrized", "symmetrize", "NeroCNN", "ReferenceCNN", "SmallCNN", "register_model", "list_models", "build_model", "default_config",
           "fold_batchnorm", "optimize_for_inference", "model_hash", "set_eval_mode", "eval_mode", "model_device",
           "TORCHVISION_DETECTORS", "torchvision_detector", "Farneback", "DIS", "HornSchunck", "OpenPIV",
           "PointNet", "DGCNN", "DistanceNet", "VGGBN", "SmallResNet", "OnnxModel", "MTCNN"]
__all__ += ["PPOCRTextDetector", "PPOCROrientation"]
