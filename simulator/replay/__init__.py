"""Placement trace replay (docs/simulator.md): the Alibaba GPU trace replayed with the FGD
paper's method through the extender's own scoring and six published baselines.

`placement` is the engine, `policies` the policies, `runner` runs seeds in parallel and
`report` writes the report folder; `kvspread simulate placement` is `simulator.cli`.
"""

__all__: list[str] = []
