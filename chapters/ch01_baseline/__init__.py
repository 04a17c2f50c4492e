"""Chapter 1: the baseline engine, Hugging Face `generate()` behind our contracts."""
