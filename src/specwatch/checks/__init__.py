"""The execution-path checks: environment propagation, verify-step CUDA graphs, lossless output, all-reduce."""
