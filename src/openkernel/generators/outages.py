"""What a model's service did when it gave no answer, and how long to wait before asking again.

- :func:`describe` says what happened in the words of what happened: a connection that was
  refused is not an "HTTP 500" (litellm reports it as one), a client timeout is not an
  "HTTP 408"; an HTTP status is named only when the server answered with it. The text is
  redacted (a 401 body may echo the key).
- :func:`is_transient`: connection problems, timeouts, rate limits and server errors are worth
  retrying; a refused key or a bad request is not.
- :func:`retry_after`: the wait a server asked for (``Retry-After``, in seconds or as an HTTP
  date; OpenAI's ``retry-after-ms``), honoured before the next attempt.
- :class:`ModelHealth`: consecutive failed calls per model; at
  ``inference[].max_consecutive_failures`` the model is paused for the rest of the run (an
  ensemble goes on with the others) and, once every model is paused, :attr:`outage` says why
  the run must stop.
"""

from __future__ import annotations

import threading
import time
from email.utils import parsedate_to_datetime

from openkernel.config import ModelConfig
from openkernel.costs import LLMCall
from openkernel.redaction import redact

_TRANSIENT_STATUS = {408, 409, 425, 429}
_TRANSIENT_NAMES = {"Timeout", "APIConnectionError", "RateLimitError", "InternalServerError",
                    "ServiceUnavailableError", "BadGatewayError", "StreamTimeout"}
_CONNECTION_NAMES = {"APIConnectionError", "ConnectError", "ConnectionError", "RemoteProtocolError",
                     "ReadError"}
_TIMEOUT_NAMES = {"APITimeoutError", "Timeout", "TimeoutException", "ReadTimeout",
                  "ConnectTimeout", "TimeoutError", "StreamTimeout"}
# litellm reports a key the OpenAI client cannot find as an InternalServerError (HTTP 500):
# retrying it cannot help.
NO_CREDENTIALS = "Missing credentials"
MAX_RETRY_AFTER_S = 600.0  # a longer wait (a daily quota) is a failure, not a pause


class LLMError(Exception):
    """A model call that gave no answer; ``transient`` says whether retrying could help.

    ``spent``: what the call used anyway (tokens of streams cut off mid-answer, estimated),
    or None.
    """

    def __init__(self, message: str, transient: bool, attempts: int,
                 spent: LLMCall | None = None) -> None:
        super().__init__(message)
        self.transient = transient
        self.attempts = attempts
        self.spent = spent


class StreamTimeout(Exception):
    """A streamed answer still running when ``timeout_s`` had passed since the request."""


def _chain(err: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    while err is not None and err not in out:
        out.append(err)
        err = err.__cause__ or err.__context__
    return out


def _names(err: BaseException) -> set[str]:
    return {cls.__name__ for cls in type(err).__mro__}


def _kind(err: BaseException) -> str:
    """"timeout", "connection" (no HTTP answer at all), "stream" (an answer broken off) or
    "http" (the server answered with an error)."""
    if "MidStreamFallbackError" in _names(err):  # litellm: the stream ended mid-answer
        return "stream"
    for link in _chain(err):
        names = _names(link)
        if names & _TIMEOUT_NAMES:
            return "timeout"
        if names & _CONNECTION_NAMES or isinstance(link, ConnectionError):
            return "connection"
    return "http"


def is_transient(err: BaseException) -> bool:
    """Connection problems, timeouts, rate limits and server errors are worth retrying."""
    if NO_CREDENTIALS in str(err):
        return False
    if _kind(err) != "http" or _names(err) & _TRANSIENT_NAMES:
        return True
    status = getattr(err, "status_code", None)
    return isinstance(status, int) and (status in _TRANSIENT_STATUS or status >= 500)


def http_status(err: BaseException) -> int | None:
    """The HTTP status the server answered with (None when it never answered)."""
    status = getattr(err, "status_code", None)
    return status if isinstance(status, int) and _kind(err) == "http" else None


def describe(err: BaseException, timeout_s: float | None = None) -> str:
    """One line on what happened, redacted."""
    kind = _kind(err)
    if kind == "timeout":
        within = f" within timeout_s ({timeout_s:g} s)" if timeout_s else ""
        text = (str(err) if isinstance(err, StreamTimeout)
                else f"no answer{within}: the client stopped waiting")
        return redact(f"timeout: {text}")
    if kind == "stream":
        why = " ".join(str(getattr(err, "original_exception", "") or "").split())
        return redact("the streamed answer broke off before it finished"
                      + (f" ({why.rsplit(' - ', 1)[-1][:200]})" if why else ""))
    if kind == "connection":
        inner = next((str(e) for e in reversed(_chain(err)) if str(e).strip()), str(err))
        return redact(f"connection failed: {' '.join(inner.split())[:300]}")
    text = " ".join(str(err).split())
    status = http_status(err)
    prefix = type(err).__name__ + (f" (HTTP {status})" if status is not None else "")
    return redact(f"{prefix}: {text[:600]}")


def retry_after(err: BaseException, now: float | None = None) -> float | None:
    """Seconds the server asked to wait (``Retry-After`` / ``retry-after-ms``), or None."""
    headers = getattr(getattr(err, "response", None), "headers", None) \
        or getattr(err, "litellm_response_headers", None)
    if not headers:
        return None
    try:
        ms = headers.get("retry-after-ms")
        if ms is not None:
            return max(float(ms) / 1000.0, 0.0)
        value = headers.get("retry-after")
    except Exception:  # noqa: BLE001 - a header object we do not know
        return None
    if value is None:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:  # an HTTP date
        when = parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError):
        return None
    return max(when - (time.time() if now is None else now), 0.0)


def _key(cfg: ModelConfig) -> tuple:
    return (cfg.model, cfg.api_base, cfg.api_key_env)


class ModelHealth:
    """Consecutive failed calls per model (one service: model, api_base, key), thread-safe."""

    def __init__(self, models: list[ModelConfig]) -> None:
        self._models = list(models)
        self._lock = threading.Lock()
        self._failures: dict[tuple, int] = {}
        self._last: dict[tuple, str] = {}
        self.paused: dict[tuple, str] = {}  # model -> why
        self._notices: list[str] = []

    def ok(self, cfg: ModelConfig) -> None:
        with self._lock:
            self._failures[_key(cfg)] = 0

    def failed(self, cfg: ModelConfig, why: str) -> None:
        key = _key(cfg)
        with self._lock:
            n = self._failures[key] = self._failures.get(key, 0) + 1
            self._last[key] = why
            limit = cfg.max_consecutive_failures
            if limit is None or n < limit or key in self.paused:
                return
            self.paused[key] = f"{cfg.model}: {n} consecutive calls failed (last: {why})"
            others = sorted({m.model for m in self.active()})
            if others:
                self._notices.append(f"{self.paused[key]}; paused for the rest of the run, the "
                                     f"ensemble goes on with {', '.join(others)}")

    def active(self) -> list[ModelConfig]:
        """The models not paused (all of them until one reaches its limit)."""
        return [m for m in self._models if _key(m) not in self.paused]

    def take_notices(self) -> list[str]:
        """Models paused since the last call, said once each."""
        with self._lock:
            notices, self._notices = self._notices, []
        return notices

    @property
    def outage(self) -> str:
        """Why no model can be asked any more ("" while one can): the run stops there."""
        with self._lock:
            if self.active():
                return ""
            return ("every model failed too often: " + "; ".join(self.paused.values())
                    + " (inference[].max_consecutive_failures)")
