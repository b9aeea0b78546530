"""H-Scale NVFP4: reference specification, backends and conformance kit.

The reference (``hscale.reference``) is the specification in code; ``docs/spec.md`` is its
normative text. Backends live under ``hscale.backends``.
"""

__version__ = "0.1.0"
SPEC_VERSION = "1.0"
