"""`kvspread simulate`: evaluate kvspread before deploying it.

- Placement (docs/simulator.md): replay the Alibaba GPU trace with the FGD paper's method
  through the extender's own scoring and six published baselines: `simulator.placement`
  (engine), `simulator.policies`, `simulator.report`, `simulator.runner`.
- Serving (docs/serving-simulation.md): `simulator.serving`.
"""

__all__: list[str] = []
