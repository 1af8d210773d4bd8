"""The one vLLM version this integration is built and tested against.

The scheduler and KV-cache internals it extends are not a public interface, so any other
version is refused with a reason instead of being driven blind.
"""

from __future__ import annotations

from importlib import metadata

VLLM_VERSION = "0.33.0"


class VllmVersionError(ImportError):
    """vLLM is missing, or is not the pinned version."""


def installed_vllm() -> str | None:
    """The installed vLLM distribution's version, without importing vllm; None when absent."""
    try:
        return metadata.version("vllm")
    except metadata.PackageNotFoundError:
        return None


def check_vllm(found: str | None, *, required: bool) -> None:
    """Raise unless ``found`` is the pinned version (absence is fine when not ``required``)."""
    if found is None:
        if required:
            raise VllmVersionError(
                f"boundary_vllm's engine side needs vllm=={VLLM_VERSION}, which is not installed "
                f"(pip install 'boundary[vllm]')"
            )
        return
    if found != VLLM_VERSION:
        raise VllmVersionError(
            f"boundary_vllm is pinned to vllm=={VLLM_VERSION} because it extends vLLM's non-public "
            f"scheduler and KV-cache classes; found vllm=={found}. Install vllm=={VLLM_VERSION}."
        )
