"""Chapter 3: the Llama forward pass written by hand, on the real weights."""
