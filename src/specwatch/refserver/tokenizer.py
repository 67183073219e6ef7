"""Byte-level tokenizer: ids 0..255 are bytes, then a few specials; nothing is downloaded."""

from __future__ import annotations

BOS_ID = 256
EOS_ID = 257
PAD_ID = 258
NUM_SPECIAL = 3
VOCAB_SIZE = 512  # padded; ids >= 259 exist in the model but are never generated


class ByteTokenizer:
    """UTF-8 bytes as token ids, with BOS/EOS/PAD specials."""

    bos_id = BOS_ID
    eos_id = EOS_ID
    pad_id = PAD_ID
    vocab_size = VOCAB_SIZE

    def encode(self, text: str, add_bos: bool = True) -> list[int]:
        """Token ids of ``text`` (BOS first unless ``add_bos`` is False)."""
        ids = list(text.encode("utf-8"))
        return [BOS_ID, *ids] if add_bos else ids

    def decode_bytes(self, ids: list[int]) -> bytes:
        """Raw bytes of the byte tokens in ``ids``; special and padding ids are skipped."""
        return bytes(i for i in ids if 0 <= i < 256)

    def decode(self, ids: list[int]) -> str:
        """Text of ``ids``; invalid UTF-8 becomes U+FFFD, specials are skipped."""
        return self.decode_bytes(ids).decode("utf-8", errors="replace")

    def is_special(self, token_id: int) -> bool:
        """True for BOS/EOS/PAD and the padded tail of the vocabulary."""
        return token_id >= 256
