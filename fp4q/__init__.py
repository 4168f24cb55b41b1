"""fp4q: NVFP4 quantization of bf16 activations on NVIDIA GPUs.

Kernels are generated from ``ptx_templates/`` for each configuration,
compiled with NVRTC to cubins (cached on disk) and launched on CuPy arrays
and streams with TMA descriptors and programmatic dependent launch.
"""

from ._version import __version__
from .api import quantize_mxfp4, quantize_nvfp4
from .compiler import CompileError
from .dequantize import dequantize_mxfp4, dequantize_nvfp4
from .dequantize_config import DequantizeConfig, DequantizeSimtConfig
from .global_scale import global_scale
from .config import ConfigError, QuantizeConfig, SimtConfig, Swizzle, default_config
from .layouts import swizzle_sf, swizzled_sf_shape, unswizzle_sf
from .tma import TmaError

__all__ = [
    "__version__",
    "quantize_nvfp4",
    "quantize_mxfp4",
    "dequantize_nvfp4",
    "dequantize_mxfp4",
    "global_scale",
    "DequantizeConfig",
    "DequantizeSimtConfig",
    "QuantizeConfig",
    "SimtConfig",
    "Swizzle",
    "default_config",
    "ConfigError",
    "CompileError",
    "TmaError",
    "swizzle_sf",
    "unswizzle_sf",
    "swizzled_sf_shape",
]
