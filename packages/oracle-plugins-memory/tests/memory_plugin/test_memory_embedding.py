"""The packaged embedding model loads and runs with no network, and a bad model degrades
recall to BM25 with a reason instead of failing."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from oracle_plugins.memory import PACKAGED_MODEL_ID, Embedder, load_embedder

# Any socket use raises before the model is loaded: a download attempt would fail the run.
NO_NETWORK = textwrap.dedent(
    """
    import socket

    def refuse(*args, **kwargs):
        raise OSError("network use during an offline load")

    socket.socket.connect = refuse
    socket.socket.connect_ex = refuse
    socket.create_connection = refuse
    socket.getaddrinfo = refuse

    from oracle_plugins.memory import load_embedder

    embedder = load_embedder()
    assert not isinstance(embedder, str), embedder
    a, b, c = embedder.embed(["I have a dog", "my pet is a puppy", "tax returns are due"])
    print(embedder.model_id, embedder.dimension, round(float(a @ b), 2) > round(float(a @ c), 2))
    """
)


def test_the_packaged_model_loads_and_embeds_offline() -> None:
    done = subprocess.run(
        [sys.executable, "-c", NO_NETWORK],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [PACKAGED_MODEL_ID, "384", "True"]


def test_vectors_are_unit_length_and_related_texts_are_closer() -> None:
    embedder = load_embedder()
    assert isinstance(embedder, Embedder), embedder
    vectors = embedder.embed(["I live in Lisbon", "My home is in Portugal", "I like jazz"])
    assert vectors.shape == (3, 384)
    norms = (vectors**2).sum(axis=1)
    assert all(abs(float(n) - 1.0) < 1e-4 for n in norms)
    assert float(vectors[0] @ vectors[1]) > float(vectors[0] @ vectors[2])
    assert embedder.embed([]).shape == (0, 384)


def test_a_model_directory_without_the_files_is_refused(tmp_path: Path) -> None:
    assert load_embedder(str(tmp_path)) == f"{tmp_path} lacks model.onnx or tokenizer.json"


def test_a_broken_model_file_degrades_instead_of_failing(tmp_path: Path) -> None:
    (tmp_path / "model.onnx").write_bytes(b"not a model")
    (tmp_path / "tokenizer.json").write_text("{}")
    reason = load_embedder(str(tmp_path))
    assert isinstance(reason, str)
    assert reason.startswith("the embedding model failed to load (")
