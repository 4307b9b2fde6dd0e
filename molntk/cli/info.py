"""``molntk info``: versions, torch device and threads, cache location."""

from __future__ import annotations

import platform
from typing import Annotated, Any

import torch
import typer
from rich.table import Table
from rich.text import Text

from molntk._version import __version__
from molntk.cli.output import cells, print_json, stdout
from molntk.data.qm9 import qm9_cache_dir
from molntk.utils.versions import package_version

#: Distributions whose versions ``molntk info`` reports, besides molntk and Python.
PACKAGES = ("torch", "triton", "e3nn", "torch-geometric", "rdkit", "numpy")  # triton: the CUDA kernels


def versions() -> dict[str, str | None]:
    """Versions of molntk, Python and :data:`PACKAGES` (None: not installed)."""
    return {"molntk": __version__, "python": platform.python_version(), **{p: package_version(p) for p in PACKAGES}}


def torch_info() -> dict[str, Any]:
    """Torch's default device, CUDA availability and devices, and its number of CPU threads."""
    cuda = torch.cuda.is_available()
    return {
        "default_device": str(torch.get_default_device()),
        "cuda_available": cuda,
        "cuda_version": torch.version.cuda,
        "cuda_devices": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if cuda else [],
        "num_threads": torch.get_num_threads(),
    }


def cache_info() -> dict[str, str]:
    """The molntk cache directory in effect (``$MOLNTK_CACHE_DIR`` or the user cache) and the QM9 cache in it."""
    qm9 = qm9_cache_dir()
    return {"dir": str(qm9.parent), "qm9": str(qm9)}


def collect_info() -> dict[str, Any]:
    """Everything ``molntk info`` reports, JSON-serialisable."""
    return {"versions": versions(), "platform": platform.platform(), "torch": torch_info(), "cache": cache_info()}


def _print_info_table(report: dict[str, Any]) -> None:
    """Render the :func:`collect_info` report as a two-column table."""
    table = Table(title="molntk", show_header=False)
    table.add_column("key", style="bold")
    table.add_column("value")
    for name, ver in report["versions"].items():
        table.add_row(*cells(name, ver or Text("not installed", style="red")))
    torch = report["torch"]
    cuda = f"yes (CUDA {torch['cuda_version']})" if torch["cuda_available"] else "no"
    rows = [
        ("platform", report["platform"]),
        ("torch default device", torch["default_device"]),
        ("CUDA available", cuda),
        *((f"cuda:{i}", name) for i, name in enumerate(torch["cuda_devices"])),
        ("torch threads", torch["num_threads"]),
        ("cache", report["cache"]["dir"]),
        ("QM9 cache", report["cache"]["qm9"]),
    ]
    for key, value in rows:
        table.add_row(*cells(key, value))
    stdout().print(table)


def info(
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document instead of a table.")] = False,
) -> None:
    """Show versions, the torch device, CUDA devices, threads and the cache location."""
    report = collect_info()
    if as_json:
        print_json(report)
    else:
        _print_info_table(report)
