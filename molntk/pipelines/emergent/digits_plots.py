"""Plots of ``emergent-digits``: orbit measures over training for every k, and the orbit std
against ensemble size (the width plot is emergent-ising's
:func:`~molntk.pipelines.emergent.plots.plot_width_convergence`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from molntk.pipelines.emergent.digits_data import SETS
from molntk.pipelines.emergent.plots import ORBIT_CURVES, draw_over_steps
from molntk.pipelines.emergent.so3_plots import draw_size_law
from molntk.pipelines.files import figure, save_figure

#: The augmented ensembles' curves: emergent-ising's and the C_k GCNN's NTK prediction.
DIGITS_CURVES = [*ORBIT_CURVES[:2], ("ntk", "CNN NTK μ_s", "^", "C2"), ("gcnn", "C_k GCNN NTK μ_s", "v", "C3")]
#: What the evaluation sets are.
TITLES = {"in": "test digits", "ood": "Gaussian-noise images"}


def plot_orbit_measure(path: Path, records: Sequence[dict[str, Any]], width: int, key: str, ylabel: str, *, log: bool) -> Path:
    """``key`` ("orbit_std" or "orbit_same") over training steps on the C_k orbits: one column
    per k, rows in and out of distribution; the augmented ensemble at ``width``, its members,
    the CNN and GCNN NTK predictions, and (dashed) the un-augmented ensemble and CNN NTK."""
    ks = sorted({r["k"] for r in records})
    with figure(2, len(ks), figsize=(4.2 * len(ks), 7.0), dpi=120, sharey=not log, squeeze=False) as (fig, axes):
        for col, k in enumerate(ks):
            for row, name in enumerate(SETS):
                ax = axes[row][col]
                for augmented, tag, style, curves in [(True, f"C{k}", "-", DIGITS_CURVES), (False, "no aug.", "--", DIGITS_CURVES[:3])]:
                    rows = [r for r in records if (r["k"], r["augmented"], r["width"]) == (k, augmented, width)]
                    if rows:
                        draw_over_steps(ax, rows, key, name, curves, style, tag)
                if log:
                    ax.set_yscale("log")
                ax.set_title(f"C{k} orbits of {TITLES[name]}", fontsize=9)
            axes[0][col].legend(fontsize=6)
        for row in axes:
            row[0].set_ylabel(f"{ylabel}, width {width}")
        fig.tight_layout()
        return save_figure(fig, path)


def plot_ensemble_size(path: Path, records: Sequence[dict[str, Any]], sizes: Sequence[int]) -> Path:
    """The relative orbit std of the mean of E members against E for every k (``records``:
    the augmented ensembles at the base width and last step), in and out of distribution,
    with the law of E independent members around the NTK prediction (a law for the relative
    measure only while the mean's size ⟨|mean_g|⟩ does not change with E: once μ_s is large
    against the members' spread, late in training)."""
    with figure(1, 2, figsize=(10.0, 4.2), dpi=120, sharey=True) as (fig, axes):
        for ax, name in zip(axes, SETS):
            for i, r in enumerate(sorted(records, key=lambda r: r["k"])):
                draw_size_law(ax, sizes, r, f"orbit_std_{{}}_{name}", f"C{i}", f"trained on C{r['k']} orbits")
            ax.plot([], [], "--", color="grey", linewidth=1, label="√(NTK² + (member² − NTK²) / E)")
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xticks(list(sizes), [str(s) for s in sizes])
            ax.set_xlabel(f"ensemble size E (width {records[0]['width']}, step {records[0]['step']})")
            ax.set_title(f"C_k orbits of {TITLES[name]}", fontsize=9)
            ax.grid(True, which="both", alpha=0.3)
        axes[0].set_ylabel("relative orbit std of the mean of E members")
        axes[1].legend(fontsize=7)
        fig.tight_layout()
        return save_figure(fig, path)
