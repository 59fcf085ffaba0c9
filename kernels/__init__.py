"""Triton kernels with plain-torch references (imported as rmbench_fast.kernels)."""
