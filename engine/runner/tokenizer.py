"""Tokenizers: a built-in byte-level one (no download, ever), or a checkpoint's tokenizer.json.

Byte tokenizer ids:
    0 = PAD, 1 = BOS, 2 = EOS, 3..258 = the bytes 0x00..0xFF (id = byte + 3).
Ids from 259 up to the model's vocabulary size are valid model inputs and outputs (the
built-in random-weight model samples them) but are not text: `decode` shows them as
`<id>`, so nothing sampled is ever silently dropped. Bytes that are not UTF-8 (random
token ids of a synthetic prompt) are shown as `\\xNN` escapes, never as U+FFFD.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol


class Tokenizer(Protocol):
    name: str
    bos_token_id: int | None
    eos_token_id: int | None

    def encode(self, text: str, add_bos: bool = True) -> list[int]: ...

    def decode(self, token_ids: list[int]) -> str: ...


class ByteTokenizer:
    """UTF-8 bytes shifted by 3 (see the module docstring)."""

    name = "bytes"
    PAD = 0
    BOS = 1
    EOS = 2
    OFFSET = 3
    vocab_size = 259

    def __init__(self) -> None:
        self.bos_token_id: int | None = self.BOS
        self.eos_token_id: int | None = self.EOS

    def encode(self, text: str, add_bos: bool = True) -> list[int]:
        ids = [b + self.OFFSET for b in text.encode("utf-8")]
        return [self.BOS, *ids] if add_bos else ids

    def decode(self, token_ids: list[int]) -> str:
        parts: list[str] = []
        pending = bytearray()
        for tid in token_ids:
            if self.OFFSET <= tid < self.OFFSET + 256:
                pending.append(tid - self.OFFSET)
                continue
            if pending:
                parts.append(pending.decode("utf-8", errors="backslashreplace"))
                pending.clear()
            if tid >= self.OFFSET + 256:
                parts.append(f"<{tid}>")
            # PAD, BOS and EOS are special: not shown.
        if pending:
            parts.append(pending.decode("utf-8", errors="backslashreplace"))
        return "".join(parts)


class HFTokenizer:
    """A `tokenizers` Tokenizer read from a local tokenizer.json."""

    def __init__(self, path: Path, bos_token_id: int | None, eos_token_id: int | None) -> None:
        from tokenizers import Tokenizer as _Tokenizer

        try:
            self._tok: Any = _Tokenizer.from_file(str(path))
        except Exception as exc:  # the Rust side raises a plain Exception
            raise ValueError(f"{path}: cannot load tokenizer ({exc})") from None
        self.name = str(path)
        self.bos_token_id = bos_token_id
        self.eos_token_id = eos_token_id

    def encode(self, text: str, add_bos: bool = True) -> list[int]:
        ids: list[int] = self._tok.encode(text, add_special_tokens=add_bos).ids
        if add_bos and self.bos_token_id is not None and (not ids or ids[0] != self.bos_token_id):
            ids = [self.bos_token_id, *ids]
        return ids

    def decode(self, token_ids: list[int]) -> str:
        return str(self._tok.decode(token_ids, skip_special_tokens=True))


def load_tokenizer(
    model_dir: str | Path | None,
    bos_token_id: int | None = None,
    eos_token_id: int | None = None,
) -> Tokenizer:
    """tokenizer.json from the checkpoint dir when there is one, else the byte tokenizer."""
    if model_dir is not None:
        path = Path(model_dir) / "tokenizer.json"
        if path.is_file():
            return HFTokenizer(path, bos_token_id, eos_token_id)
    return ByteTokenizer()
