"""Installed versions of Python distributions, for manifests and ``molntk info``."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version


def package_version(name: str) -> str | None:
    """Installed version of the distribution ``name``, or None when it is not installed."""
    try:
        return version(name)
    except PackageNotFoundError:
        return None
