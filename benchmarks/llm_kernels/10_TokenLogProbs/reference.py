import torch
from torch import nn

tokens, vocab = 8192, 32000


class Model(nn.Module):
    """Per-token log-probabilities of chosen tokens (RL fine-tuning, PPO/GRPO):
    log_softmax(logits)[target]."""

    def __init__(self):
        super().__init__()

    def forward(self, logits, targets):
        logp = torch.log_softmax(logits.float(), dim=-1)
        return logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def get_inputs():
    return [torch.randn(tokens, vocab), torch.randint(0, vocab, (tokens,))]


def get_init_inputs():
    return []
