"""GPU benchmark sections (filled in with the GPU benchmarks)."""
