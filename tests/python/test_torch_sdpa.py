"""attnscore.torch.scaled_dot_product_attention against PyTorch 2's
definition (docs/python.md): the engine's float32 result against the same
math run in float64 on the same inputs, within docs/semantics.md section
7.1; the fallbacks (dropout, float64) and the gradients through it.

Run: PYTHONPATH=BUILD/python /usr/bin/python3 -m pytest tests/python
"""

import math

import pytest
import torch

import attnscore.torch as at


def sdpa_float64(q, k, v, attn_mask=None, is_causal=False, scale=None):
    """The definition itself, in float64, written out here: softmax(Q Kᵀ ·
    scale + mask) V, -inf where a bool mask is False or above the causal
    diagonal."""
    q, k, v = q.double(), k.double(), v.double()
    factor = 1 / math.sqrt(q.size(-1)) if scale is None else scale
    scores = torch.matmul(q, k.transpose(-2, -1)) * factor
    length, source = q.size(-2), k.size(-2)
    if is_causal:
        rows = torch.arange(length)[:, None]
        cols = torch.arange(source)[None, :]
        scores = torch.where(cols <= rows, scores, torch.tensor(-math.inf, dtype=torch.float64))
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            scores = torch.where(attn_mask, scores, torch.tensor(-math.inf, dtype=torch.float64))
        else:
            scores = scores + attn_mask.double()
    weights = torch.softmax(scores, dim=-1)
    return torch.matmul(weights, v)


def close(got, want, v):
    """Within section 7.1: the output 1e-4 relative to the values' scale."""
    assert got.dtype == torch.float32 and got.shape == want.shape
    assert torch.equal(torch.isnan(got), torch.isnan(want))
    ok = ~torch.isnan(want)
    assert (got.double()[ok] - want[ok]).abs().max() <= 1e-4 * max(1.0, v.abs().max().item())


@pytest.mark.parametrize("lead", [(2, 3), (4,), (2, 1, 2)])
@pytest.mark.parametrize("form", ["plain", "causal", "bool", "float", "scale"])
def test_matches_the_definition(lead, form, calls):
    gen = torch.Generator().manual_seed(7)
    q = torch.randn(*lead, 5, 8, generator=gen)
    k = torch.randn(*lead, 7, 8, generator=gen)
    v = torch.randn(*lead, 7, 4, generator=gen)
    keywords = {}
    if form == "causal":
        keywords["is_causal"] = True
    elif form == "bool":
        mask = torch.rand(5, 7, generator=gen) > 0.3
        mask[:, 0] = True  # every row keeps a key
        keywords["attn_mask"] = mask
    elif form == "float":
        keywords["attn_mask"] = torch.randn(*lead[:-1], 1, 5, 7, generator=gen)
    elif form == "scale":
        keywords["scale"] = 0.3
    got = at.scaled_dot_product_attention(q, k, v, **keywords)
    close(got, sdpa_float64(q, k, v, **keywords), v)
    assert calls == [at.engine().multihead_attention]  # the engine ran it


def test_heads_first_views_and_a_fully_masked_row(calls):
    """A transposed (B, H, L, E) layout; a row whose keys are all masked is
    NaN, as PyTorch gives."""
    gen = torch.Generator().manual_seed(9)
    q = torch.randn(2, 6, 4, 16, generator=gen).transpose(1, 2)  # (2, 4, 6, 16)
    k = torch.randn(2, 9, 4, 16, generator=gen).transpose(1, 2)
    v = torch.randn(2, 9, 4, 16, generator=gen).transpose(1, 2)
    mask = torch.ones(6, 9, dtype=torch.bool)
    mask[2] = False
    got = at.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    close(got, sdpa_float64(q, k, v, attn_mask=mask), v)
    assert torch.isnan(got[:, :, 2]).all() and not torch.isnan(got[:, :, 3]).any()


def test_dropout_and_float64_run_pytorch(calls):
    gen = torch.Generator().manual_seed(11)
    q, k, v = (torch.randn(2, 3, 5, 8, generator=gen) for _ in range(3))
    torch.manual_seed(0)
    dropped = at.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    torch.manual_seed(0)
    assert torch.equal(dropped, at._sdpa_math(q, k, v, dropout_p=0.5))
    wide = at.scaled_dot_product_attention(q.double(), k.double(), v.double())
    assert wide.dtype == torch.float64
    close(wide.float(), sdpa_float64(q, k, v), v)
    assert calls == []


def test_gradients_are_the_definitions(calls):
    gen = torch.Generator().manual_seed(13)
    leaves = [torch.randn(2, 3, 5, 8, generator=gen, requires_grad=True) for _ in range(3)]
    mask = torch.randn(5, 5, generator=gen)
    out = at.scaled_dot_product_attention(*leaves, attn_mask=mask)
    assert calls == [at.engine().multihead_attention]
    out.square().sum().backward()
    got = [t.grad.clone() for t in leaves]
    for t in leaves:
        t.grad = None
    at._sdpa_math(*leaves, attn_mask=mask).square().sum().backward()
    for g, t in zip(got, leaves):
        assert torch.allclose(g, t.grad, rtol=1e-4, atol=1e-5)


def test_a_mask_that_wants_its_gradient_gets_it(calls):
    gen = torch.Generator().manual_seed(17)
    q, k, v = (torch.randn(2, 5, 8, generator=gen) for _ in range(3))
    mask = torch.randn(5, 5, generator=gen, requires_grad=True)
    at.scaled_dot_product_attention(q, k, v, attn_mask=mask).sum().backward()
    got = mask.grad.clone()
    mask.grad = None
    at._sdpa_math(q.double(), k.double(), v.double(), attn_mask=mask.double()).sum().backward()
    assert torch.allclose(got, mask.grad.float(), rtol=1e-4, atol=1e-5)
    assert calls == []  # PyTorch's math, which differentiates the mask


def test_refusals():
    q = torch.randn(1, 2, 4)
    with pytest.raises(RuntimeError, match="attn_mask and is_causal=True were both given"):
        at.scaled_dot_product_attention(q, q, q, attn_mask=torch.ones(2, 2, dtype=torch.bool),
                                        is_causal=True)
