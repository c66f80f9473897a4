"""Deployments of several SGLang servers: what moves between them and what it costs (pure).

``kv`` sizes a model's KV cache per token as SGLang does and times its transfer from a prefill server to a decode
server over a link; ``deployment`` describes a deployment (aggregated replicas, or prefill and decode servers in an
xPyD split) and the GPUs and nodes it takes. Sources: docs/topology.md.
"""
