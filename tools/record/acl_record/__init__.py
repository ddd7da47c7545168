"""Recording acl-trace v1 allocation traces from PyTorch model code.

`tracker` records under fake tensors (no device, no memory: real 7B sizes),
`profiled` records a real CPU run with the profiler (the reference the
tracker is checked against), `configs` holds published model configs and
`scenarios` the workloads (serving, training with stream patterns).
"""
