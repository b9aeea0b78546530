"""``hscale quantize`` and ``hscale calibrate``: a Hugging Face model directory in, an NVFP4
checkpoint an engine loads out (docs/quantize.md).

- ``request``: what is asked, every option checked before any work (``--device`` included);
- ``plan``: which matmul weights are quantized (Linears and MoE experts) and why the others
  are not, what every other stored tensor is, the fused sets sharing a global scale, the
  output's tensors and their order;
- ``calibrate``: the calibration data, and the whole-model calibration (h, and H for GPTQ),
  and the file ``hscale calibrate`` writes;
- ``run``: the plan, then one of two paths: ``sequential`` (decoders, block by block, with
  ``blocks``: the calibration of one block at a time; ``resume``: an interrupted run goes on;
  ``distributed``: torchrun) or ``whole`` (any other model, or statistics from a file);
- ``layer``: one weight quantized, its report entry;
- ``progress``: blocks, tensors, ETA;
- ``report``: the header, the per-layer errors against RTN, the totals, what was not
  quantized and why.
"""

from .calibrate import calibrate, calibrate_to_file, calibration_texts
from .plan import LayerPlan, output_tensors, plan_layers
from .report import REPORT_NAME, QuantizeReport, format_summary, summarize
from .request import QuantizeRequest, check_request, needs_calibration
from .source import model_directory
from .layer import set_global_scale, tensor_amax
from .run import quantize_model

__all__ = ["REPORT_NAME", "LayerPlan", "QuantizeReport", "QuantizeRequest", "calibrate",
           "calibrate_to_file", "calibration_texts", "check_request", "format_summary",
           "model_directory", "needs_calibration", "output_tensors", "plan_layers",
           "quantize_model", "set_global_scale", "summarize", "tensor_amax"]
