"""The seed modules of d2l's "Attention Scoring Functions" (seeds 003, 004),
restated as the notebooks define them: the PyTorch reference that
tools/make_golden.py records and bench/compare_torch.py times.

sequence_mask writes into X in place, as d2l's does.
"""

import math

import torch
from torch import nn


def sequence_mask(X, valid_len, value=0.0):
    """d2l.sequence_mask: X is (rows, M); entries at column >= valid_len[row]
    are overwritten in place with `value`."""
    maxlen = X.size(1)
    mask = torch.arange(maxlen, dtype=torch.float32,
                        device=X.device)[None, :] < valid_len[:, None]
    X[~mask] = value
    return X


def masked_softmax(X, valid_lens):
    """Softmax over the last axis of X (B, N, M), masking positions beyond the
    valid length with -1e6. valid_lens: None, (B,) or (B, N)."""
    if valid_lens is None:
        return nn.functional.softmax(X, dim=-1)
    shape = X.shape
    if valid_lens.dim() == 1:
        valid_lens = torch.repeat_interleave(valid_lens, shape[1])
    else:
        valid_lens = valid_lens.reshape(-1)
    X = sequence_mask(X.reshape(-1, shape[-1]), valid_lens, value=-1e6)
    return nn.functional.softmax(X.reshape(shape), dim=-1)


class DotProductAttention(nn.Module):
    """Scaled dot-product attention; returns the output and keeps the weights
    in self.attention_weights. Dropout is inactive in eval mode."""

    def __init__(self, dropout=0.0):
        super().__init__()
        self.dropout = nn.Dropout(dropout)

    def forward(self, queries, keys, values, valid_lens=None):
        d = queries.shape[-1]
        scores = torch.bmm(queries, keys.transpose(1, 2)) / math.sqrt(d)
        self.attention_weights = masked_softmax(scores, valid_lens)
        return torch.bmm(self.dropout(self.attention_weights), values)


class AdditiveAttention(nn.Module):
    """d2l's additive attention: w_v · tanh(W_q q + W_k k), materialising the
    (B, N, M, H) features as the notebook does. Keeps the weights in
    self.attention_weights."""

    def __init__(self, key_size, query_size, num_hiddens, dropout=0.0):
        super().__init__()
        self.W_k = nn.Linear(key_size, num_hiddens, bias=False)
        self.W_q = nn.Linear(query_size, num_hiddens, bias=False)
        self.w_v = nn.Linear(num_hiddens, 1, bias=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, queries, keys, values, valid_lens=None):
        queries, keys = self.W_q(queries), self.W_k(keys)
        features = torch.tanh(queries.unsqueeze(2) + keys.unsqueeze(1))
        scores = self.w_v(features).squeeze(-1)
        self.attention_weights = masked_softmax(scores, valid_lens)
        return torch.bmm(self.dropout(self.attention_weights), values)


class Attn(nn.Module):
    """The seq2seq tutorial's Attn (seed 002, rule 1): a linear layer over
    [q; k] gives M scores, their softmax weighs the M rows of V, and a second
    linear layer maps [q; applied] to the output.

    forward_tutorial is the tutorial's own forward, for a batch of one;
    forward is the same computation batched over (B, N) with d2l's valid-length
    masking (docs/semantics.md section 4). Both return (output, weights)."""

    def __init__(self, query_size, key_size, value_size1, value_size2, output_size):
        super().__init__()
        self.query_size = query_size
        self.key_size = key_size
        self.value_size1 = value_size1
        self.value_size2 = value_size2
        self.output_size = output_size
        self.attn = nn.Linear(query_size + key_size, value_size1)
        self.attn_combine = nn.Linear(query_size + value_size2, output_size)

    def forward_tutorial(self, Q, K, V):
        weights = nn.functional.softmax(self.attn(torch.cat((Q[0], K[0]), 1)), dim=1)
        applied = torch.bmm(weights.unsqueeze(0), V)
        output = torch.cat((Q[0], applied[0]), 1)
        return self.attn_combine(output).unsqueeze(0), weights

    def forward(self, Q, K, V, valid_lens=None):
        scores = self.attn(torch.cat((Q, K), -1))
        self.attention_weights = masked_softmax(scores, valid_lens)
        applied = torch.bmm(self.attention_weights, V)
        return self.attn_combine(torch.cat((Q, applied), -1)), self.attention_weights


def transpose_qkv(X, num_heads):
    """d2l.transpose_qkv: (B, n, num_hiddens) -> (B * num_heads, n, d), the
    heads of each batch entry consecutive, head h holding features h*d..(h+1)*d-1."""
    X = X.reshape(X.shape[0], X.shape[1], num_heads, -1)
    X = X.permute(0, 2, 1, 3)
    return X.reshape(-1, X.shape[2], X.shape[3])


def transpose_output(X, num_heads):
    """d2l.transpose_output: the inverse of transpose_qkv."""
    X = X.reshape(-1, num_heads, X.shape[1], X.shape[2])
    X = X.permute(0, 2, 1, 3)
    return X.reshape(X.shape[0], X.shape[1], -1)


class MultiHeadAttention(nn.Module):
    """d2l's multi-head attention (the chapter after the scoring functions):
    project, split the features into heads, run DotProductAttention per head
    with the valid lengths repeated per head, concatenate, project by W_o.
    attention_weights is d2l's (B * num_heads, N, M)."""

    def __init__(self, key_size, query_size, value_size, num_hiddens, num_heads, dropout=0.0,
                 bias=False):
        super().__init__()
        self.num_heads = num_heads
        self.attention = DotProductAttention(dropout)
        self.W_q = nn.Linear(query_size, num_hiddens, bias=bias)
        self.W_k = nn.Linear(key_size, num_hiddens, bias=bias)
        self.W_v = nn.Linear(value_size, num_hiddens, bias=bias)
        self.W_o = nn.Linear(num_hiddens, num_hiddens, bias=bias)

    def forward(self, queries, keys, values, valid_lens=None):
        queries = transpose_qkv(self.W_q(queries), self.num_heads)
        keys = transpose_qkv(self.W_k(keys), self.num_heads)
        values = transpose_qkv(self.W_v(values), self.num_heads)
        if valid_lens is not None:
            valid_lens = torch.repeat_interleave(valid_lens, repeats=self.num_heads, dim=0)
        output = self.attention(queries, keys, values, valid_lens)
        return self.W_o(transpose_output(output, self.num_heads))

    @property
    def attention_weights(self):
        return self.attention.attention_weights


class BilinearAttention(nn.Module):
    """The chapter's exercise, scores for queries and keys of different sizes
    from matrix products only: score(q, k) = q^T W k with W (Dq, Dk), held as
    nn.Linear(Dk, Dq, bias=False) so that W(k) = W k; no 1/sqrt(d) scale.
    Masked softmax and W V as DotProductAttention."""

    def __init__(self, key_size, query_size, dropout=0.0):
        super().__init__()
        self.W = nn.Linear(key_size, query_size, bias=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, queries, keys, values, valid_lens=None):
        scores = torch.bmm(queries, self.W(keys).transpose(1, 2))
        self.attention_weights = masked_softmax(scores, valid_lens)
        return torch.bmm(self.dropout(self.attention_weights), values)
