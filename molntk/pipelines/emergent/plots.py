"""Plots of ``emergent-ising``: convergence in width and relative orbit std over training."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from molntk.pipelines.emergent.measures import loglog_slope
from molntk.pipelines.files import figure, save_figure


def plot_width_convergence(path: Path, records: Sequence[dict[str, Any]], steps: Sequence[int]) -> Path:
    """The ensemble mean against the NTK prediction, against width (log-log), at each of
    ``steps``, with its bias (the Monte Carlo part removed) and fitted slopes; at the last of
    them also single members against the NTK, the Monte Carlo floor √(Σ_t / E) and a 1/width
    guide."""
    with figure(figsize=(6.4, 4.4), dpi=120) as (fig, ax):
        for i, step in enumerate(steps):
            rows = sorted((r for r in records if r["augmented"] and r["step"] == step), key=lambda r: r["width"])
            widths = [r["width"] for r in rows]
            errors = [r["mean_error"] for r in rows]
            excess = [r["mean_error_excess"] for r in rows]
            slope, slope_excess = loglog_slope(widths, errors), loglog_slope(widths, excess)
            text = f"ensemble mean vs NTK, step {step}" + ("" if slope is None else f" (slope {slope:.2f})")
            color = f"C{i}"
            ax.plot(widths, errors, "o-", color=color, label=text, markerfacecolor="none")
            points = [(w, e) for w, e in zip(widths, excess) if e > 0]
            if points:
                text = "  its bias (Monte Carlo part removed)" + ("" if slope_excess is None else f", slope {slope_excess:.2f}")
                ax.plot(*zip(*points), "^--", color=color, label=text, markerfacecolor="none")
        last = sorted((r for r in records if r["augmented"] and r["step"] == steps[-1]), key=lambda r: r["width"])
        widths = [r["width"] for r in last]
        ax.plot(widths, [r["member_deviation"] for r in last], "D-.", color="k", label=f"single members vs NTK, step {steps[-1]}")
        ax.plot(widths, [r["mc_floor"] for r in last], ":", color="k", label=f"Monte Carlo floor √(Σ_t / E), step {steps[-1]}")
        first = last[0]["mean_error"]
        ax.plot(widths, [first * widths[0] / w for w in widths], color="grey", linewidth=1, label="∝ 1/width")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xticks(widths, [str(w) for w in widths], minor=False)
        ax.set_xticks([], minor=True)
        ax.set_xlabel("hidden width")
        ax.set_ylabel("relative RMS difference (in distribution)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        return save_figure(fig, path)


#: (record key, label, marker, colour) of the curves of :func:`draw_over_steps`.
ORBIT_CURVES = [("ensemble", "ensemble", "o", "C0"), ("member", "single members", "s", "C1"), ("ntk", "NTK", "^", "C2")]


def draw_over_steps(
    ax: Any, rows: Sequence[dict[str, Any]], key: str, name: str, curves: Sequence[tuple[str, str, str, str]], style: str, tag: str
) -> None:
    """On ``ax``: ``<key>_<who>_<name>`` of the records ``rows`` (one ensemble's) against the
    gradient-descent step (log), one curve per (who, label, marker, colour) of ``curves``,
    in line ``style``, labelled "label (tag)"."""
    rows = sorted(rows, key=lambda r: r["step"])
    steps = [r["step"] for r in rows]
    for who, text, marker, color in curves:
        values = [max(r[f"{key}_{who}_{name}"], 1e-17) for r in rows]  # an exact 0 on a log axis
        ax.plot(steps, values, linestyle=style, marker=marker, color=color, markerfacecolor="none", label=f"{text} ({tag})")
    ax.set_xscale("log")
    ax.set_xlabel("gradient-descent step")
    ax.grid(True, which="both", alpha=0.3)


def plot_orbit_std(path: Path, records: Sequence[dict[str, Any]], width: int) -> Path:
    """Relative orbit std over training steps, in and out of distribution: the augmented
    ensemble at ``width``, its single members, the NTK prediction, and the un-augmented
    ensemble and NTK where they ran."""
    with figure(1, 2, figsize=(10.0, 4.2), dpi=120, sharey=True) as (fig, axes):
        for ax, name in zip(axes, ("in", "ood")):
            for augmented, tag, style in [(True, "augmented", "-"), (False, "no augmentation", "--")]:
                rows = [r for r in records if r["augmented"] is augmented and r["width"] == width]
                if rows:
                    draw_over_steps(ax, rows, "orbit_std", name, ORBIT_CURVES, style, tag)
            ax.set_yscale("log")
            ax.set_title("in distribution (±1 spins)" if name == "in" else "out of distribution (N(0, 1) spins)", fontsize=9)
        axes[0].set_ylabel(f"relative orbit std, width {width}")
        axes[1].legend(fontsize=7)
        fig.tight_layout()
        return save_figure(fig, path)
