"""attnscore.torch under autograd: the engine's forward with d2l's gradients,
and the MultiHeadAttention drop-in.

With dropout inactive (eval mode), a drop-in called while autograd records
(grad mode on, an input or a parameter requiring grad) runs the engine's
forward and differentiates d2l's math in its backward. Gradients are
compared with the seed modules' (tools/seed_modules.py) run in float64 on
the same float32 inputs and parameters, and with torch.autograd.gradcheck's
finite differences of the engine's own forward.

Run: PYTHONPATH=BUILD/python /usr/bin/python3 -m pytest tests/python
"""

import copy
import warnings

import pytest
import torch
from torch import nn

import attnscore.torch as at
from d2l_reference import seed


B, N, M = 3, 5, 7
OPS = ("softmax", "dot", "additive", "concat", "multihead", "multihead_bias")


def make(op, seed_value=0):
    """(seed module or function, drop-in, inputs) in eval mode, the same
    parameters in both."""
    torch.manual_seed(seed_value)
    g = torch.Generator().manual_seed(seed_value + 1)
    if op == "softmax":
        return seed.masked_softmax, at.masked_softmax, (torch.randn(B, N, M, generator=g),)
    if op == "dot":
        ref, new = seed.DotProductAttention(0.2), at.DotProductAttention(0.2)
        dq = dk = 6
    elif op == "additive":
        ref, new = seed.AdditiveAttention(4, 6, 8, 0.2), at.AdditiveAttention(4, 6, 8, 0.2)
        dq, dk = 6, 4
    elif op == "concat":
        ref, new = seed.Attn(6, 4, M, 3, 5), at.Attn(6, 4, M, 3, 5)
        dq, dk = 6, 4
    else:
        bias = op == "multihead_bias"
        ref = seed.MultiHeadAttention(4, 6, 3, 16, 4, 0.2, bias=bias)
        new = at.MultiHeadAttention(4, 6, 3, 16, 4, 0.2, bias=bias)
        dq, dk = 6, 4
    new.load_state_dict(ref.state_dict())
    key_rows = N if op == "concat" else M
    inputs = (torch.randn(B, N, dq, generator=g), torch.randn(B, key_rows, dk, generator=g),
              torch.randn(B, M, 3, generator=g) * 3)
    return ref.eval(), new.eval(), inputs


def lens_for(case):
    g = torch.Generator().manual_seed(7)
    if case == "none":
        return None
    if case == "per_batch":
        return torch.randint(1, M + 1, (B,), generator=g)
    lens = torch.randint(0, M + 1, (B, N), generator=g)
    lens[0, 0] = 0  # uniform weights
    return lens


def call(op, fn, inputs, lens):
    """(output, attention weights) of a seed module or a drop-in."""
    if op == "softmax":
        x, = inputs
        # The seed's masked_softmax writes into its X: give it a copy.
        out = fn(x * 1 if fn is seed.masked_softmax else x, lens)
        return out, None
    out = fn(*inputs, lens)
    if op == "concat":
        return out
    return out, fn.attention_weights


def gradients(op, fn, inputs, lens, grad_out, grad_weights):
    """The gradients of sum(out * grad_out) + sum(weights * grad_weights)
    with respect to every input and parameter, by name."""
    leaves = [t.clone().requires_grad_() for t in inputs]
    params = dict(fn.named_parameters()) if isinstance(fn, nn.Module) else {}
    for p in params.values():
        p.grad = None
    out, weights = call(op, fn, leaves, lens)
    loss = (out * grad_out.to(out.dtype)).sum()
    if weights is not None:
        loss = loss + (weights * grad_weights.to(weights.dtype)).sum()
    loss.backward()
    found = {f"input{i}": t.grad for i, t in enumerate(leaves)}
    found.update({name: p.grad for name, p in params.items()})
    return out.detach(), found


def float64(op, ref):
    if op == "softmax":
        return ref
    return copy.deepcopy(ref).double()


@pytest.mark.parametrize("lens_case", ["none", "per_batch", "per_query"])
@pytest.mark.parametrize("op", OPS)
def test_gradients_are_d2l_s(op, lens_case, calls):
    ref, new, inputs = make(op)
    lens = lens_for(lens_case)
    g = torch.Generator().manual_seed(11)
    ref64 = float64(op, ref)
    with torch.no_grad():
        out_shape = call(op, ref, inputs, lens)[0].shape
    grad_out = torch.randn(out_shape, generator=g)
    grad_weights = torch.randn(B * 4 if op.startswith("multihead") else B, N, M, generator=g)

    out, got = gradients(op, new, inputs, lens, grad_out, grad_weights)
    assert len(calls) == 1  # the forward ran on the engine
    want_out, want = gradients(op, ref64, [t.double() for t in inputs], lens,
                               grad_out, grad_weights)
    # d2l's own float32 gradients: a gradient that is 0 in exact math (the
    # key bias's, which softmax cancels) is float32 rounding in both.
    _, d2l32 = gradients(op, ref, inputs, lens, grad_out, grad_weights)
    assert got.keys() == want.keys() == d2l32.keys()
    assert torch.allclose(out.double(), want_out, rtol=1e-4, atol=1e-5)
    for name, grad in got.items():
        err = float((grad.double() - want[name]).abs().max())
        d2l_err = float((d2l32[name].double() - want[name]).abs().max())
        bound = max(1e-4 * float(want[name].abs().max()), 4 * d2l_err)
        assert grad.dtype == torch.float32 and err <= bound, (name, err, bound)


