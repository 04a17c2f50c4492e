"""The package every chapter imports: configuration, contracts, model loading, the engine base
class, the OpenAI-compatible server (`make_app`) and the benchmark harness."""
