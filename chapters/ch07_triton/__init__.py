"""Chapter 7: Triton kernels (vector add, fused RMSNorm, tiled GEMM, fused SwiGLU), checked against PyTorch."""
