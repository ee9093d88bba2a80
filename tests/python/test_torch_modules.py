"""attnscore.torch against the seed modules of tools/seed_modules.py (d2l's
masked_softmax, DotProductAttention, AdditiveAttention and the seq2seq
tutorial's Attn).

Engine results (float32) are compared with the seed modules run in float64 on
the same float32 inputs, within docs/semantics.md section 7.1; the PyTorch
path (dropout in training) is compared with the seed modules in float32,
gradients included. test_torch_gradients.py checks the engine path's
gradients and the MultiHeadAttention drop-in.

Run: PYTHONPATH=BUILD/python /usr/bin/python3 -m pytest tests/python
"""

import copy
import math

import pytest
import torch
from torch import nn

import attnscore.torch as at
from d2l_reference import seed


OPS = ("dot", "additive", "concat")


# ---------------------------------------------------------------------------
# Helpers.

@pytest.fixture
def calls(monkeypatch):
    """The engine calls made through attnscore.torch._run: (fn, args, kwargs,
    result)."""
    recorded = []
    real = at._run

    def spy(fn, *args, **kwargs):
        result = real(fn, *args, **kwargs)
        recorded.append((fn, args, kwargs, result))
        return result

    monkeypatch.setattr(at, "_run", spy)
    return recorded


def address(array):
    return array.__array_interface__["data"][0]


def assert_view_of(array, tensor):
    """array is tensor's own memory, same strides: nothing was copied."""
    assert address(array) == tensor.data_ptr()
    assert array.strides == tuple(4 * s for s in tensor.stride())
    assert array.shape == tuple(tensor.shape)


def f64(t):
    return None if t is None else (t.double() if t.is_floating_point() else t)


def assert_weights(got, ref):
    assert got.dtype == torch.float32 and got.shape == ref.shape
    assert torch.allclose(got.double(), ref, rtol=0, atol=1e-5), \
        float((got.double() - ref).abs().max())


def assert_output(got, ref, values):
    bound = 1e-5 * (1 + float(values.abs().max()))
    assert got.dtype == torch.float32 and got.shape == ref.shape
    assert torch.allclose(got.double(), ref, rtol=0, atol=bound), \
        float((got.double() - ref).abs().max())


def assert_concat_output(got, module64, q64, applied64, values):
    """Section 7.1: 1e-4 relative to the sum of the magnitudes of the output
    layer's terms, plus the attention outputs' bound carried through it."""
    w = module64.attn_combine.weight.detach()
    b = module64.attn_combine.bias.detach()
    dq = q64.shape[-1]
    terms = torch.cat((q64, applied64), -1).abs() @ w.abs().T + b.abs()
    carried = (1e-5 * (1 + float(values.abs().max()))) * w[:, dq:].abs().sum(1)
    ref = torch.cat((q64, applied64), -1) @ w.T + b
    assert got.shape == ref.shape
    err = (got.double() - ref).abs()
    assert bool((err <= 1e-4 * terms + carried).all()), float(err.max())


def make_pair(op, sizes, generator_seed=0):
    """A seed module and the drop-in with the same parameters, in eval mode."""
    torch.manual_seed(generator_seed)
    if op == "dot":
        ref, new = seed.DotProductAttention(0.5), at.DotProductAttention(0.5)
    elif op == "additive":
        args = (sizes["dk"], sizes["dq"], sizes["h"])
        ref = seed.AdditiveAttention(*args, dropout=0.1)
        new = at.AdditiveAttention(*args, dropout=0.1)
    else:
        args = (sizes["dq"], sizes["dk"], sizes["m"], sizes["dv"], sizes["o"])
        ref, new = seed.Attn(*args), at.Attn(*args)
    new.load_state_dict(ref.state_dict())
    return ref.eval(), new.eval()


def make_inputs(op, sizes, rng_seed=1, transposed_k=False):
    g = torch.Generator().manual_seed(rng_seed)
    b, n, m = sizes["b"], sizes["n"], sizes["m"]
    dq = sizes["dq"]
    dk = dq if op == "dot" else sizes["dk"]
    q = torch.randn(b, n, dq, generator=g)
    key_rows = n if op == "concat" else m
    if transposed_k:
        keys = torch.randn(b, dk, key_rows, generator=g).transpose(1, 2)
        assert not keys.is_contiguous()
    else:
        keys = torch.randn(b, key_rows, dk, generator=g)
    v = torch.randn(b, m, sizes["dv"], generator=g) * 3
    return q, keys, v


