"""``FalkonRegressor``: the Nyström kernel ridge of the sparse regressor, solved by Falkon's
preconditioned conjugate gradients without factoring an n × m matrix.

Falkon (Rudi, Carratino & Rosasco, NeurIPS 2017; Meanti et al., NeurIPS 2020). ``fit(K_nm,
K_mm, Y)`` takes the kernel K_nm (n, m) of n training points against m inducing points, the
inducing kernel K_mm (m, m) and targets Y ((n,) or (n, k)), standardised per target to Z
(:class:`~molntk.regression.scaling.TargetScaler`). With the jittered inducing kernel
K_j = K_mm + j·I the inducing weights are

    W = (K_mn K_nm + λ K_j)⁻¹ K_mn Z  (m, k),      prediction K_tm W, un-standardised.

This is :class:`~molntk.regression.sparse.SparseKernelRegressor`'s model: with B = K_nm R
and R Rᵀ = K_j⁻¹ (R invertible), push-through gives R Bᵀ (B Bᵀ + λI)⁻¹ Z =
R (BᵀB + λI)⁻¹ Bᵀ Z = R [Rᵀ (K_mn K_nm + λ K_j) R]⁻¹ Rᵀ K_mn Z = W, since Rᵀ K_j R = I: kernel
ridge on the Nyström kernel K̃ = K_nm K_j⁻¹ K_mn, the sparse regressor on K_j (which is
nonsingular). The jitter j (``jitter`` × mean(diag K_mm), raised by factors of 10 until the
Cholesky factorisation succeeds: K_mm is PSD only up to quadrature error; ``jitter_``
records the relative value used) changes K̃ by −j K_nm K_mm⁻² K_mn to first order: at most
j / s_min(K_mm) relative, where the sparse regressor instead drops the eigenvalues of K_mm
below its ``rank_rtol`` · s_max.

Preconditioner (Cholesky factors only). T upper triangular with TᵀT = K_j, G = K_nm T⁻¹
(n, m) the Nyström features (G Gᵀ = K̃, never formed), and A upper triangular with
AᵀA = c C₀ + λI, where c C₀ ≈ GᵀG = T⁻ᵀ K_mn K_nm T⁻¹. Then
K_mn K_nm + λ K_j = Tᵀ (GᵀG + λI) T ≈ Tᵀ AᵀA T = (A T)ᵀ (A T). Substituting W = T⁻¹ A⁻¹ β
and multiplying by A⁻ᵀ T⁻ᵀ gives the symmetric positive definite system

    M β = b,   M = A⁻ᵀ (GᵀG + λI) A⁻¹,   b = A⁻ᵀ T⁻ᵀ K_mn Z,

with M = I where c C₀ = GᵀG, whatever cond(K_mm) and λ. Conjugate gradients run on
M β = b, all k columns at once with per-column step sizes. One product M β costs two
triangular solves with A and two with T and one pass over K_nm in row blocks K_b
(``block_size`` rows): t = K_b u, h += K_bᵀ t, so K_nm may be a read-only ``np.memmap`` or a
torch tensor and only one block at a time is converted and moved to the device. A column
stops at ‖b_j − M β_j‖ ≤ ``tol`` ‖b_j‖; since ‖β − β*‖ ≤ ‖r‖ / λ_min(M) and
‖β*‖ ≥ ‖b‖ / λ_max(M), ‖β − β*‖ / ‖β*‖ ≤ cond(M) · ``tol`` (and ‖β − β*‖ is the error of W in
the norm of K_mn K_nm + λ K_j).

The estimate c C₀ (``preconditioner``):

- ``"sampled-rows"`` (default): C₀ = G_sᵀ G_s for s training rows drawn by ``seed``
  (``preconditioner_rows``), c = n / s: an unbiased estimate of GᵀG, exact when s = n.
  Falkon's own preconditioner is this with the inducing points as the sampled rows (then
  G_s = K_mm T⁻¹ = Tᵀ and c C₀ = (n/m) T Tᵀ); here the rows are molecules and the inducing
  points atom environments, so the rows are sampled separately. Costs 3 s m² flops once
  (6 m³ at s = 2m; with s ≤ m the estimate is nearly singular). With s = n, M = I up to
  rounding and PCG stops after one or two iterations at any λ: the 3 n m² flops cost as much
  as 3m/4 passes over K_nm. Default s: all n rows when λ is searched (``reg="cv"``), whose
  grid takes more passes than that whenever small λ are on it (QM9's sum of two SO(3) NTKs,
  n = 10,000, m = 2,000: s = 2m needed 7–268 iterations per λ, 2,600 in all, 71 s; s = n
  one per λ and the same hold-out curve, 4.7 s); min(n, 2m) for one given λ, which takes
  tens of iterations (``benchmarks/falkon_solver.py``).
- ``"subsample"``: Falkon's C₀ = T Tᵀ with c = n / m, as if K_mn K_nm ≈ (n/m) K_mm² (the
  inducing points a uniform subsample of the rows).
- ``"frobenius"``: C₀ = T Tᵀ with c = ‖K_nm‖_F² / ‖K_mm‖_F², which matches the traces
  tr(K_mn K_nm) = c tr(K_mm²), from one pass over K_nm.

On synthetic molecules (sums over 10–26 atom environments, n = 5,000–20,000, m = 2,000–5,000,
``benchmarks/falkon_solver.py``, docs/benchmarks.md) ``"sampled-rows"`` needs 7–16× fewer
iterations than Falkon's T Tᵀ estimates, which at m = 5,000 do not reach 1e-8 in 500.
``"subsample"`` and ``"frobenius"`` converge alike at small λ (as λ → 0, A → √c T and
M → T⁻ᵀ GᵀG T⁻¹ / c, whose condition number does not depend on c); at λ = 1e-2 × mean diag
``"subsample"`` takes half the iterations of ``"frobenius"``. The T Tᵀ estimates cost
2 m³ flops against 3 s m² for the sampled one: use them when O(m³) work, not the passes
over K_nm, is what costs.

λ (``reg``): a number ≥ 0, or ``"cv"``: a seeded hold-out split of the training rows (the
first round(``validation_fraction`` · n) of ``numpy.random.default_rng(seed).permutation(n)``
are held out), PCG on the rest for every λ = ``relative_grid`` × mean(diag K̃) (default
:data:`~molntk.regression.selection.DEFAULT_RELATIVE_GRID`), from the largest λ to the
smallest, each warm-started from the previous weights (β₀ = A T W_prev), scored by the mean
squared (``cv_loss="squared"``) or absolute (``"absolute"``) error of the held-out Z per
target (:class:`~molntk.regression.selection.CVResult`, criterion ``"holdout"``), averaged
over targets; then a solve on all training rows at the best λ, warm-started from its
weights. A λ at which c C₀ + λI does not factor (λ at the rounding error of C₀) ends the
descent with a warning; the smaller λ are not scored. mean(diag K̃) = mean_i ‖T⁻ᵀ K_nm[i]ᵀ‖² is taken over
a seeded sample of :data:`DIAG_SAMPLE_ROWS` rows (all rows when n is smaller): exact would
cost O(n m²), more than the whole solve; the sample costs at most 3 · DIAG_SAMPLE_ROWS / m
times the Cholesky factorisation, and its relative error (the spread of the diagonal over
√1000, ~1 %) is far below the grid's spacing of half a decade.

Cost: m³/3 flops for T, 2 m³ for T Tᵀ or 3 s m² for the sampled C₀, per λ m³/3 for A,
and per iteration 4 n m k for the pass over K_nm and 4 m² k for the triangular solves;
memory: three m × m matrices (T, C₀, A) on the device besides one block of K_nm and the
(n, k) targets; on a CUDA device K_nm itself is copied there once when it takes at most
:data:`RESIDENT_FRACTION` of the free memory (the passes then read device memory).

Model files: :meth:`FalkonRegressor.fitted_arrays` / ``load_fitted_arrays`` (solver
``"falkon"``), plain arrays as for the sparse regressor.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import KW_ONLY, dataclass, replace
from typing import ClassVar

import numpy as np
import torch
from sklearn.base import BaseEstimator, RegressorMixin

from molntk.errors import InputError
from molntk.regression import validation
from molntk.regression.inducing import InducingWeights
from molntk.regression.nystrom import jittered_cholesky
from molntk.regression.scaling import TargetScaler
from molntk.regression.selection import CVResult, check_loss, checked_relative_grid, residual_loss
from molntk.scale.devices import resolve_device
from molntk.utils.checks import integer

PRECONDITIONERS = ("sampled-rows", "frobenius", "subsample")
DTYPES = {"float64": torch.float64, "float32": torch.float32}
#: Rows of K_nm sampled (seeded) to estimate mean(diag K̃) for the λ grid; all rows below it.
DIAG_SAMPLE_ROWS = 1000
#: Entries of K_nm per row block when ``block_size`` is None (16 MiB of float64).
BLOCK_ENTRIES = 1 << 21
#: Rows per block when C₀ = Σ G_iᵀ G_i is accumulated (at least): each block is one triangular
#: solve and one product with this many right-hand sides, not ``block_size``'s few at large m.
GRAM_BLOCK_ROWS = 1024
#: Share of a CUDA device's free memory that K_nm may take to be moved there once (fit).
RESIDENT_FRACTION = 0.5


class FalkonConvergenceWarning(UserWarning):
    """PCG stopped at ``max_iter`` above ``tol``: the inducing weights are accurate only to
    about cond(M) times the relative residual reached."""


@dataclass(frozen=True, eq=False)
class KernelRows:
    """The rows ``index`` (sorted; None: all) of K_nm, read in blocks of ``block_rows`` rows
    and moved to ``device`` as ``dtype``: only one block is converted at a time."""

    K_nm: np.ndarray | torch.Tensor
    index: np.ndarray | None
    block_rows: int
    device: torch.device
    dtype: torch.dtype

    @property
    def n(self) -> int:
        return int(self.K_nm.shape[0] if self.index is None else self.index.size)

    def blocks(self) -> Iterator[tuple[slice, torch.Tensor]]:
        """(positions among the selected rows, K_b on the device) for consecutive blocks."""
        for start in range(0, self.n, self.block_rows):
            where = slice(start, min(start + self.block_rows, self.n))
            rows = where if self.index is None else self.index[where]
            if isinstance(self.K_nm, torch.Tensor):
                block = self.K_nm[rows if self.index is None else torch.as_tensor(rows, device=self.K_nm.device)]
            else:
                with warnings.catch_warnings():  # a read-only memmap's block: only read, never written
                    warnings.filterwarnings("ignore", "The given NumPy array is not writable", UserWarning)
                    block = torch.from_numpy(np.asarray(self.K_nm[rows]))
            yield where, block.to(device=self.device, dtype=self.dtype)

    def gram_times(self, V: torch.Tensor) -> torch.Tensor:
        """K_mn K_nm V (m, k) over the selected rows: Σ_b K_bᵀ (K_b V)."""
        out = torch.zeros_like(V)
        for _, block in self.blocks():
            out += block.mT @ (block @ V)
        return out

    def transpose_times(self, Z: torch.Tensor) -> torch.Tensor:
        """K_mn Z (m, k) for Z (selected rows, k)."""
        out = torch.zeros((self.K_nm.shape[1], Z.shape[1]), device=self.device, dtype=self.dtype)
        for where, block in self.blocks():
            out += block.mT @ Z[where]
        return out

    def times(self, V: torch.Tensor) -> torch.Tensor:
        """K_nm V (selected rows, k)."""
        return torch.cat([block @ V for _, block in self.blocks()])


@dataclass(frozen=True, eq=False)
class Preconditioner:
    """T (upper, TᵀT = K_j), the Gram estimate C₀ and per-row weights w (n,): on a set R of
    rows, GᵀG ≈ c C₀ with c = Σ_{i∈R} w_i (module docstring)."""

    T: torch.Tensor
    gram: torch.Tensor
    row_weights: np.ndarray

    def scale(self, rows: KernelRows) -> float:
        """c = Σ_{i ∈ rows} w_i."""
        return float(np.sum(self.row_weights if rows.index is None else self.row_weights[rows.index]))

    def system(self, rows: KernelRows, reg: float) -> PreconditionedSystem:
        """M β = b of λ on ``rows``: A = chol(c C₀ + λI), upper, factored in place (one m × m buffer)."""
        A = torch.mul(self.gram, self.scale(rows))
        A.diagonal().add_(reg)
        info = torch.empty((), dtype=torch.int32, device=A.device)
        torch.linalg.cholesky_ex(A, upper=True, out=(A, info))
        if int(info) != 0:
            raise InputError(
                "reg", f"the preconditioner c C₀ + λI is not positive definite in {A.dtype} (λ = {reg:.3g}): use a larger λ"
            )
        return PreconditionedSystem(rows, self.T, A, reg)


@dataclass(frozen=True, eq=False)
class PreconditionedSystem:
    """M β = b of one λ on ``rows`` (module docstring): T (TᵀT = K_j) and A (AᵀA = c C₀ + λI)."""

    rows: KernelRows
    T: torch.Tensor
    A: torch.Tensor
    reg: float

    def weights(self, beta: torch.Tensor) -> torch.Tensor:
        """W = T⁻¹ A⁻¹ β."""
        return _solve_upper(self.T, _solve_upper(self.A, beta))

    def coordinates(self, W: torch.Tensor) -> torch.Tensor:
        """β = A T W (the inverse of :meth:`weights`), for warm starts."""
        return self.A @ (self.T @ W)

    def rhs(self, KtZ: torch.Tensor) -> torch.Tensor:
        """b = A⁻ᵀ T⁻ᵀ K_mn Z from K_mn Z."""
        return _solve_lower(self.A.mT, _solve_lower(self.T.mT, KtZ))

    def apply(self, beta: torch.Tensor) -> torch.Tensor:
        """M β = A⁻ᵀ (T⁻ᵀ K_mn K_nm W + λ A⁻¹ β) with W = T⁻¹ A⁻¹ β, since
        λ T⁻ᵀ K_j W = λ T W = λ A⁻¹ β."""
        inner = _solve_upper(self.A, beta)
        W = _solve_upper(self.T, inner)
        return _solve_lower(self.A.mT, _solve_lower(self.T.mT, self.rows.gram_times(W)) + self.reg * inner)


def _solve_upper(U: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """U⁻¹ B for upper triangular U."""
    return torch.linalg.solve_triangular(U, B, upper=True)


def _solve_lower(L: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """L⁻¹ B for lower triangular L."""
    return torch.linalg.solve_triangular(L, B, upper=False)


def conjugate_gradients(
    system: PreconditionedSystem, b: torch.Tensor, beta: torch.Tensor | None, tol: float, max_iter: int
) -> tuple[torch.Tensor, np.ndarray]:
    """CG on M β = b for all k columns at once from β₀ = ``beta`` (None: 0), with per-column
    steps α_j = r_jᵀr_j / p_jᵀM p_j and directions p_j ← r_j + γ_j p_j,
    γ_j = r_jᵀr_j(new) / r_jᵀr_j(old); a column stops (α_j = γ_j = 0) once ‖r_j‖ ≤ tol ‖b_j‖.
    Returns β and the relative residuals ‖r_j‖ / ‖b_j‖, (iterations + 1, k)."""
    b_norm = torch.linalg.vector_norm(b, dim=0)
    b_norm = torch.where(b_norm > 0, b_norm, torch.ones_like(b_norm))
    if beta is None:
        beta, r = torch.zeros_like(b), b.clone()
    else:
        r = b - system.apply(beta)
    p = r.clone()
    rr = (r * r).sum(dim=0)
    history = [(rr.sqrt() / b_norm).cpu().numpy()]
    for _ in range(max_iter):
        active = torch.as_tensor(history[-1] > tol, device=b.device)
        if not active.any():
            break
        Mp = system.apply(p)
        alpha = torch.where(active, rr / (p * Mp).sum(dim=0), torch.zeros_like(rr))
        beta = beta + alpha * p
        r = r - alpha * Mp
        rr_new = (r * r).sum(dim=0)
        p = r + torch.where(active, rr_new / rr, torch.zeros_like(rr)) * p
        rr = rr_new
        history.append((rr.sqrt() / b_norm).cpu().numpy())
    return beta, np.array(history)


def holdout_split(n: int, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(fit rows, held-out rows), each sorted: the first round(fraction · n) of
    ``numpy.random.default_rng(seed).permutation(n)`` are held out; InputError naming
    ``validation_fraction`` unless both parts are non-empty."""
    held = int(round(fraction * n))
    if not 1 <= held <= n - 1:
        raise InputError(
            "validation_fraction", f"{fraction} of {n} training rows leaves {held} held out and {n - held} to fit"
        )
    perm = np.random.default_rng(seed).permutation(n)
    return np.sort(perm[held:]), np.sort(perm[:held])


