"""Reading a streamed answer, and counting tokens when the server does not.

``gather`` reads a litellm stream to its end, passing each piece on as it arrives and cutting
the answer off once ``timeout_s`` has passed since the request (``StreamTimeout``): the
client's own timeout only bounds the silences between pieces. It also says whether the usage
came from the server: litellm makes up a usage chunk when the server sends none. ``Usage``
adds up one call's attempts, ``count_tokens`` is litellm's count for the rest (an estimate).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from openkernel.generators.outages import StreamTimeout

# Called with (model, piece of the answer, attempt) as pieces arrive; a retry starts again.
TextSink = Callable[[str, str, int], None]


@dataclass
class Usage:
    """Tokens of one call's attempts so far (a stream cut off counts what it had sent)."""

    prompt: int = 0
    completion: int = 0
    estimated: bool = False

    def add(self, prompt: int, completion: int, estimated: bool) -> None:
        self.prompt += prompt
        self.completion += completion
        self.estimated = self.estimated or estimated


def gather(litellm, stream, messages, model: str, on_text: TextSink | None, attempt: int,
           pieces: list[str], deadline: float, clock: Callable[[], float]):
    """Read a stream to its end, passing each piece on (and keeping it in ``pieces``); the
    whole response, usage included, and whether the server sent that usage (else it is
    litellm's count). A stream still running at ``deadline`` is cut off
    there (``timeout_s`` bounds the whole answer, not only its silences)."""
    chunks = []
    for chunk in stream:
        chunks.append(chunk)
        delta = chunk.choices[0].delta.content if chunk.choices else None
        if delta:
            pieces.append(delta)
            if on_text is not None:
                on_text(model, delta, attempt)
        if clock() > deadline:
            _close(stream)
            raise StreamTimeout(f"the streamed answer was still coming when timeout_s "
                                f"ran out ({len(''.join(pieces))} characters so far)")
    if not chunks:
        return None, False
    # litellm makes up a usage chunk when the server sends none; its own record of what
    # the server sent (``chunks`` of its stream wrapper) tells the two apart.
    raw = getattr(stream, "chunks", None)
    served = any(_get(c, "usage") for c in raw) if isinstance(raw, list) else True
    return litellm.stream_chunk_builder(chunks, messages=messages), served


def count_tokens(litellm, model: str, messages: list[dict], text: str) -> tuple[int, int]:
    """(prompt tokens, answer tokens) by litellm's tokenizer for ``model``: an estimate."""
    try:
        return (int(litellm.token_counter(model=model, messages=messages)),
                int(litellm.token_counter(model=model, text=text)) if text else 0)
    except Exception:  # noqa: BLE001 - an unknown tokenizer: nothing rather than a guess
        return 0, 0


def _get(chunk, name: str):
    try:
        return chunk.get(name) if hasattr(chunk, "get") else getattr(chunk, name, None)
    except Exception:  # noqa: BLE001 - a chunk shape we do not know
        return None


def _close(stream) -> None:
    """Close a streamed response's connection (litellm's wrapper, or the raw stream)."""
    for target in (getattr(stream, "completion_stream", None), stream):
        close = getattr(target, "close", None)
        if callable(close):
            try:
                close()
            except Exception:  # noqa: BLE001 - closing is best effort
                pass
            return