def double_copy(module):
    """A float64 copy of a module. The attention weights a training step left
    are not graph leaves, which deepcopy refuses: they are not copied."""
    kept = module.__dict__.pop("attention_weights", None)
    try:
        return copy.deepcopy(module).double()
    finally:
        if kept is not None:
            module.attention_weights = kept


def run_ref64(op, ref, q, k, v, lens):
    """The seed module in float64 on the same float32 inputs: (out, weights,
    module64, applied64 for concat)."""
    module = double_copy(ref)
    with torch.no_grad():
        if op == "concat":
            out, w = module(f64(q), f64(k), f64(v), lens)
            applied = torch.bmm(w, f64(v))
            return out, w, module, applied
        out = module(f64(q), f64(k), f64(v), lens)
        return out, module.attention_weights, module, None


def run_new(op, new, q, k, v, lens):
    with torch.no_grad():
        if op == "concat":
            out, w = new(q, k, v, lens)
            assert w is new.attention_weights
            return out, w
        return new(q, k, v, lens), new.attention_weights


def check_against_seed(op, ref, new, q, k, v, lens):
    out64, w64, module64, applied64 = run_ref64(op, ref, q, k, v, lens)
    out, w = run_new(op, new, q, k, v, lens)
    assert_weights(w, w64)
    if op == "concat":
        assert_concat_output(out, module64, f64(q), applied64, v)
    else:
        assert_output(out, out64, v)
    return out, w


SIZES = {"b": 3, "n": 5, "m": 7, "dq": 6, "dk": 4, "h": 8, "dv": 3, "o": 5}


def lens_for(case, sizes, dtype=torch.int64):
    b, n, m = sizes["b"], sizes["n"], sizes["m"]
    g = torch.Generator().manual_seed(7)
    if case == "none":
        return None
    if case == "per_batch":
        return torch.randint(1, m + 1, (b,), generator=g, dtype=dtype)
    if case == "per_query":
        return torch.randint(1, m + 1, (b, n), generator=g, dtype=dtype)
    if case == "zero":  # L = 0: uniform weights 1/M
        lens = torch.randint(1, m + 1, (b, n), generator=g, dtype=dtype)
        lens[0, :] = 0
        lens[1, 2] = 0
        return lens
    if case == "over":  # L > M: every key
        return torch.tensor([m + 3, 2 * m, m][:b], dtype=dtype)
    raise AssertionError(case)


# ---------------------------------------------------------------------------
# The d2l toys.

def toy_inputs(query_size):
    torch.manual_seed(0)
    queries = torch.normal(0, 1, (2, 1, query_size))
    keys = torch.ones((2, 10, 2))
    values = torch.arange(40, dtype=torch.float32).reshape(1, 10, 4).repeat(2, 1, 1)
    return queries, keys, values, torch.tensor([2, 6])


@pytest.mark.parametrize("op", ["dot", "additive"])
def test_d2l_toy(op, calls):
    queries, keys, values, valid_lens = toy_inputs(2 if op == "dot" else 20)
    ref, new = make_pair(op, {"dk": 2, "dq": 20, "h": 8})
    out, w = check_against_seed(op, ref, new, queries, keys, values, valid_lens)
    expected = torch.tensor([[[2.0, 3, 4, 5]], [[10.0, 11, 12, 13]]])
    assert torch.allclose(out, expected, rtol=0, atol=1e-5 * 40)
    uniform = torch.zeros(2, 1, 10)
    uniform[0, 0, :2], uniform[1, 0, :6] = 1 / 2, 1 / 6
    assert torch.allclose(w, uniform, rtol=0, atol=1e-6)
    assert len(calls) == 1


def test_attn_tutorial_toy(calls):
    # Attn(32, 32, 32, 64, 64) as the tutorial calls it: Q, K (1, 1, 32),
    # V (1, 32, 64).
    sizes = {"b": 1, "n": 1, "m": 32, "dq": 32, "dk": 32, "dv": 64, "o": 64}
    ref, new = make_pair("concat", sizes)
    q, k, v = make_inputs("concat", sizes)
    out, w = check_against_seed("concat", ref, new, q, k, v, None)
    assert out.shape == (1, 1, 64) and w.shape == (1, 1, 32)
    assert len(calls) == 1
    with torch.no_grad():
        ref_out, ref_w = double_copy(ref).forward_tutorial(
            f64(q), f64(k), f64(v))
        new_out, new_w = new.forward_tutorial(q, k, v)
    assert new_w.shape == ref_w.shape == (1, 32)
    assert_weights(new_w, ref_w)
    assert torch.allclose(new_out.double(), ref_out, rtol=1e-4, atol=1e-4)
    assert len(calls) == 2


