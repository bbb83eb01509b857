"""Which tokenizer a Hugging Face model directory has, by content.

A draft proposes token ids and its target reads them, so the two must map every id to the same
token. Equal vocabulary sizes do not show that: a draft from another family of the same size would
run, propose nonsense and be measured as a poor draft. The digest is sha256 over every token's text
in id order (added tokens included), from the directory's tokenizer.json; merges and normalisation
rules are left out, since prompts are only ever encoded by the target's tokenizer. The llamacpp
backend fingerprints a GGUF vocabulary its own way (`vocab_digest`); the two are not comparable.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from specmoe.errors import SpecmoeError

TOKENIZER_FILE = "tokenizer.json"


def tokenizer_digest(model_dir: Path) -> str | None:
    """sha256 hex of the id -> token map of the directory's tokenizer.json; None without that file
    (a tokenizer that only ships sentencepiece files is compared by vocabulary size alone)."""
    path = Path(model_dir) / TOKENIZER_FILE
    if not path.is_file():
        return None
    from tokenizers import Tokenizer

    try:
        vocab = Tokenizer.from_file(str(path)).get_vocab(with_added_tokens=True)
    except Exception as err:  # tokenizers raises its own Exception type on an unreadable file
        raise SpecmoeError(
            f"{path}: not a readable tokenizer ({err}); restore the model's own file"
        ) from None
    digest = hashlib.sha256()
    for token, _ in sorted(vocab.items(), key=lambda item: item[1]):
        digest.update(token.encode("utf-8", errors="surrogatepass") + b"\0")
    return digest.hexdigest()


def tokenizer_mismatch(draft_digest: str | None, target_digest: str | None) -> str:
    """Why the draft's tokenizer is not the target's, or "" when they agree or either is unknown."""
    if draft_digest is None or target_digest is None or draft_digest == target_digest:
        return ""
    return (
        "draft and target tokenizers differ: their tokenizer.json files map token ids to different "
        "tokens; pick a draft that shares the target's tokenizer (its model family)"
    )


__all__ = ["TOKENIZER_FILE", "tokenizer_digest", "tokenizer_mismatch"]
