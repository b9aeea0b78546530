"""``hscale quantize`` and ``hscale calibrate``: a Hugging Face model directory in, an NVFP4
checkpoint an engine loads out (docs/quantize.md).

- ``request``: what is asked, every option checked before any work;
- ``plan``: which Linears are quantized (and why the others are not), the fused sets sharing a
  global scale, the output's tensors;
- ``calibrate``: h (and H for GPTQ) of the planned Linears from the calibration text, and the
  file ``hscale calibrate`` writes;
- ``run``: the model loop: read, quantize by the pipeline, write, tensor by tensor;
- ``report``: the per-layer errors against RTN, the totals, what was not quantized.
"""

from .calibrate import calibrate, calibrate_to_file, calibration_texts
from .plan import LayerPlan, output_tensors, plan_layers
from .report import REPORT_NAME, QuantizeReport, format_summary, summarize
from .request import QuantizeRequest, check_request, model_directory, needs_calibration
from .run import quantize_model, set_global_scale, tensor_amax

__all__ = ["REPORT_NAME", "LayerPlan", "QuantizeReport", "QuantizeRequest", "calibrate",
           "calibrate_to_file", "calibration_texts", "check_request", "format_summary",
           "model_directory", "needs_calibration", "output_tensors", "plan_layers",
           "quantize_model", "set_global_scale", "summarize", "tensor_amax"]