# ---------------------------------------------------------------------------
# Shapes and valid lengths.

@pytest.mark.parametrize("case", ["none", "per_batch", "per_query", "zero", "over"])
@pytest.mark.parametrize("op", OPS)
def test_matches_seed(op, case, calls):
    ref, new = make_pair(op, SIZES)
    q, k, v = make_inputs(op, SIZES)
    lens = lens_for(case, SIZES)
    out, w = check_against_seed(op, ref, new, q, k, v, lens)
    assert len(calls) == 1
    if case == "zero":
        assert torch.allclose(w[0], torch.full_like(w[0], 1 / SIZES["m"]),
                              rtol=0, atol=1e-6)
    if case == "over":
        assert bool((w > 0).all())


@pytest.mark.parametrize("op", OPS)
def test_int32_lengths(op, calls):
    ref, new = make_pair(op, SIZES)
    q, k, v = make_inputs(op, SIZES)
    check_against_seed(op, ref, new, q, k, v,
                       lens_for("per_query", SIZES, torch.int32))
    check_against_seed(op, ref, new, q, k, v,
                       lens_for("per_batch", SIZES, torch.int32))
    assert len(calls) == 2


@pytest.mark.parametrize("op", OPS)
def test_transposed_keys_read_in_place(op, calls):
    ref, new = make_pair(op, SIZES)
    q, k, v = make_inputs(op, SIZES, transposed_k=True)
    lens = lens_for("per_query", SIZES)
    out, w = check_against_seed(op, ref, new, q, k, v, lens)
    (fn, args, kwargs, result), = calls
    q_arr, k_arr, v_arr = args[-4:-1]
    assert_view_of(q_arr, q)
    assert_view_of(k_arr, k)  # strided: K's own memory, not a copy
    assert_view_of(v_arr, v)


@pytest.mark.parametrize("op", OPS)
def test_no_copy(op, calls):
    """Contiguous float32 inputs go to the engine as views of their own
    memory, and the tensors returned are the engine's outputs, not copies."""
    ref, new = make_pair(op, SIZES)
    q, k, v = make_inputs(op, SIZES)
    lens = lens_for("per_batch", SIZES)
    out, w = check_against_seed(op, ref, new, q, k, v, lens)
    (fn, args, kwargs, result), = calls
    if op == "dot":
        assert fn.__self__ is at.engine()
    else:
        assert args[0] is at.engine()
        assert fn is new._engine_model_cache.model
    q_arr, k_arr, v_arr, lens_arr = args[-4:]
    assert_view_of(q_arr, q)
    assert_view_of(k_arr, k)
    assert_view_of(v_arr, v)
    assert address(lens_arr) == lens.data_ptr()
    assert kwargs == {"return_weights": True}
    assert address(result[0]) == out.data_ptr()
    assert address(result[1]) == w.data_ptr()
    assert w is new.attention_weights


def test_strided_values_and_queries(calls):
    # Every input may be strided: Q and V as slices of larger tensors.
    ref, new = make_pair("dot", SIZES)
    base_q = torch.randn(3, 10, 12)
    q = base_q[:, ::2, ::2]
    _, k, _ = make_inputs("dot", SIZES)
    v = torch.randn(3, 7, 9)[:, :, 1:4]
    check_against_seed("dot", ref, new, q, k, v, lens_for("per_batch", SIZES))
    (fn, args, kwargs, result), = calls
    assert_view_of(args[0], q)
    assert_view_of(args[2], v)


# ---------------------------------------------------------------------------
# masked_softmax.

def test_masked_softmax_seed_examples(calls):
    torch.manual_seed(0)
    for lens in (torch.tensor([2, 3]), torch.tensor([[1, 3], [2, 4]]), None):
        x = torch.rand(2, 2, 4)
        before = x.clone()
        y = at.masked_softmax(x, lens)
        assert torch.equal(x, before)  # d2l's writes -1e6 into x; this does not
        assert_weights(y, seed.masked_softmax(x.double(), lens))
    assert len(calls) == 3
    y = at.masked_softmax(torch.rand(2, 2, 4), torch.tensor([[1, 3], [2, 4]]))
    assert torch.equal(y[0, 0], torch.tensor([1.0, 0, 0, 0]))


