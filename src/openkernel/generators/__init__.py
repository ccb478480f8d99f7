"""Generators write candidates: the LLM generator (litellm) or the offline one (templates).

``make_generator(config)`` picks: models under ``inference`` -> LLMGenerator (an ensemble when
there are several), none -> OfflineGenerator. Neither imports litellm until it is needed.
"""

from __future__ import annotations

from openkernel.config import Config
from openkernel.generators.base import Generator, Proposal, ProposalRequest


def make_generator(config: Config, **llm_options) -> Generator:
    """The generator a run uses; ``llm_options`` go to LLMGenerator (e.g. ``backoff_s``)."""
    if config.inference:
        from openkernel.generators.llm import LLMGenerator

        return LLMGenerator(config.inference, use_feedback_llm=config.use_feedback_llm,
                            **llm_options)
    from openkernel.generators.offline import OfflineGenerator

    return OfflineGenerator()


__all__ = ["Generator", "Proposal", "ProposalRequest", "make_generator"]
