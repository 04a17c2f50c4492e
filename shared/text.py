"""Turning a stream of token ids into a stream of text, with stop strings.

Two things make this harder than `tokenizer.decode(token)` per token:

* A token can end in the middle of a UTF-8 character (emoji, CJK, accents are several bytes, and
  byte-level BPE splits them). Decoding such a prefix yields U+FFFD; we hold that text back until
  the character is complete, so a stream never shows a broken character.
* A stop string can be split across tokens ("<END" + ">"). Text that could be the start of a stop
  string is held back until it either completes the stop string (then it is never emitted) or
  cannot any more (then it is released).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from transformers import PreTrainedTokenizerBase

_REPLACEMENT = "\ufffd"


@dataclass
class StopCheck:
    """The outcome of adding one token: the text that is safe to emit now, and whether a stop
    string has been reached."""

    text: str
    stopped: bool


@dataclass
class IncrementalDetokenizer:
    tokenizer: PreTrainedTokenizerBase
    stop: tuple[str, ...] = ()
    token_ids: list[int] = field(default_factory=list)
    _emitted: int = 0  # characters of the decoded text already emitted
    _text: str = ""

    def add(self, token_id: int) -> StopCheck:
        self.token_ids.append(token_id)
        text = self.tokenizer.decode(self.token_ids, skip_special_tokens=True)
        # An incomplete multi-byte character decodes to U+FFFD at the end: wait for the rest.
        stable = text.rstrip(_REPLACEMENT)
        self._text = stable
        if self.stop:
            # Search only where a stop string could start that was not already searched.
            search_from = max(0, self._emitted - max(len(s) for s in self.stop) + 1)
            hits = [i for s in self.stop if (i := stable.find(s, search_from)) != -1]
            if hits:
                cut = min(hits)
                out = stable[self._emitted : cut]
                self._emitted = cut
                self._text = stable[:cut]
                return StopCheck(out, True)
            stable = stable[: len(stable) - self._held_back(stable)]
        out = stable[self._emitted :]
        self._emitted += len(out)
        return StopCheck(out, False)

    def flush(self) -> str:
        """Release text held back for a possible stop string (the request ended for another
        reason, so it was not one)."""
        out = self._text[self._emitted :]
        self._emitted = len(self._text)
        return out

    @property
    def text(self) -> str:
        """The text emitted so far."""
        return self._text[: self._emitted]

    def _held_back(self, text: str) -> int:
        """Length of the longest suffix of `text` that is a proper prefix of a stop string."""
        longest = 0
        for s in self.stop:
            for n in range(min(len(s) - 1, len(text)), longest, -1):
                if text.endswith(s[:n]):
                    longest = n
                    break
        return min(longest, len(text) - self._emitted)
