"""kvspread's endpoint picker: a Gateway API Inference Extension EPP over Envoy ext_proc.

Modules: `request` (what an OpenAI-compatible body asks for), `scoring` (the pure choice),
`affinity` (context stickiness), `endpoints` (the endpoint set and its engine metrics),
`kubewatch` (InferencePool and pods), `extproc` (the gRPC protocol), `metrics`, `debug`
(HTTP /metrics and /debug/explain), `config`, `run` and `cli`.
"""