@dataclass(eq=False, repr=False)
class FalkonRegressor(InducingWeights, RegressorMixin, BaseEstimator):
    """Kernel ridge on the Nyström kernel K̃ = K_nm K_j⁻¹ K_mn of m inducing points (module
    docstring) by Falkon's preconditioned conjugate gradients, a scikit-learn estimator:
    ``fit(K_nm, K_mm, Y)``, ``predict(K_tm)``. At the same λ its predictions are those of
    :class:`~molntk.regression.sparse.SparseKernelRegressor` (on K_mm + j·I).

    ``reg``: λ ≥ 0 (> 0 unless K_nm has full column rank), or ``"cv"`` to choose it on a
    hold-out split (``validation_fraction`` of the training rows, drawn by ``seed``) over
    ``relative_grid`` (× mean(diag K̃); default 1e-10 … 1), scored by ``cv_loss`` ("squared"
    or "absolute", module docstring). ``standardize``: fit on
    (Y − mean) / std per target. ``tol``: relative residual ‖r_j‖ / ‖b_j‖ of every target
    column at which PCG stops; ``max_iter``: at most this many iterations per solve
    (:class:`FalkonConvergenceWarning` otherwise). ``jitter``: K_j = K_mm + j·I,
    j = ``jitter`` × mean(diag K_mm), raised ×10 until the Cholesky factorisation succeeds
    (up to :data:`~molntk.regression.nystrom.MAX_JITTER`). ``preconditioner``: the estimate c C₀ of GᵀG in
    AᵀA = c C₀ + λI, ``"sampled-rows"`` (from ``preconditioner_rows`` training rows drawn by
    ``seed``; None: all n when ``reg="cv"``, else min(n, 2m)), ``"frobenius"`` or ``"subsample"``
    (module docstring).
    ``block_size``: rows of K_nm per block (None: :data:`BLOCK_ENTRIES` / m). ``device``:
    ``"cpu"``, ``"cuda"`` or ``"auto"`` (:func:`~molntk.scale.devices.resolve_device`), where
    the factors live and the products run; ``dtype``: ``"float64"`` or ``"float32"`` (half the
    memory and traffic, for ``tol`` ≳ 1e-5 only). The parameters are stored as given;
    :meth:`check_params` (called first by ``fit``) raises :class:`InputError` naming the
    first one out of range.

    Default ``tol`` = 1e-8: the weights are then accurate to about cond(M) · 1e-8 relative in
    the energy norm, and cond(M) is of order 10–10² with the default preconditioner, so
    predictions agree with a direct solve to ~1e-6 relative or better, far below the kernels'
    and the model's own errors; each further decade costs ≈ √cond(M) · ln(10) / 2 iterations,
    each a pass over K_nm.

    The model is the NTK mean of the converged network: ``method`` = "ntk" and ``t`` = ∞.

    Fitted attributes: ``solver_`` ("falkon"), ``reg_`` (λ used), ``reg_relative_``
    (λ / mean(diag K̃)), ``cv_result_`` (the :class:`~molntk.regression.selection.CVResult`
    curve, or None), ``cv_iterations_`` (PCG iterations per grid λ, ascending λ, or None),
    ``jitter_`` (relative jitter used), ``preconditioner_scale_`` (c of the final solve),
    ``iterations_``, ``residual_norms_`` ((iterations_ + 1, k) relative residuals of the final
    solve), ``converged_``, ``n_inducing_`` (m), ``target_mean_``, ``target_scale_`` ((k,)
    arrays), ``n_train_``, ``n_targets_``, ``fit_seconds_``. :meth:`load_fitted_arrays` sets
    ``solver_``, ``reg_``, ``jitter_``, ``n_inducing_``, ``target_mean_``, ``target_scale_``
    and ``n_targets_``.
    """

    method: ClassVar[str] = "ntk"
    t: ClassVar[float] = math.inf
    SOLVER: ClassVar[str] = "falkon"
    KIND: ClassVar[str] = "Falkon regressor"

    _: KW_ONLY
    reg: float | str = "cv"
    cv_loss: str = "squared"
    standardize: bool = True
    relative_grid: Sequence[float] | None = None
    validation_fraction: float = 0.2
    seed: int = 0
    tol: float = 1e-8
    max_iter: int = 500
    jitter: float = 1e-10
    preconditioner: str = "sampled-rows"
    preconditioner_rows: int | None = None
    block_size: int | None = None
    device: str = "cpu"
    dtype: str = "float64"

    def check_params(self) -> None:
        """Raise :class:`InputError` naming the first parameter out of range."""
        if self.reg != "cv":
            validation.nonnegative(self.reg, "reg")
        check_loss(self.cv_loss, "holdout")
        checked_relative_grid(self.relative_grid)
        fraction = validation.positive(self.validation_fraction, "validation_fraction")
        if fraction >= 1:
            raise InputError("validation_fraction", f"must be in (0, 1), got {fraction}")
        integer(self.seed, "seed", minimum=0)
        validation.positive(self.tol, "tol")
        integer(self.max_iter, "max_iter", minimum=1)
        validation.positive(self.jitter, "jitter")
        validation.choice(self.preconditioner, "preconditioner", PRECONDITIONERS)
        if self.preconditioner_rows is not None:
            integer(self.preconditioner_rows, "preconditioner_rows", minimum=1)
        if self.block_size is not None:
            integer(self.block_size, "block_size", minimum=1)
        self._device()
        validation.choice(self.dtype, "dtype", tuple(DTYPES))

    def _device(self) -> torch.device:
        """``device`` resolved; InputError naming it when torch has no such device."""
        if not isinstance(self.device, str):
            raise InputError("device", f"must be 'cpu', 'cuda', 'auto' or a torch device name, got {self.device!r}")
        try:
            return resolve_device(self.device)
        except (ValueError, RuntimeError) as exc:
            raise InputError("device", str(exc)) from None

    def fit(self, K_nm: object, K_mm: object, Y: object) -> FalkonRegressor:
        """Fit on K_nm (n, m), K_mm (m, m) and targets Y ((n,) or (n, k)); K_nm is only read."""
        self.check_params()
        start = time.perf_counter()
        device, dtype = self._device(), DTYPES[self.dtype]
        K_mm_host = validation.symmetric_kernel(K_mm, "K_mm")
        m = K_mm_host.shape[0]
        K_nm = _resident(_cross_kernel(K_nm, m), device, dtype)
        n = int(K_nm.shape[0])
        Y2, was_1d = validation.targets(Y, "Y", rows=n)
        scaler = TargetScaler.fit(Y2, enabled=bool(self.standardize))
        Z = torch.as_tensor(scaler.transform(Y2), device=device, dtype=dtype)
        every = KernelRows(K_nm, None, self.block_size or max(1, BLOCK_ENTRIES // m), device, dtype)
        squares = _row_squares(every)
        T, jitter = jittered_cholesky(K_mm_host, self.jitter, device, dtype)
        mean_diag = _mean_nystrom_diagonal(every, T, self.seed)
        if mean_diag <= 0:
            raise InputError("K_nm", "K̃ = K_nm K_mm⁻¹ K_mn has a zero diagonal; cannot scale the λ grid")
        frobenius = squares / float(np.sum(K_mm_host**2))
        warm, cv_result, cv_iterations = None, None, None
        if self.reg == "cv":
            fit_rows, held = holdout_split(n, float(self.validation_fraction), int(self.seed))
            pre = self._preconditioner(every, T, frobenius, fit_rows)
            cv_result, cv_iterations, warm = self._select(replace(every, index=fit_rows), pre, Z, held, mean_diag)
            pre = self._completed(pre, every, fit_rows)
        else:
            pre = self._preconditioner(every, T, frobenius, np.arange(n))
        reg = float(self.reg) if cv_result is None else cv_result.best_reg
        self.preconditioner_scale_ = pre.scale(every)
        weights, history = self._solve(pre.system(every, reg), every.transpose_times(Z), warm)
        self._set_state(weights.cpu().numpy().astype(np.float64), scaler, was_1d, reg, jitter)
        self.reg_relative_ = reg / mean_diag
        self.cv_result_, self.cv_iterations_ = cv_result, cv_iterations
        self.iterations_ = history.shape[0] - 1
        self.residual_norms_ = history
        self.converged_ = bool(np.all(history[-1] <= self.tol))
        self.n_train_ = n
        self.fit_seconds_ = time.perf_counter() - start
        return self

    def _preconditioner(
        self, every: KernelRows, T: torch.Tensor, frobenius: np.ndarray, rows: np.ndarray
    ) -> Preconditioner:
        """T, C₀ and the row weights w of ``preconditioner`` for a solve on ``rows`` (module
        docstring): ``"sampled-rows"`` C₀ = Σ_{i ∈ S ∩ rows} G_iᵀ G_i over the sample S of
        :meth:`_sample`, w_i = 1 / |S ∩ rows|; else C₀ = T Tᵀ with w_i = ‖K_nm[i]‖² / ‖K_mm‖_F²
        (``frobenius``, given) or 1/m."""
        if self.preconditioner == "frobenius":
            return Preconditioner(T, T @ T.mT, frobenius)
        if self.preconditioner == "subsample":
            return Preconditioner(T, T @ T.mT, np.full(every.n, 1.0 / T.shape[0]))
        part = np.intersect1d(self._sample(every.n, T.shape[0]), rows)
        gram = _add_sampled_gram(every, T, part, torch.zeros_like(T))
        return Preconditioner(T, gram, np.full(every.n, 1.0 / max(part.size, 1)))

    def _completed(self, pre: Preconditioner, every: KernelRows, fit_rows: np.ndarray) -> Preconditioner:
        """``pre`` of the rows ``fit_rows`` extended to all rows: for ``"sampled-rows"`` the
        sampled rows outside ``fit_rows`` are added to C₀ (in place) and w_i = 1/s."""
        if self.preconditioner != "sampled-rows":
            return pre
        sample = self._sample(every.n, pre.T.shape[0])
        gram = _add_sampled_gram(every, pre.T, np.setdiff1d(sample, fit_rows), pre.gram)
        return Preconditioner(pre.T, gram, np.full(every.n, 1.0 / sample.size))

    def _sample(self, n: int, m: int) -> np.ndarray:
        """S: s = min(n, ``preconditioner_rows``) of the n rows drawn by ``seed``, sorted (None:
        all n when λ is searched, else min(n, 2m))."""
        size = min(n, self.preconditioner_rows or (n if self.reg == "cv" else 2 * m))
        if size == n:
            return np.arange(n)
        return np.sort(np.random.default_rng(self.seed).choice(n, size, replace=False))

    def _solve(
        self, system: PreconditionedSystem, KtZ: torch.Tensor, warm: torch.Tensor | None
    ) -> tuple[torch.Tensor, np.ndarray]:
        """W of ``system`` by PCG from the weights ``warm`` (None: 0), with the residual history;
        warns with :class:`FalkonConvergenceWarning` when a column stays above ``tol``."""
        start = None if warm is None else system.coordinates(warm)
        beta, history = conjugate_gradients(system, system.rhs(KtZ), start, float(self.tol), int(self.max_iter))
        if np.any(history[-1] > self.tol):
            warnings.warn(
                f"Falkon PCG stopped after {history.shape[0] - 1} iterations (max_iter) at relative residual "
                f"{history[-1].max():.3g} > tol = {self.tol:g} (λ = {system.reg:.3g}); the weights are accurate "
                "only to about cond(M) times that residual: raise max_iter or use a larger reg",
                FalkonConvergenceWarning,
                stacklevel=3,
            )
        return system.weights(beta), history

    def _select(
        self,
        part: KernelRows,
        pre: Preconditioner,
        Z: torch.Tensor,
        held: np.ndarray,
        mean_diag: float,
    ) -> tuple[CVResult, np.ndarray, torch.Tensor]:
        """Hold-out scores of every λ of the grid, PCG on the rows of ``part`` from the largest λ
        to the smallest with warm starts; the curve, the iterations per λ (ascending λ) and
        the weights at the best λ. Where c C₀ + λI is not positive definite in floating point
        (λ near the rounding of C₀), that λ and the smaller ones are not scored (score inf,
        0 iterations, :class:`FalkonConvergenceWarning`); at the largest λ it is an error."""
        relative = checked_relative_grid(self.relative_grid)
        grid = relative * mean_diag
        KtZ = part.transpose_times(Z[torch.as_tensor(part.index, device=Z.device)])
        heldout = replace(part, index=held)
        Z_held = Z[torch.as_tensor(held, device=Z.device)]
        scores = np.full((grid.size, Z.shape[1]), np.inf)
        iterations = np.zeros(grid.size, dtype=np.int64)
        solutions = {}
        W = None
        for j in reversed(range(grid.size)):
            try:
                system = pre.system(part, float(grid[j]))
            except InputError:  # c C₀ + λI not positive definite in floating point: nor at smaller λ
                if j == grid.size - 1:
                    raise
                warnings.warn(
                    f"Falkon's preconditioner is not positive definite at λ = {relative[j]:.3g} × mean diag K̃ "
                    f"and below: {j + 1} smallest λ of the grid not scored",
                    FalkonConvergenceWarning,
                    stacklevel=3,
                )
                break
            W, history = self._solve(system, KtZ, W)
            scores[j] = residual_loss((Z_held - heldout.times(W)).cpu().numpy(), self.cv_loss)
            iterations[j] = history.shape[0] - 1
            solutions[j] = W
        result = CVResult("holdout", grid, relative, np.where(np.isfinite(scores), scores, np.inf), self.cv_loss)
        return result, iterations, solutions[result.best_index]

    def _set_state(self, weights: np.ndarray, scaler: TargetScaler, was_1d: bool, reg: float, jitter: float) -> None:
        """Keep the fitted state (:class:`~molntk.regression.inducing.InducingWeights`) and ``jitter_``."""
        self._keep(weights, scaler, was_1d, reg)
        self.jitter_ = jitter

    def fitted_arrays(self) -> dict[str, np.ndarray]:
        """The fitted state as plain arrays (for model files that must not unpickle code):
        ``solver`` (0-d unicode "falkon"), float64 ``weights`` (W, (m, k)), ``target_mean``,
        ``target_scale`` (k,), and 0-d ``reg``, ``jitter``, ``was_1d``: all that ``predict`` needs."""
        return {**self._state_arrays(), "jitter": np.asarray(float(self.jitter_))}

    def load_fitted_arrays(self, arrays: dict[str, np.ndarray]) -> FalkonRegressor:
        """Restore the state written by :meth:`fitted_arrays` (this regressor's settings are
        kept), with the fitted attributes the arrays hold (class docstring)."""
        self._restore(arrays)
        self.jitter_ = float(arrays["jitter"])
        return self


def _cross_kernel(K_nm: object, m: int) -> np.ndarray | torch.Tensor:
    """K_nm as it is when a 2-d numpy array (``np.memmap`` included) or torch tensor, else
    converted; InputError naming ``K_nm`` unless (n, m) with n ≥ 1 (entries are checked by
    :func:`_row_squares`)."""
    array = K_nm if isinstance(K_nm, (np.ndarray, torch.Tensor)) else validation.matrix(K_nm, "K_nm")
    if array.ndim != 2 or array.shape[1] != m or array.shape[0] == 0:
        raise InputError(
            "K_nm", f"must be (n, {m}) with n ≥ 1 (one column per inducing point), got shape {tuple(array.shape)}"
        )
    numeric = array.dtype.is_floating_point if isinstance(array, torch.Tensor) else np.issubdtype(array.dtype, np.number)
    if not numeric:
        raise InputError("K_nm", f"must be a numeric array, got dtype {array.dtype}")
    return array


def _resident(K_nm: np.ndarray | torch.Tensor, device: torch.device, dtype: torch.dtype) -> np.ndarray | torch.Tensor:
    """K_nm copied to a CUDA ``device`` once when it takes at most :data:`RESIDENT_FRACTION`
    of the device's free memory (free on the device plus what torch's allocator holds unused,
    e.g. after the kernel blocks), else as it is. Every PCG iteration is a pass over K_nm that
    is bound by memory traffic: from device memory (~4 TB/s on an H200) instead of block
    copies from the host (~25 GB/s over PCIe), the same arithmetic ~100× sooner."""
    if device.type != "cuda" or (isinstance(K_nm, torch.Tensor) and K_nm.device == device):
        return K_nm
    size = K_nm.shape[0] * K_nm.shape[1] * dtype.itemsize
    cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)  # reusable by torch
    if size > RESIDENT_FRACTION * (torch.cuda.mem_get_info(device)[0] + cached):
        return K_nm
    if isinstance(K_nm, torch.Tensor):
        return K_nm.to(device=device, dtype=dtype)
    with warnings.catch_warnings():  # read-only input: copied, never written
        warnings.filterwarnings("ignore", "The given NumPy array is not writable", UserWarning)
        return torch.as_tensor(np.asarray(K_nm), dtype=dtype).to(device)


def _row_squares(rows: KernelRows) -> np.ndarray:
    """‖K_nm[i]‖² of every row (n,), in one pass over the blocks; InputError naming ``K_nm``
    at its first NaN or inf."""
    squares = []
    for where, block in rows.blocks():
        finite = torch.isfinite(block)
        if not finite.all():
            i, j = (int(v) for v in torch.nonzero(~finite)[0])
            index = (where.start + i, j)
            raise InputError("K_nm", f"contains a non-finite value ({float(block[i, j])}) at index {index}")
        squares.append((block.double() ** 2).sum(dim=1).cpu().numpy())
    return np.concatenate(squares)


def _add_sampled_gram(every: KernelRows, T: torch.Tensor, rows: np.ndarray, gram: torch.Tensor) -> torch.Tensor:
    """``gram`` + Σ_{i ∈ rows} G_iᵀ G_i with G_i = K_nm[i] T⁻¹, accumulated in place in blocks of
    at least :data:`GRAM_BLOCK_ROWS` rows."""
    for _, block in replace(every, index=rows, block_rows=max(every.block_rows, GRAM_BLOCK_ROWS)).blocks():
        features = _solve_lower(T.mT, block.mT)  # G_bᵀ (m, b)
        gram += features @ features.mT
    return gram


def _mean_nystrom_diagonal(every: KernelRows, T: torch.Tensor, seed: int) -> float:
    """mean(diag K̃) = mean_i ‖T⁻ᵀ K_nm[i]ᵀ‖² over a ``seed``-ed sample of
    :data:`DIAG_SAMPLE_ROWS` rows (all rows when n is smaller), in one block."""
    n = every.n
    if n <= DIAG_SAMPLE_ROWS:
        sample = np.arange(n)
    else:
        sample = np.sort(np.random.default_rng(seed).choice(n, DIAG_SAMPLE_ROWS, replace=False))
    _, block = next(replace(every, index=sample, block_rows=sample.size).blocks())
    return float((_solve_lower(T.mT, block.mT) ** 2).sum() / sample.size)
