"""One redactor for every secret the engine holds, wherever text is stored, printed or exported.

A provider may echo the key it refused (a 401 body), a candidate may print its environment:
whatever text leaves the engine (the results database, the trace dataset, an export, the event
stream the CLI and kernel-code print) goes through :func:`redact` first. It replaces

- the value of every environment variable that looks like a secret (by its name: ``*KEY*``,
  ``*TOKEN*``, ``OPENAI_*``...; or by its value: ``sk-...``, ``ghp_...``, a URL with a password),
- every value added with :func:`add_secret` (the generator adds each configured
  ``api_key_env``'s value, whatever the variable is called),
- and obvious key shapes, whoever wrote them (``sk-`` and ``ghp_`` keys, AWS access key ids,
  ``Bearer`` tokens), so a key the engine never held is not stored either,

with ``[REDACTED]``. Values shorter than 6 characters are left alone (they would match ordinary
words).
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterable, Mapping
from typing import Any

MASK = "[REDACTED]"
MIN_SECRET = 6

_SECRET_NAME = re.compile(
    r"KEY|TOKEN|SECRET|PASSW|PASSPHRASE|CREDENTIAL|AUTH|COOKIE|SESSION|PRIVATE|SIGNATURE"
    r"|DSN|CONNECTION_STRING|DATABASE_URL|(^|_)PAT($|_)",
    re.IGNORECASE,
)
_SECRET_PREFIXES = (
    "AWS_", "GCP_", "GOOGLE_", "GCLOUD_", "CLOUDSDK_", "AZURE_", "OPENAI_", "ANTHROPIC_",
    "LITELLM_", "HF_", "HUGGING", "COHERE_", "MISTRAL_", "GROQ_", "TOGETHER", "DEEPSEEK_",
    "GEMINI_", "OPENROUTER_", "FIREWORKS_", "REPLICATE_", "VERTEX", "WANDB_", "GITHUB_",
    "GH_", "GITLAB_", "NPM_", "PYPI_", "TWINE_", "SSH_", "GPG_", "GNUPG", "VAULT_", "KUBE",
    "DOCKER_", "SLACK_", "SENTRY_", "DATABRICKS_", "MLFLOW_", "COMET_", "NEPTUNE_",
)
# Credential-shaped values, whatever the variable is called.
_SECRET_VALUE = re.compile(
    r"^(sk-|sk_|ghp_|gho_|ghs_|github_pat_|glpat-|xox[abp]-|hf_|AKIA|ASIA|AIza)|://[^/@\s]+:[^/@\s]+@"
)
# Keys by their shape, found anywhere in a text (long enough not to hit ordinary words).
_KEY_SHAPES = re.compile(
    r"(?<![\w-])(?:sk-(?:proj-|ant-|or-)?[A-Za-z0-9_\-]{16,}|sk_(?:live|test)_[A-Za-z0-9]{16,}"
    r"|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|glpat-[A-Za-z0-9_\-]{20,}"
    r"|xox[abpr]-[A-Za-z0-9\-]{10,}|hf_[A-Za-z0-9]{20,}|(?:AKIA|ASIA)[0-9A-Z]{16}"
    r"|AIza[0-9A-Za-z_\-]{35})"
    r"|(?<=Bearer )[A-Za-z0-9._~+/=\-]{8,}"
)

_added: set[str] = set()
_lock = threading.Lock()


def is_secret(name: str, value: str) -> bool:
    """Whether an environment variable holds a secret, by its name or its value's shape."""
    upper = name.upper()
    return bool(_SECRET_NAME.search(upper) or upper.startswith(_SECRET_PREFIXES)
                or _SECRET_VALUE.search(value) or value in _added)


def add_secret(value: str | None) -> None:
    """Redact ``value`` from now on in this process (a configured key, whatever its name)."""
    if value and len(value) >= MIN_SECRET:
        with _lock:
            _added.add(value)


def secret_values(env: Mapping[str, str] | None = None) -> list[str]:
    """The secret values of ``env`` (default: this process's), longest first."""
    env = os.environ if env is None else env
    values = {v for k, v in env.items() if len(v) >= MIN_SECRET and is_secret(k, v)}
    return sorted(values, key=len, reverse=True)


def _with_added(secrets: Iterable[str] | None) -> list[str]:
    values = set(secret_values() if secrets is None else secrets)
    with _lock:
        values |= _added
    return sorted((v for v in values if len(v) >= MIN_SECRET), key=len, reverse=True)


def redact(text: str, secrets: Iterable[str] | None = None) -> str:
    """``text`` with every secret value (``secrets``, default :func:`secret_values`; and those
    added with :func:`add_secret`) and every key shape masked."""
    if not text:
        return text
    for secret in _with_added(secrets):
        if secret in text:
            text = text.replace(secret, MASK)
    return _KEY_SHAPES.sub(MASK, text)


def redact_all(value: Any, secrets: Iterable[str] | None = None) -> Any:
    """Every string inside ``value`` (dicts and lists walked) redacted."""
    return _walk(value, _with_added(secrets))


def _walk(value: Any, secrets: list[str]) -> Any:
    if isinstance(value, str):
        return redact(value, secrets)
    if isinstance(value, dict):
        return {k: _walk(v, secrets) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_walk(v, secrets) for v in value)
    return value


class Redactor:
    """The secrets of one moment (``env``: default this process's), for many rows of text."""

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self.secrets = _with_added(secret_values(env))

    def text(self, text: str) -> str:
        return redact(text, self.secrets)

    def row(self, row: dict) -> dict:
        """A row with each of its strings (nested ones too) redacted."""
        return redact_all(row, self.secrets)
