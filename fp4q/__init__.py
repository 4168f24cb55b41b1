"""fp4q: NVFP4 quantization of bf16 activations on NVIDIA GPUs.

Kernels are generated from ``ptx_templates/`` for each configuration,
compiled with NVRTC to cubins (cached on disk) and launched on CuPy arrays,
torch tensors and streams with TMA descriptors and programmatic dependent
launch. The layers, bottom up: ``numerics`` (the numpy reference and scale
layouts), ``kernels`` (configs and the kernel specs they make), ``cuda``
(driver, tensor maps, launch), ``jit`` (render, compile, cache, load),
``ops`` (the public functions); ``fp4q.torch`` registers them as torch ops.
"""

from ._version import __version__
from .cuda.driver import CudaError, NoGpuError
from .cuda.tma import TmaError
from .jit.compiler import CompileError, JitDisabledError, NvrtcError
from .jit.loader import kernel_cache_stats
from .jit.precompile import precompile
from .kernels.archs import UnsupportedDeviceError
from .kernels.dequantize import DequantizeConfig, DequantizeSimtConfig
from .kernels.quantize import QuantizeConfig, SimtConfig, default_config
from .kernels.rules import ConfigError
from .kernels.spec import Swizzle
from .numerics import layouts, reference
from .numerics.layouts import sf_8x4_shape, swizzle_sf, swizzle_sf_8x4, swizzled_sf_shape, unswizzle_sf, unswizzle_sf_8x4
from .kernels.rows import RowConfig
from .kernels.training import TrainingConfig
from .numerics.experts import experts_sf_shape
from .kernels.fake_quantize import FakeQuantizeConfig
from .ops.api import (config_for, dequantize_mxfp4, dequantize_nvfp4, fake_quantize_nvfp4, global_scale, quantize_mxfp4, quantize_nvfp4,
                      quantize_nvfp4_batched, quantize_nvfp4_experts, rms_norm_quantize_mxfp4, rms_norm_quantize_nvfp4,
                      silu_and_mul_quantize_mxfp4, silu_and_mul_quantize_nvfp4, silu_and_mul_quantize_nvfp4_batched,
                      silu_and_mul_quantize_nvfp4_experts, quantize_nvfp4_training)
from .ops.training import TrainingQuantized

__all__ = [
    "__version__",
    "quantize_nvfp4",
    "quantize_mxfp4",
    "silu_and_mul_quantize_nvfp4",
    "silu_and_mul_quantize_mxfp4",
    "rms_norm_quantize_nvfp4",
    "rms_norm_quantize_mxfp4",
    "quantize_nvfp4_experts",
    "silu_and_mul_quantize_nvfp4_experts",
    "quantize_nvfp4_batched",
    "silu_and_mul_quantize_nvfp4_batched",
    "quantize_nvfp4_training",
    "TrainingQuantized",
    "dequantize_nvfp4",
    "dequantize_mxfp4",
    "global_scale",
    "fake_quantize_nvfp4",
    "config_for",
    "kernel_cache_stats",
    "DequantizeConfig",
    "DequantizeSimtConfig",
    "FakeQuantizeConfig",
    "QuantizeConfig",
    "RowConfig",
    "TrainingConfig",
    "SimtConfig",
    "Swizzle",
    "default_config",
    "ConfigError",
    "CudaError",
    "NoGpuError",
    "CompileError",
    "NvrtcError",
    "JitDisabledError",
    "UnsupportedDeviceError",
    "precompile",
    "TmaError",
    "layouts",
    "reference",
    "swizzle_sf",
    "unswizzle_sf",
    "swizzled_sf_shape",
    "swizzle_sf_8x4",
    "unswizzle_sf_8x4",
    "sf_8x4_shape",
    "experts_sf_shape",
]
