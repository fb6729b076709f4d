"""What the C backends (CPU, CUDA) share: the elementwise table (c_exprs) and the index layer (index)."""
