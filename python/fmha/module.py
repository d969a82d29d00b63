"""FlashAttention as an nn.Module, for models that hold their attention as a layer."""
import torch

from .interface import flash_attn_func


class FlashAttention(torch.nn.Module):
    """forward(q, k, v, causal=False) is flash_attn_func with this module's softmax scale, and
    its attention dropout while training (none in eval mode)."""

    def __init__(self, softmax_scale=None, attention_dropout=0.0):
        super().__init__()
        self.softmax_scale = softmax_scale
        self.attention_dropout = attention_dropout

    def forward(self, q, k, v, causal=False):
        dropout_p = self.attention_dropout if self.training else 0.0
        return flash_attn_func(q, k, v, dropout_p=dropout_p, softmax_scale=self.softmax_scale, causal=causal)

    def extra_repr(self):
        return f"softmax_scale={self.softmax_scale}, attention_dropout={self.attention_dropout}"