@pytest.mark.parametrize("case", ["none", "per_batch", "per_query", "zero", "over"])
def test_masked_softmax_matches_seed(case, calls):
    x = torch.randn(SIZES["b"], SIZES["n"], SIZES["m"]) * 4
    lens = lens_for(case, SIZES)
    y = at.masked_softmax(x, lens)
    assert_weights(y, seed.masked_softmax(x.double(), lens))
    (fn, args, kwargs, result), = calls
    assert_view_of(args[0], x)
    assert address(result) == y.data_ptr()


def test_masked_softmax_strided(calls):
    x = torch.randn(3, 7, 5).transpose(1, 2)  # (3, 5, 7), not contiguous
    lens = lens_for("per_query", SIZES)
    y = at.masked_softmax(x, lens)
    assert_weights(y, seed.masked_softmax(x.double(), lens))
    (fn, args, kwargs, result), = calls
    assert_view_of(args[0], x)


def test_masked_softmax_gradient(calls):
    x = torch.randn(3, 5, 7, requires_grad=True)
    lens = lens_for("per_query", SIZES)
    g = torch.randn(3, 5, 7)
    y = at.masked_softmax(x, lens)
    (y * g).sum().backward()
    grad = x.grad.clone()
    x.grad = None
    # The seed writes into its X in place, which autograd refuses on a leaf.
    y_ref = seed.masked_softmax(x * 1, lens)
    (y_ref * g).sum().backward()
    assert len(calls) == 1  # the engine's forward, d2l's gradient
    assert_weights(y.detach(), y_ref.detach().double())
    assert torch.allclose(grad, x.grad, rtol=1e-6, atol=1e-7)


# ---------------------------------------------------------------------------
# Which path runs.

@pytest.mark.parametrize("op", OPS)
def test_float64_falls_back_and_grad_runs_the_engine(op, calls):
    ref, new = make_pair(op, SIZES)
    q, k, v = make_inputs(op, SIZES)
    lens = lens_for("per_query", SIZES)
    # float64 inputs and a float64 module: PyTorch's math, as d2l's.
    new64, ref64 = double_copy(new), double_copy(ref)
    with torch.no_grad():
        got, want = new64(f64(q), f64(k), f64(v), lens), ref64(f64(q), f64(k), f64(v), lens)
    got = got[0] if op == "concat" else got
    want = want[0] if op == "concat" else want
    assert got.dtype == torch.float64
    assert torch.allclose(got, want, rtol=1e-12, atol=1e-12)
    assert calls == []
    # Gradients needed (grad mode on, an input requires grad): the engine's
    # forward, recorded by autograd.
    q_grad = q.clone().requires_grad_()
    result = new(q_grad, k, v, lens)
    result = result[0] if op == "concat" else result
    assert result.requires_grad and type(result.grad_fn).__name__ == "_EngineForwardBackward"
    assert len(calls) == 1
    if op != "dot":
        # Only the parameters require grad (eval mode, no no_grad): the same.
        assert (new(q, k, v, lens)[0] if op == "concat" else new(q, k, v, lens)).requires_grad
        assert len(calls) == 2


def test_inference_mode_and_requires_grad_false(calls):
    ref, new = make_pair("additive", SIZES)
    q, k, v = make_inputs("additive", SIZES)
    with torch.inference_mode():
        out = new(q, k, v, None)
    assert len(calls) == 1
    new.requires_grad_(False)
    out2 = new(q, k, v, None)  # grad mode on, but nothing requires grad
    assert len(calls) == 2
    assert torch.equal(out, out2)


def test_dropout_in_training_runs_torch(calls):
    ref, new = make_pair("dot", SIZES)
    q, k, v = make_inputs("dot", SIZES)
    new.train()
    with torch.no_grad():
        new(q, k, v, None)  # dropout 0.5 active: PyTorch's math
    assert calls == []
    new.dropout.p = 0.0
    with torch.no_grad():
        new(q, k, v, None)  # training, but dropout 0: the engine
    assert len(calls) == 1


def test_negative_length_is_refused_on_engine_path(calls):
    ref, new = make_pair("dot", SIZES)
    q, k, v = make_inputs("dot", SIZES)
    with torch.no_grad(), pytest.raises(ValueError, match="-6"):
        new(q, k, v, torch.tensor([2, -6, 3]))


