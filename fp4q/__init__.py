"""fp4q: NVFP4 quantization of bf16 activations on NVIDIA GPUs.

Kernels are generated from ``ptx_templates/`` for each configuration,
compiled with NVRTC to cubins (cached on disk) and launched on CuPy arrays
and streams with TMA descriptors and programmatic dependent launch.
"""

from ._version import __version__
from .ops.quantize import quantize_mxfp4, quantize_nvfp4
from .jit.compiler import CompileError, JitDisabledError, NvrtcError
from .jit.precompile import precompile
from .kernels.archs import UnsupportedDeviceError
from .ops.dequantize import dequantize_mxfp4, dequantize_nvfp4
from .kernels.dequantize import DequantizeConfig, DequantizeSimtConfig
from .ops.global_scale import global_scale
from .kernels.rules import ConfigError
from .kernels.quantize import QuantizeConfig, SimtConfig, default_config
from .kernels.spec import Swizzle
from .numerics import layouts, reference
from .numerics.layouts import swizzle_sf, swizzled_sf_shape, unswizzle_sf
from .cuda.tma import TmaError

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
    "NvrtcError",
    "JitDisabledError",
    "UnsupportedDeviceError",
    "precompile",
    "TmaError",
    "swizzle_sf",
    "unswizzle_sf",
    "swizzled_sf_shape",
]
