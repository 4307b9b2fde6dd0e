"""Plot of ``emergent-so3``: the rotation std against k, width and ensemble size."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from molntk.pipelines.files import figure, save_figure

#: (summary key, label, marker, colour) of the curves against k and against width.
CURVES = [
    ("rotation_std_ensemble", "ensemble mean", "o", "C0"),
    ("rotation_std_member", "single members", "s", "C1"),
    ("rotation_std_ntk", "augmented MLP NTK μ_s", "^", "C2"),
]


def plot_rotation_std(path: Path, records: Sequence[dict[str, Any]], summary: dict[str, Any]) -> Path:
    """Three panels: the rotation std at the last recorded step against k (at the base width)
    and against width (at k = width_k), and at every recorded step against ensemble size (at
    both) with the law of E independent members around μ_s, √(NTK² + (member² − NTK²) / E);
    each beside the SO(3) NTK's."""

    so3 = max(summary["rotation_std_so3"], 1e-17)  # an exact 0 on the log axis
    with figure(1, 3, figsize=(13.0, 4.2), dpi=120, sharey=True) as (fig, axes):
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
        base = sorted((r for r in records if (r["k"], r["width"]) == (summary["width_k"], summary["width"])), key=lambda r: r["step"])
        ax = axes[2]
        for i, r in enumerate(base):
            draw_size_law(ax, sizes, r, "rotation_std_{}", f"C{i}", f"mean of E members, step {r['step']}")
        ax.plot([], [], "--", color="grey", linewidth=1, label="√(NTK² + (member² − NTK²) / E)")
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


def draw_size_law(ax: Any, sizes: Sequence[int], record: dict[str, Any], key: str, color: str, label: str) -> None:
    """On ``ax``: the spread ``key.format("E<size>")`` of the mean of E members against E, and
    dashed, the law of E independent members around the NTK, √(NTK² + (member² − NTK²) / E),
    from ``key.format("member")`` and ``key.format("ntk")``."""
    ax.plot(sizes, [record[key.format(f"E{s}")] for s in sizes], "o-", color=color, markerfacecolor="none", label=label)
    ntk, member = record[key.format("ntk")], record[key.format("member")]
    noise = max(member**2 - ntk**2, 0.0)
    ax.plot(sizes, [(ntk**2 + noise / s) ** 0.5 for s in sizes], "--", color=color, linewidth=1)