def test_threads_share_engines_and_results(calls):
    ref, new = make_pair("additive", SIZES)
    q, k, v = make_inputs("additive", SIZES)
    lens = lens_for("per_query", SIZES)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert at.engine() is at.engine(1)
        with torch.no_grad():
            one = new(q, k, v, lens)
        torch.set_num_threads(2)
        assert at.engine() is at.engine(2) and at.engine(2) is not at.engine(1)
        with torch.no_grad():
            two = new(q, k, v, lens)
    finally:
        torch.set_num_threads(before)
    assert calls[0][1][0] is at.engine(1) and calls[1][1][0] is at.engine(2)
    assert torch.equal(one, two)  # docs/semantics.md section 7.2


# ---------------------------------------------------------------------------
# Training: the PyTorch path gives the seed module's gradients.

@pytest.mark.parametrize("op", OPS)
def test_training_gradients_match_seed(op, calls):
    ref, new = make_pair(op, SIZES)
    ref.train(), new.train()
    q, k, v = make_inputs(op, SIZES)
    lens = lens_for("per_query", SIZES)
    results = []
    for module in (ref, new):
        inputs = [t.clone().requires_grad_() for t in (q, k, v)]
        torch.manual_seed(123)  # the same dropout mask for both
        out = module(*inputs, lens)
        out = out[0] if op == "concat" else out
        out.pow(2).sum().backward()
        results.append((out.detach(), module.attention_weights.detach(),
                        [t.grad for t in inputs],
                        {n: p.grad.clone() for n, p in module.named_parameters()}))
    # Active dropout runs PyTorch's math; Attn has no dropout: the engine.
    assert len(calls) == (1 if op == "concat" else 0)
    (out_r, w_r, in_r, par_r), (out_n, w_n, in_n, par_n) = results
    assert torch.allclose(out_n, out_r, rtol=1e-5, atol=1e-5)
    assert torch.allclose(w_n, w_r, rtol=1e-5, atol=1e-6)
    for a, b in zip(in_n, in_r):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-6)
    assert par_n.keys() == par_r.keys()
    for name in par_r:
        assert torch.allclose(par_n[name], par_r[name], rtol=1e-5, atol=1e-6), name
    if op == "dot":  # dropout 0.5 was active: some weights were dropped
        assert not torch.allclose(out_n, torch.bmm(w_n, v))


def test_training_loop_then_eval_uses_trained_parameters(calls):
    ref, new = make_pair("additive", SIZES)
    q, k, v = make_inputs("additive", SIZES)
    lens = lens_for("per_batch", SIZES)
    with torch.no_grad():
        new(q, k, v, lens)  # builds the engine model
    assert len(calls) == 1
    for module in (ref, new):
        module.train()
        opt = torch.optim.SGD(module.parameters(), lr=0.5)
        for step in range(3):
            torch.manual_seed(step)
            opt.zero_grad()
            module(q, k, v, lens).pow(2).sum().backward()
            opt.step()
        module.eval()
    assert len(calls) == 1  # training ran PyTorch's math
    for a, b in zip(new.parameters(), ref.parameters()):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-6)
    check_against_seed("additive", ref, new, q, k, v, lens)
    assert len(calls) == 2


# ---------------------------------------------------------------------------
# state_dict and parameter changes.

@pytest.mark.parametrize("op", ["additive", "concat"])
def test_state_dict_both_ways(op, tmp_path, calls):
    ref, _ = make_pair(op, SIZES, generator_seed=3)
    torch.manual_seed(99)
    if op == "additive":
        new = at.AdditiveAttention(SIZES["dk"], SIZES["dq"], SIZES["h"], 0.1).eval()
        back = seed.AdditiveAttention(SIZES["dk"], SIZES["dq"], SIZES["h"], 0.1).eval()
    else:
        args = (SIZES["dq"], SIZES["dk"], SIZES["m"], SIZES["dv"], SIZES["o"])
        new, back = at.Attn(*args).eval(), seed.Attn(*args).eval()
    assert list(new.state_dict()) == list(ref.state_dict())
    for name, t in new.state_dict().items():
        assert t.shape == ref.state_dict()[name].shape, name
    # seed -> drop-in, through a file as a user would.
    path = tmp_path / "seed.pt"
    torch.save(ref.state_dict(), path)
    new.load_state_dict(torch.load(path))
    q, k, v = make_inputs(op, SIZES)
    lens = lens_for("per_query", SIZES)
    check_against_seed(op, ref, new, q, k, v, lens)
    assert len(calls) == 1
    # drop-in -> seed.
    path = tmp_path / "new.pt"
    torch.save(new.state_dict(), path)
    back.load_state_dict(torch.load(path))
    for name, t in back.state_dict().items():
        assert torch.equal(t, ref.state_dict()[name]), name


