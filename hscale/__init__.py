"""H-Scale NVFP4: reference specification, backends and conformance kit.

The reference (``hscale.reference``) is the specification in code; ``docs/spec.md`` is its
normative text. Backends live under ``hscale.backends``.
"""

__version__ = "0.1.0"
SPEC_VERSION = "1.6"


def same_major_version(version, reference: str = SPEC_VERSION) -> bool:
    """Whether vectors or a certificate made under spec ``version`` apply under ``reference``:
    one major version (docs/spec.md, How the version changes)."""
    if not isinstance(version, str) or "." not in version:
        return False
    return version.split(".")[0] == reference.split(".")[0]