@pytest.mark.parametrize("op", OPS)
def test_gradcheck_of_the_engine_forward(op, calls):
    # Finite differences of the engine's own float32 forward against the
    # backward (d2l's math): eps 1e-2 keeps float32 rounding (about 1e-7 of
    # the output, divided by eps) well under the tolerance.
    ref, new, inputs = make(op, seed_value=3)
    lens = lens_for("per_query")
    leaves = tuple(t.clone().requires_grad_() for t in inputs)

    def forward(*xs):
        out, weights = call(op, new, xs, lens)
        return out if weights is None else (out, weights)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # gradcheck warns about float32 inputs
        assert torch.autograd.gradcheck(forward, leaves, eps=1e-2, atol=2e-3, rtol=2e-2)
    assert len(calls) > 2 * sum(t.numel() for t in inputs)  # every probe ran the engine


def test_the_chapter_s_additive_call(calls):
    # d2l's example as the chapter writes it: eval, gradients on, no
    # torch.no_grad(); out.square().sum().backward().
    torch.manual_seed(0)
    ref = seed.AdditiveAttention(128, 128, 128, 0.1).eval()
    new = at.AdditiveAttention(128, 128, 128, 0.1).eval()
    new.load_state_dict(ref.state_dict())
    q, k, v = torch.randn(4, 32, 128), torch.randn(4, 256, 128), torch.randn(4, 256, 128)
    lens = torch.tensor([3, 100, 256, 17])
    for module in (ref, new):
        module(q, k, v, lens).square().sum().backward()
    assert len(calls) == 1
    for (name, a), (_, b) in zip(new.named_parameters(), ref.named_parameters()):
        err = float((a.grad - b.grad).abs().max())
        assert err <= 1e-4 * float(b.grad.abs().max()), (name, err)


def test_second_derivatives_are_refused(calls):
    _, new, (q, k, v) = make("dot")
    q = q.clone().requires_grad_()
    (grad,) = torch.autograd.grad(new(q, k, v).sum(), q, create_graph=True)
    with pytest.raises(RuntimeError, match="differentiable|does not require grad"):
        grad.sum().backward()


def test_inputs_changed_before_backward_are_refused(calls):
    # The saved inputs are checked by autograd's version counter, as d2l's.
    _, new, (q, k, v) = make("additive")
    k = k.clone().requires_grad_()
    out = new(q, k * 1, v)
    v.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()


# ---------------------------------------------------------------------------
# The MultiHeadAttention drop-in.

@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("lens_case", ["none", "per_batch", "per_query"])
def test_multihead_matches_seed(bias, lens_case, calls):
    ref, new, inputs = make("multihead_bias" if bias else "multihead")
    lens = lens_for(lens_case)
    with torch.no_grad():
        out, weights = call("multihead", new, inputs, lens)
        want, want_weights = call("multihead", float64("multihead", ref),
                                  [t.double() for t in inputs], lens)
    assert len(calls) == 1
    assert out.shape == want.shape == (B, N, 16)
    assert weights.shape == want_weights.shape == (B * 4, N, M)
    assert torch.allclose(weights.double(), want_weights, rtol=0, atol=1e-5)
    assert torch.allclose(out.double(), want, rtol=1e-4, atol=1e-4)
    assert list(new.state_dict()) == list(ref.state_dict())


def test_multihead_dropout_in_training_is_d2l_s(calls):
    ref, new, inputs = make("multihead")
    results = []
    for module in (ref.train(), new.train()):
        torch.manual_seed(5)  # the same dropout mask for both
        results.append((module(*inputs, None), module.attention_weights))
    assert calls == []
    assert torch.allclose(results[0][0], results[1][0], rtol=1e-6, atol=1e-6)
    assert torch.equal(results[0][1], results[1][1])


def test_multihead_mixed_biases_run_torch(calls):
    # A module whose layers do not all have a bias is not an engine model.
    ref, new, inputs = make("multihead")
    for module in (ref, new):
        module.W_k = nn.Linear(4, 16, bias=True)
    new.W_k.load_state_dict(ref.W_k.state_dict())
    with torch.no_grad():
        got, want = new(*inputs), ref(*inputs)
    assert calls == []
    assert torch.allclose(got, want, rtol=1e-6, atol=1e-6)


def test_lengths_changed_before_backward_do_not_reach_it(calls):
    # The backward keeps its own copy of valid_lens, as d2l's autograd keeps
    # the mask it built from them.
    ref, new, inputs = make("additive")
    lens = lens_for("per_query")
    g = torch.Generator().manual_seed(2)
    grad_out = torch.randn(B, N, 3, generator=g)
    want = gradients("additive", ref, inputs, lens, grad_out, torch.zeros(B, N, M))[1]
    leaves = [t.clone().requires_grad_() for t in inputs]
    out = new(*leaves, lens)
    lens.fill_(1)
    (out * grad_out).sum().backward()
    for leaf, name in zip(leaves, ("input0", "input1", "input2")):
        err = float((leaf.grad - want[name]).abs().max())
        assert err <= 1e-5 * float(want[name].abs().max()), (name, err)