@pytest.mark.parametrize("op", ["additive", "concat"])
def test_parameter_changes_are_picked_up(op, calls):
    ref, new = make_pair(op, SIZES)
    q, k, v = make_inputs(op, SIZES)
    lens = lens_for("per_query", SIZES)
    check_against_seed(op, ref, new, q, k, v, lens)
    cache = new._engine_model_cache
    check_against_seed(op, ref, new, q, k, v, lens)
    assert new._engine_model_cache is cache  # unchanged: not rebuilt

    def same_change(fn):
        for module in (ref, new):
            fn(module)
        check_against_seed(op, ref, new, q, k, v, lens)

    first = next(iter(ref.state_dict()))  # W_k.weight or attn.weight
    path = first.split(".")

    def param(module):
        return getattr(getattr(module, path[0]), path[1])

    # load_state_dict (an in-place copy_, seen by the version counter).
    other = {n: t * 1.5 for n, t in ref.state_dict().items()}
    same_change(lambda m: m.load_state_dict(other))
    assert new._engine_model_cache is not cache
    # An optimizer step.
    grads = {n: torch.randn_like(p) for n, p in ref.named_parameters()}

    def sgd(m):
        for n, p in m.named_parameters():
            p.grad = grads[n].clone()
        torch.optim.SGD(m.parameters(), lr=0.3).step()
    same_change(sgd)
    # Writes autograd's version counter does not see: .data and NumPy.
    same_change(lambda m: param(m).data.mul_(-0.5))
    same_change(lambda m: param(m).detach().numpy().__setitem__((0, 0), 2.5))
    # A new Parameter object.
    replacement = torch.randn_like(param(ref))
    same_change(lambda m: setattr(getattr(m, path[0]), path[1],
                                  nn.Parameter(replacement.clone())))
    assert len(calls) == 7  # every check ran on the engine


def test_non_finite_parameters_fall_back(calls):
    ref, new = make_pair("additive", SIZES)
    q, k, v = make_inputs("additive", SIZES)
    for module in (ref, new):
        with torch.no_grad():
            module.w_v.weight[0, 0] = float("nan")
    with torch.no_grad():
        got, want = new(q, k, v, None), ref(q, k, v, None)
    assert calls == []  # the engine refuses NaN weights; PyTorch's math serves them
    assert torch.equal(torch.isnan(got), torch.isnan(want))


def test_copies_and_pickles(tmp_path, calls):
    ref, new = make_pair("concat", SIZES)
    q, k, v = make_inputs("concat", SIZES)
    with torch.no_grad():
        out, _ = new(q, k, v)
    clone = copy.deepcopy(new)
    path = tmp_path / "module.pt"
    torch.save(new, path)
    loaded = torch.load(path)
    with torch.no_grad():
        assert torch.equal(clone(q, k, v)[0], out)
        assert torch.equal(loaded(q, k, v)[0], out)
    assert len(calls) == 3


def test_zero_size_inputs_run_torch(calls):
    new = at.DotProductAttention(0.0).eval()
    with torch.no_grad():
        out = new(torch.randn(2, 0, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 3))
    assert out.shape == (2, 0, 3) and calls == []


def test_scale_is_sqrt_d():
    # The drop-in divides by sqrt(d) as d2l does: one key of two gets
    # softmax([s, 0]) with s = q·k / sqrt(d).
    new = at.DotProductAttention(0.0).eval()
    q = torch.full((1, 1, 4), 1.0)
    k = torch.tensor([[[1.0, 1, 1, 1], [0, 0, 0, 0]]])
    v = torch.tensor([[[1.0], [0.0]]])
    with torch.no_grad():
        out = new(q, k, v)
    s = 4 / math.sqrt(4)
    assert abs(float(out) - 1 / (1 + math.exp(-s))) < 1e-6


def test_swapped_layer_runs_torch(calls):
    # A layer replaced by something without a `weight` Parameter (here a
    # Sequential) is not what the engine model holds: d2l's math runs it.
    ref, new = make_pair("additive", SIZES)
    q, k, v = make_inputs("additive", SIZES)
    layer = ref.W_q
    for module in (ref, new):
        module.W_q = nn.Sequential(copy.deepcopy(layer))
    with torch.no_grad():
        got, want = new(q, k, v, None), ref(q, k, v, None)
    assert calls == []
    assert torch.equal(got, want)
