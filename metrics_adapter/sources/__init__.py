"""Where values come from: each module here is one `Source` (base.py) or its storage.

base (the protocol), otlp (rules over the series store), otlp_decode (pure OTLP decoding),
store (the windowed series store), promql (rules as Prometheus instant queries).
"""

__all__ = ["base", "otlp", "otlp_decode", "promql", "store"]
