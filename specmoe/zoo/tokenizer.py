"""The zoo's shared byte-level BPE tokenizer, trained locally on the corpus shipped in the package.

Every zoo model uses this one tokenizer, so drafts and targets agree on token ids by construction.
Byte-level BPE means any UTF-8 text (English, code, Chinese) round-trips exactly through
encode/decode, even characters the corpus never saw: they fall back to single-byte tokens.
"""

import json
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

CORPUS_DIR = Path(__file__).parent / "corpus"
VOCAB_SIZE = 2048
EOS_TOKEN = "<|endoftext|>"
# The trainer puts special tokens first, so EOS (also the pad token) is id 0.
EOS_TOKEN_ID = 0
MODEL_MAX_LENGTH = 4096

# Qwen2-style pre-split: letters with one leading non-letter, single digits, punctuation runs and
# whitespace runs. Single digits keep numbers from being merged into arbitrary chunks.
_SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def corpus_files(corpus_dir: Path = CORPUS_DIR) -> list[Path]:
    """The training files in a fixed (sorted) order: file order is part of what training sees."""
    return sorted(corpus_dir.glob("*.txt"))


def train_tokenizer(files: list[Path], vocab_size: int = VOCAB_SIZE) -> Tokenizer:
    """Train the byte-level BPE; the same files give an identical tokenizer.json."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(_SPLIT_PATTERN), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=[EOS_TOKEN],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train([str(f) for f in files], trainer)
    if tokenizer.token_to_id(EOS_TOKEN) != EOS_TOKEN_ID:
        raise AssertionError(
            f"{EOS_TOKEN} got id {tokenizer.token_to_id(EOS_TOKEN)}, expected {EOS_TOKEN_ID}"
        )
    return tokenizer


def tokenizer_config() -> dict:
    """tokenizer_config.json: names the fast class explicitly so AutoTokenizer does not guess one
    from the model type (qwen3 would pick Qwen2Tokenizer and rebuild the pre-tokenizer)."""
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "eos_token": EOS_TOKEN,
        "pad_token": EOS_TOKEN,
        "bos_token": None,
        "unk_token": None,
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": MODEL_MAX_LENGTH,
    }


def save_tokenizer(tokenizer: Tokenizer, out_dir: Path) -> None:
    """Write tokenizer.json, tokenizer_config.json and special_tokens_map.json into out_dir."""
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(out_dir / "tokenizer.json"))
    _write_json(out_dir / "tokenizer_config.json", tokenizer_config())
    _write_json(out_dir / "special_tokens_map.json", {"eos_token": EOS_TOKEN, "pad_token": EOS_TOKEN})


def _write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
