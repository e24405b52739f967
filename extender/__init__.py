"""kvspread's kube-scheduler extender (docs/extender.md).

The pure placement code is importable without any server (the simulator uses it):

    from extender import ScoringConfig, ShapeDistribution, PodShape, NodeState, GpuState
    from extender import score_nodes, check_fit

Modules: config (ScoringConfig, ExtenderConfig), model (frozen inputs), shapes (target
shape distribution), fit (filter), scoring (prioritize terms), batch (column form of many
nodes), objects (Pod/Node reading), state (NodeState assembly), ledger (recent
placements), cache (list+watch), wire (extender v1 JSON), service (decisions), server
(HTTP routes), run (wiring), cli (`kvspread extender serve`).
"""

from extender.config import ExtenderConfig, ScoringConfig
from extender.fit import FitResult, check_fit, fit_batch
from extender.model import GpuState, NodeState, PodShape
from extender.scoring import BatchScores, NodeScore, explain, score_batch, score_nodes
from extender.shapes import Shape, ShapeDistribution, Shapes

__all__ = [
    "ScoringConfig",
    "ExtenderConfig",
    "GpuState",
    "NodeState",
    "PodShape",
    "Shape",
    "Shapes",
    "ShapeDistribution",
    "FitResult",
    "check_fit",
    "fit_batch",
    "NodeScore",
    "BatchScores",
    "score_nodes",
    "score_batch",
    "explain",
]
