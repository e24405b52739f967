"""kvspread: schedule and autoscale multimodal LLM inference on Kubernetes.

The shared core: names (`names`), Kubernetes quantities (`quantity`), the node-signals
document that the collector writes and the extender reads (`signals`), the layered
configuration used by every subcommand (`settings`), clocks and logging.
"""

__version__ = "0.2.0"

__all__ = ["__version__"]
