"""`kvspread simulate`: evaluate kvspread before deploying it.

- Placement (docs/simulator.md): replay the Alibaba GPU trace with the FGD paper's method
  through the extender's own scoring and six published baselines: `simulator.replay.placement`
  (engine), `simulator.replay.policies`, `simulator.replay.report`, `simulator.replay.runner`.
- Serving (docs/serving-simulation.md): `simulator.serving`.
"""

__all__: list[str] = []
