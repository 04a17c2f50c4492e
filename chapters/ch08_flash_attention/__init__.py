"""Chapter 8: attention without the score matrix: online softmax, block-wise attention, a Triton flash-attention kernel."""
