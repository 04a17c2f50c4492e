"""Chapter 4: the KV cache — compute each position's keys and values once."""
