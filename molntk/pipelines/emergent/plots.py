"""Plots of ``emergent-ising``: convergence in width and relative orbit std over training."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from molntk.pipelines.files import save_figure


def plot_width_convergence(path: Path, records: Sequence[dict[str, Any]], step: int, slope: float | None) -> Path:
    """Ensemble mean and single members against the NTK prediction at ``step``, against width
    (log-log), with the Monte Carlo floor √(Σ/E) and a 1/width guide."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = sorted((r for r in records if r["augmented"] and r["step"] == step), key=lambda r: r["width"])
    widths = [r["width"] for r in rows]
    fig, ax = plt.subplots(figsize=(6.0, 4.2), dpi=120)
    try:
        label = "ensemble mean vs NTK (in)" + ("" if slope is None else f", slope {slope:.2f}")
        for key, text, style in [
            ("mean_error", label, "o-"),
            ("mean_error_ood", "ensemble mean vs NTK (ood)", "s--"),
            ("mean_error_excess", "in, above the Monte Carlo floor", "^-."),
            ("mc_floor", "Monte Carlo floor √(Σ_t / E)", ":"),
            ("member_deviation", "single members vs NTK (in)", "D-"),
        ]:
            points = [(w, r[key]) for w, r in zip(widths, rows) if r[key] > 0]
            if points:
                ax.plot(*zip(*points), style, label=text, markerfacecolor="none")
        first = rows[0]["mean_error"]
        ax.plot(widths, [first * widths[0] / w for w in widths], color="grey", linewidth=1, label="∝ 1/width")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("hidden width")
        ax.set_ylabel(f"relative RMS difference at step {step}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        return save_figure(fig, path)
    finally:
        plt.close(fig)


def plot_orbit_std(path: Path, records: Sequence[dict[str, Any]], width: int) -> Path:
    """Relative orbit std over training steps, in and out of distribution: the augmented
    ensemble at ``width``, its single members, the NTK prediction, and the un-augmented
    ensemble and NTK where they ran."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10.0, 4.2), dpi=120, sharey=True)
    try:
        for ax, name in zip(axes, ("in", "ood")):
            for augmented, tag, style in [(True, "augmented", "-"), (False, "no augmentation", "--")]:
                rows = sorted((r for r in records if r["augmented"] is augmented and r["width"] == width), key=lambda r: r["step"])
                if not rows:
                    continue
                steps = [r["step"] for r in rows]
                for key, text, marker in [("ensemble", "ensemble", "o"), ("member", "single members", "s"), ("ntk", "NTK", "^")]:
                    values = [max(r[f"orbit_std_{key}_{name}"], 1e-17) for r in rows]
                    ax.plot(steps, values, linestyle=style, marker=marker, markerfacecolor="none", label=f"{text} ({tag})")
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("gradient-descent step")
            ax.set_title("in distribution (±1 spins)" if name == "in" else "out of distribution (N(0, 1) spins)", fontsize=9)
            ax.grid(True, which="both", alpha=0.3)
        axes[0].set_ylabel(f"relative orbit std, width {width}")
        axes[1].legend(fontsize=7)
        fig.tight_layout()
        return save_figure(fig, path)
    finally:
        plt.close(fig)
