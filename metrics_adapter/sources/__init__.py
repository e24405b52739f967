"""Where values come from: the embedded OTLP receiver and its series store, and PromQL."""

__all__ = ["otlp", "promql", "store"]
