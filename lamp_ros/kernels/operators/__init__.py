"""The `lamp::*` torch operators: one fused kernel each on CUDA, plain torch on the CPU.

The CPU implementations are the specification: the same float32 math as the passes' modules
(policies/pi05/staged/), so a stage switched onto these operators computes what it did
before, and tests on the CPU check the switch. The CUDA implementations call the Triton kernels
(triton_kernels.py, triton_expert_gemm.py, triton_attention.py, triton_premade.py, imported on
first use so that CPU-only machines never need Triton: lazy_triton.py). The fake
implementations give torch.export the output shapes, and the exported program names the
operator: whoever loads a program that uses them imports this package first, which imports
every module below and so registers every operator.

- norms.py: `lamp::rms_norm`, `layer_norm`, `add_norm`
- rotary_embedding.py: `lamp::rope`, `rope_qk`
- activations.py: `lamp::geglu`
- fp8.py: FP8 rows, `lamp::fp8_rows`, `rms_norm_fp8`, `add_rms_norm_fp8`, `geglu_fp8`
- camera_letterbox.py: `lamp::letterbox`
- softmax.py: `lamp::masked_softmax`
- expert_gemms.py: the action expert's fused GEMMs, `lamp::ada_linear`, `ada_geglu`,
  `gated_linear`
- premade_gemms.py: the normed GEMMs as plain weight streams, `lamp::norm_pieces`,
  `gated_linear_prep`, `premade_linear`, `premade_linear_rope`, `premade_geglu`
- attention.py: `lamp::mqa_attention`, `mqa_attention_rotated`, `mqa_flash` (and LOG2E)
- cublaslt_linear.py: `lamp::lt_linear` on a stored cuBLASLt algorithm

Every public name is re-exported here: callers use `operators.<name>`, not the module paths.
"""

from lamp_ros.kernels.operators.activations import geglu, geglu_reference  # noqa: F401
from lamp_ros.kernels.operators.attention import (  # noqa: F401
    LOG2E, mqa_attention, mqa_attention_reference, mqa_attention_rotated,
    mqa_attention_rotated_reference, mqa_flash, mqa_flash_reference)
from lamp_ros.kernels.operators.camera_letterbox import (  # noqa: F401
    letterbox, letterbox_reference)
from lamp_ros.kernels.operators.cublaslt_linear import (  # noqa: F401
    ALGORITHM_ENTRY, algorithm_table, lt_linear, lt_linear_reference, table_algorithm)
from lamp_ros.kernels.operators.expert_gemms import (  # noqa: F401
    ada_geglu, ada_geglu_reference, ada_linear, ada_linear_reference, gated_linear,
    gated_linear_reference)
from lamp_ros.kernels.operators.fp8 import (  # noqa: F401
    add_rms_norm_fp8, add_rms_norm_fp8_reference, E4M3_MAX, e4m3_round, e4m3_steps, fp8_rows,
    fp8_rows_reference, fp8_scale, geglu_fp8, geglu_fp8_reference, rms_norm_fp8,
    rms_norm_fp8_reference)
from lamp_ros.kernels.operators.norms import (  # noqa: F401
    add_norm, add_norm_reference, layer_norm, layer_norm_reference, rms_norm,
    rms_norm_reference)
from lamp_ros.kernels.operators.premade_gemms import (  # noqa: F401
    gated_linear_prep, norm_pieces, premade_geglu, premade_geglu_reference, premade_linear,
    premade_linear_reference, premade_linear_rope, premade_linear_rope_reference)
from lamp_ros.kernels.operators.rotary_embedding import rope, rope_qk, rope_reference  # noqa: F401
from lamp_ros.kernels.operators.softmax import (  # noqa: F401
    masked_softmax, masked_softmax_reference)


OPERATORS = ('lamp::rms_norm', 'lamp::layer_norm', 'lamp::add_norm', 'lamp::rope',
             'lamp::rope_qk', 'lamp::geglu', 'lamp::fp8_rows', 'lamp::rms_norm_fp8',
             'lamp::add_rms_norm_fp8', 'lamp::geglu_fp8', 'lamp::masked_softmax',
             'lamp::ada_linear', 'lamp::ada_geglu', 'lamp::gated_linear', 'lamp::mqa_attention',
             'lamp::mqa_flash', 'lamp::lt_linear')
