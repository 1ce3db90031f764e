"""Numpy kernels with TFLite float semantics, one module per operator family."""
