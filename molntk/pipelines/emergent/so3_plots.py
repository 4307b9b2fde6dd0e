"""Plot of ``emergent-so3``: the rotation std against k, width and ensemble size."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from molntk.pipelines.files import save_figure

#: (summary key, label, marker, colour) of the curves against k and against width.
CURVES = [
    ("rotation_std_ensemble", "ensemble mean", "o", "C0"),
    ("rotation_std_member", "single members", "s", "C1"),
    ("rotation_std_ntk", "augmented MLP NTK μ_s", "^", "C2"),
]


def plot_rotation_std(path: Path, records: Sequence[dict[str, Any]], summary: dict[str, Any]) -> Path:
    """Three panels at the last recorded step: the rotation std against k (at the base width),
    against width (at k = width_k) and against ensemble size (at both), each beside the SO(3)
    NTK's; ensemble size also with μ_s and the Monte Carlo law √(ntk² + member² / E)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13.0, 4.2), dpi=120, sharey=True)
    so3 = max(summary["rotation_std_so3"], 1e-17)  # an exact 0 on the log axis
    try:
        for ax, sweep, xlabel in [
            (axes[0], "by_k", f"rotations per training molecule k (width {summary['width']})"),
            (axes[1], "by_width", f"hidden width (k = {summary['width_k']})"),
        ]:
            xs = [int(x) for x in summary[sweep]]
            for key, label, marker, color in CURVES:
                ax.plot(xs, [summary[sweep][str(x)][key] for x in xs], marker=marker, color=color, label=label,
                        markerfacecolor="none")
            ax.axhline(so3, color="k", linestyle=":", label="SO(3) NTK (lift → pool)")
            ax.set_xscale("log", base=2)
            ax.set_xticks(xs, [str(x) for x in xs])
            ax.set_xlabel(xlabel)
        sizes = [int(s) for s in summary["by_size"]]
        base = summary["by_k"][str(summary["width_k"])]
        ax = axes[2]
        ax.plot(sizes, [summary["by_size"][str(s)] for s in sizes], "o-", color="C0", markerfacecolor="none",
                label="mean of E members")
        law = [(base["rotation_std_ntk"] ** 2 + base["rotation_std_member"] ** 2 / s) ** 0.5 for s in sizes]
        ax.plot(sizes, law, "--", color="grey", label="√(NTK² + member² / E)")
        ax.axhline(base["rotation_std_ntk"], color="C2", linestyle="-.", label="augmented MLP NTK μ_s")
        ax.axhline(so3, color="k", linestyle=":", label="SO(3) NTK")
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes, [str(s) for s in sizes])
        ax.set_xlabel(f"ensemble size E (k = {summary['width_k']}, width {summary['width']})")
        axes[0].set_ylabel(f"rotation std / σ_y, step {summary['step']}")
        for ax in axes:
            ax.set_yscale("log")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=7)
        fig.tight_layout()
        return save_figure(fig, path)
    finally:
        plt.close(fig)
