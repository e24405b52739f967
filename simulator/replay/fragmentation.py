"""FGD's node fragmentation, vectorised over many node states at once.

Definition (Weng et al., ATC'23, section 4; the artifact's `NodeGpuShareFragAmount`): for a
node state and a target shape m (CPU c_m, per-GPU share g_m, GPU count k_m, model constraint),

    F(n, m) = sum of free_g over GPUs with free_g < g_m   if m fits on n (CPU, model, k_m GPUs
                                                           with free_g >= g_m)
            = sum of all free_g                           otherwise (and for CPU-only shapes)

and F(n) = sum_m p_m F(n, m). CPU-only shapes count the node's whole idle GPU share: they can
never use it, which is why the published fragmentation ratio starts near the CPU-only share of
the workload (about 14 % on the default trace) on an empty cluster. Host memory plays no part.
The cluster's fragmentation ratio is sum_n F(n) / sum_n free GPU milli.
"""

from __future__ import annotations

import numpy as np

from simulator.replay.workload import TargetShapes

__all__ = ["FragModel"]


class FragModel:
    """Precomputed target shapes for fast `fragmentation` calls on one cluster."""

    def __init__(self, shapes: TargetShapes, access: np.ndarray, model_of_node: np.ndarray):
        gpu = shapes.num_gpu > 0
        self.cpu_weight = float(shapes.weight[~gpu].sum())
        self.weight = shapes.weight[gpu]
        self.cpu = shapes.cpu_milli[gpu]
        self.count = shapes.num_gpu[gpu]
        self.thresholds, self.tidx = np.unique(shapes.gpu_milli[gpu], return_inverse=True)
        # access by (node model, shape): a shape's spec allows the model or not.
        n_models = int(model_of_node.max()) + 1
        self.model_access = np.ones((n_models, len(self.weight)), dtype=bool)
        spec = shapes.spec_id[gpu]
        for j, sid in enumerate(spec.tolist()):
            if sid != 0:
                for model in range(n_models):
                    nodes_of_model = model_of_node == model
                    self.model_access[model, j] = bool(access[sid][nodes_of_model].all())

    def fragmentation(
        self, gpu_free: np.ndarray, cpu_free: np.ndarray, model: np.ndarray
    ) -> np.ndarray:
        """F(n) for each row: gpu_free [S, G], cpu_free [S], model [S] -> float64 [S]."""
        total = gpu_free.sum(axis=1).astype(np.float64)
        if len(self.weight) == 0:
            cpu_only: np.ndarray = total * self.cpu_weight
            return cpu_only
        free = gpu_free[:, None, :]
        thr = self.thresholds[None, :, None]
        below = free < thr  # [S, U, G]
        partial = np.where(below, free, 0).sum(axis=2)[:, self.tidx]  # [S, M]
        fits = (~below).sum(axis=2)[:, self.tidx] >= self.count[None, :]
        fits &= cpu_free[:, None] >= self.cpu[None, :]
        fits &= self.model_access[model]
        per_shape = np.where(fits, partial, total[:, None])
        frag: np.ndarray = total * self.cpu_weight + per_shape @ self.weight
        return frag
