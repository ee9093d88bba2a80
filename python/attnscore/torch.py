"""Drop-in replacements for the PyTorch attention modules of d2l.ai's chapters
"Attention Scoring Functions" and "Multi-Head Attention" and of the seq2seq
tutorial, served by the attnscore engine, with d2l's gradients.

    from attnscore.torch import (masked_softmax, DotProductAttention,
                                 AdditiveAttention, Attn, MultiHeadAttention,
                                 scaled_dot_product_attention)

Each class has the constructor, parameters, state_dict keys and
`attention_weights` attribute of the module it replaces
(tools/seed_modules.py restates them), so a state_dict saved from one loads
into the other.

Which code runs (docs/python.md has the whole story):

- The engine's forward, whenever dropout is inactive (eval mode, or p = 0),
  every tensor is a 3-D, non-empty float32 CPU tensor, the parameters are
  finite float32 CPU tensors, and valid_lens is None or a CPU int32/int64
  tensor of one or two dims. The engine reads the tensors' own memory
  through NumPy views, strided ones (a transposed K) included; the output
  and the attention weights it allocates are returned as torch tensors over
  the same memory (torch.from_numpy): nothing is copied but valid_lens when
  it is not contiguous.
- When autograd records the call (grad mode on and an input or a parameter
  requires grad), the engine's forward runs inside a torch.autograd.Function
  (_EngineForward) whose backward recomputes d2l's PyTorch math from the
  saved inputs and differentiates it: the gradients are d2l's.
- d2l's PyTorch math otherwise (dropout active in training, other dtypes and
  devices), so training draws d2l's random numbers.

Threads: each call uses the shared engine for torch.get_num_threads(), one
engine per thread count, created on first use (engine()). Results do not
depend on the thread count (docs/semantics.md section 7.2).

Parameters: AdditiveAttention, Attn and MultiHeadAttention build an engine
model from their parameters on first use and keep a copy of the parameters
it was built from. Every engine call compares the parameters with that copy,
bit for bit, and rebuilds on any difference: load_state_dict, an optimizer
step, a write through `.data` or a NumPy view (which autograd's version
counter does not see), a replaced Parameter or a dtype change are all
picked up.

Differences from d2l on the engine path: a negative valid length is a
ValueError (docs/semantics.md section 1.2; d2l gives uniform weights), and a
row whose valid scores are all -inf is NaN (section 1.5). Neither path
overwrites the caller's X, which d2l's masked_softmax does (it writes -1e6
into the masked positions of X in place).
"""

import ctypes
import math
import threading

import torch
from torch import nn
from torch.autograd.function import once_differentiable
from torch.nn import functional as F

from . import AdditiveAttention as _AdditiveModel
from . import ConcatAttention as _ConcatModel
from . import Engine as _Engine
from . import MultiHeadAttention as _MultiHeadModel

__all__ = ["masked_softmax", "DotProductAttention", "AdditiveAttention",
           "Attn", "MultiHeadAttention", "scaled_dot_product_attention", "engine"]

_engines = {}
_engines_lock = threading.Lock()
_UNSERVED = object()  # valid_lens the engine cannot take


def engine(threads=None):
    """The shared attnscore.Engine with `threads` threads (default:
    torch.get_num_threads()), created on first use."""
    if threads is None:
        threads = torch.get_num_threads()
    found = _engines.get(threads)
    if found is None:
        with _engines_lock:
            found = _engines.get(threads)
            if found is None:
                found = _Engine(threads=threads)
                _engines[threads] = found
    return found


def _run(fn, *args, **kwargs):
    # Every engine call passes through here; tests wrap it to watch them.
    return fn(*args, **kwargs)


def _view(t):
    """A NumPy view of t's own memory when the engine can read t, else None."""
    if (not isinstance(t, torch.Tensor) or t.dtype != torch.float32
            or not t.is_cpu or t.layout != torch.strided
            or t.dim() != 3 or t.numel() == 0):
        return None
    try:
        return (t.detach() if t.requires_grad else t).numpy()
    except (RuntimeError, TypeError):  # e.g. a tensor with its neg bit set
        return None


def _lens(valid_lens):
    """valid_lens as the engine takes it: None or an int32/int64 NumPy array,
    or _UNSERVED."""
    if valid_lens is None:
        return None
    if (not isinstance(valid_lens, torch.Tensor)
            or valid_lens.dtype not in (torch.int32, torch.int64)
            or not valid_lens.is_cpu or valid_lens.layout != torch.strided
            or valid_lens.dim() not in (1, 2)):
        return _UNSERVED
    return valid_lens.numpy()  # the engine copies lengths not in C order


def _needs_grad(tensors):
    return torch.is_grad_enabled() and any(
        isinstance(t, torch.Tensor) and t.requires_grad for t in tensors)


# ---------------------------------------------------------------------------
# d2l's PyTorch math: the path for active dropout, other dtypes and devices,
# and what the engine path's backward differentiates. Same operations in the
# same order as d2l, so dropout draws the same random numbers and autograd
# gives the same gradients. Each op's math takes its layers as callables (the
# module's own, or F.linear over saved parameters) and its dropout.

def _sequence_mask(X, valid_len, value):
    """X (rows, M) with entries at column >= valid_len[row] set to `value`,
    out of place."""
    columns = torch.arange(X.size(1), dtype=torch.float32, device=X.device)
    return X.masked_fill(~(columns[None, :] < valid_len[:, None]), value)


def _torch_masked_softmax(X, valid_lens):
    if valid_lens is None:
        return nn.functional.softmax(X, dim=-1)
    shape = X.shape
    if valid_lens.dim() == 1:
        valid_lens = torch.repeat_interleave(valid_lens, shape[1])
    else:
        valid_lens = valid_lens.reshape(-1)
    X = _sequence_mask(X.reshape(-1, shape[-1]), valid_lens, -1e6)
    return nn.functional.softmax(X.reshape(shape), dim=-1)


def _no_dropout(x):
    return x


def _dot_product_math(queries, keys, values, valid_lens, dropout=_no_dropout):
    """(output, attention weights) of d2l's DotProductAttention."""
    d = queries.shape[-1]
    scores = torch.bmm(queries, keys.transpose(1, 2)) / math.sqrt(d)
    weights = _torch_masked_softmax(scores, valid_lens)
    return torch.bmm(dropout(weights), values), weights


# ---------------------------------------------------------------------------
# The engine's forward under autograd.

class _EngineForward(torch.autograd.Function):
    """apply(run, math, valid_lens, *tensors): the forward is run(), the
    engine's outputs (a tuple of tensors); the backward recomputes
    math(valid_lens, *tensors), d2l's PyTorch math on the saved inputs,
    parameters and lengths, and differentiates it, so the gradients are
    d2l's. The recompute costs one more d2l forward in
    the backward (docs/python.md measures it); saving what d2l's autograd
    saves instead would cost every forward its memory. Only first
    derivatives: a backward of the backward raises."""

    @staticmethod
    def forward(ctx, run, math_fn, valid_lens, *tensors):
        ctx.math = math_fn
        ctx.valid_lens = valid_lens
        ctx.save_for_backward(*tensors)
        return run()

    @staticmethod
    @once_differentiable
    def backward(ctx, *grad_outputs):
        needed = ctx.needs_input_grad[3:]
        with torch.enable_grad():
            leaves = [t.detach().requires_grad_(need)
                      for t, need in zip(ctx.saved_tensors, needed)]
            outputs = ctx.math(ctx.valid_lens, *leaves)
        wanted = [leaf for leaf, need in zip(leaves, needed) if need]
        grads = iter(torch.autograd.grad(outputs, wanted, grad_outputs,
                                         allow_unused=True))
        return (None, None, None, *(next(grads) if need else None for need in needed))


def _forward(run, math_fn, valid_lens, tensors):
    """run()'s outputs; through _EngineForward when autograd records the
    call, so that its backward gives math_fn's gradients. The backward gets
    a copy of valid_lens: a change to the caller's after the forward does
    not reach it."""
    if _needs_grad(tensors):
        if isinstance(valid_lens, torch.Tensor):
            valid_lens = valid_lens.clone()
        return _EngineForward.apply(run, math_fn, valid_lens, *tensors)
    return run()


# ---------------------------------------------------------------------------
# The drop-ins.

def masked_softmax(X, valid_lens):
    """d2l's masked_softmax: softmax over the last axis of X (B, N, M), each
    row over its first L entries (valid_lens None, (B,) or (B, N)); the rest
    get weight 0."""
    x, lens = _view(X), _lens(valid_lens)
    if x is None or lens is _UNSERVED:
        return _torch_masked_softmax(X, valid_lens)
    out, = _forward(lambda: (torch.from_numpy(_run(engine().masked_softmax, x, lens)),),
                    lambda valid_lens, X: (_torch_masked_softmax(X, valid_lens),),
                    valid_lens, (X,))
    return out


def _dropout_off(module):
    return not module.training or module.dropout.p == 0


class DotProductAttention(nn.Module):
    """d2l's scaled dot-product attention: softmax(Q Kᵀ / √d) V, masked by
    valid_lens. Returns the output; keeps the weights in attention_weights."""

    def __init__(self, dropout=0.0, **kwargs):
        super().__init__(**kwargs)
        self.dropout = nn.Dropout(dropout)

    def forward(self, queries, keys, values, valid_lens=None):
        if _dropout_off(self):
            q, k, v = _view(queries), _view(keys), _view(values)
            lens = _lens(valid_lens)
            if (q is not None and k is not None and v is not None
                    and lens is not _UNSERVED):
                def run():
                    out, weights = _run(engine().dot_product_attention, q, k, v,
                                        lens, return_weights=True)
                    return torch.from_numpy(out), torch.from_numpy(weights)

                out, self.attention_weights = _forward(
                    run, lambda valid_lens, *qkv: _dot_product_math(*qkv, valid_lens),
                    valid_lens, (queries, keys, values))
                return out
        out, self.attention_weights = _dot_product_math(
            queries, keys, values, valid_lens, self.dropout)
        return out


def _sdpa_math(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
               scale=None):
    """PyTorch 2's scaled_dot_product_attention written from its definition:
    softmax(Q Kᵀ · scale + mask) V over the last two axes, scale 1/√E by
    default, is_causal the top-left lower triangle, a bool mask keeping its
    True keys and a float one added, dropout on the weights."""
    length, source = query.size(-2), key.size(-2)
    factor = 1 / math.sqrt(query.size(-1)) if scale is None else scale
    scores = query @ key.transpose(-2, -1) * factor
    if is_causal:
        keep = torch.ones(length, source, dtype=torch.bool, device=query.device).tril()
        scores = scores.masked_fill(~keep, float("-inf"))
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        else:
            scores = scores + attn_mask
    weights = torch.softmax(scores, dim=-1)
    if dropout_p > 0:
        weights = F.dropout(weights, dropout_p)
    return weights @ value


def _sdpa_views(query, key, value, attn_mask):
    """The engine's views for scaled_dot_product_attention: Q, K, V as
    (batch, L or S, 1 head, E) NumPy arrays, each leading index a batch
    entry, and the mask as (batch, 1, L, S); None where the engine cannot
    take the call."""
    tensors = (query, key, value)
    if (any(not isinstance(t, torch.Tensor) or t.dtype != torch.float32 or not t.is_cpu
            or t.layout != torch.strided or t.dim() < 3 or t.numel() == 0 for t in tensors)
            or key.shape[:-2] != query.shape[:-2] or value.shape[:-2] != query.shape[:-2]):
        return None
    lead, length, source = query.shape[:-2], query.size(-2), key.size(-2)
    try:
        q, k, v = ((t.detach() if t.requires_grad else t).numpy() for t in tensors)
    except (RuntimeError, TypeError):
        return None
    q, k, v = (x.reshape(-1, x.shape[-2], 1, x.shape[-1]) for x in (q, k, v))
    mask = None
    if attn_mask is not None:
        if (not isinstance(attn_mask, torch.Tensor) or not attn_mask.is_cpu
                or attn_mask.dtype not in (torch.bool, torch.float32)):
            return None
        try:
            full = attn_mask.detach().expand(*lead, length, source)
        except RuntimeError:
            return None
        mask = full.reshape(-1, 1, length, source).numpy()
    return q, k, v, mask


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None):
    """torch.nn.functional.scaled_dot_product_attention as PyTorch 2
    defines it, for PyTorch 1.13: query (..., L, E), key (..., S, E), value
    (..., S, Ev) with the same leading dims; attn_mask bool (True takes part)
    or float (added), broadcastable to (..., L, S); is_causal the top-left
    lower triangle; scale 1/√E by default. Returns (..., L, Ev).

    The engine runs it (each leading index a batch entry of
    Engine.multihead_attention) when dropout_p is 0, the tensors are float32
    CPU tensors and a float mask needs no gradient; otherwise, and for the
    backward, PyTorch math
    written from the definition (_sdpa_math). A row every key of which is
    masked is NaN, as in PyTorch."""
    if attn_mask is not None and is_causal:
        raise RuntimeError("scaled_dot_product_attention: attn_mask and is_causal=True were "
                           "both given; PyTorch 2 refuses them together")
    views = None
    # A mask that wants its gradient goes through PyTorch's math, which has it.
    mask_grad = isinstance(attn_mask, torch.Tensor) and attn_mask.requires_grad
    if dropout_p == 0 and (scale is None or scale != 0) and not mask_grad:
        views = _sdpa_views(query, key, value, attn_mask)
    if views is None:
        return _sdpa_math(query, key, value, attn_mask, dropout_p, is_causal, scale)
    q, k, v, mask = views
    shape = (*query.shape[:-1], value.size(-1))

    def run():
        out = _run(engine().multihead_attention, q, k, v,
                   causal="top-left" if is_causal else "none",
                   scale=0.0 if scale is None else float(scale), bias=mask)
        return (torch.from_numpy(out).reshape(shape),)

    out, = _forward(run, lambda _, *qkv: (_sdpa_math(*qkv, attn_mask, 0.0, is_causal, scale),),
                    None, (query, key, value))
    return out


def _libc_memcmp():
    try:
        fn = ctypes.CDLL(None).memcmp
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_int
    fn.argtypes = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)
    return fn


_memcmp = _libc_memcmp()


class _EngineModel:
    """An engine model built from a module's parameters, and the copy of the
    parameters it was built from (docs/python.md, "Parameters")."""

    def __init__(self, params, build):
        self.snapshot = [p.detach().clone(memory_format=torch.contiguous_format)
                         for p in params]
        self.extents = [(s.data_ptr(), 4 * s.numel()) for s in self.snapshot]
        # The engine refuses NaN and Inf weights; d2l's math serves them.
        finite = all(bool(torch.isfinite(s).all()) for s in self.snapshot)
        self.model = build([s.numpy() for s in self.snapshot]) if finite else None

    def matches(self, params):
        """Whether params hold exactly the snapshot's bits. memcmp on a
        contiguous parameter: 5x faster than torch.equal on a 128 x 128
        weight, under 1 µs on a small one."""
        for p, s, (address, size) in zip(params, self.snapshot, self.extents):
            if (p.dtype != torch.float32 or p.shape != s.shape or not p.is_cpu
                    or p.layout != torch.strided):
                return False
            if _memcmp is not None and p.is_contiguous():
                if _memcmp(p.data_ptr(), address, size) != 0:
                    return False
            elif not torch.equal(p.detach().view(torch.int32),
                                 s.view(torch.int32)):
                return False
        return True


def _linear(weight, bias=None):
    return lambda x: F.linear(x, weight, bias)


class _ServedByModel(nn.Module):
    """What AdditiveAttention, Attn and MultiHeadAttention share: the engine
    model, kept with the parameters it was built from, and the engine path
    of forward. Each subclass gives d2l's math as _math(queries, keys,
    values, valid_lens, layers, dropout) -> (output, attention weights),
    `layers` mapping each layer's name to a callable."""

    _engine_model_cache = None

    def _engine_param_names(self):
        """(layer, parameter) pairs in the order the engine model takes them;
        the state_dict key of each is "layer.parameter"."""
        raise NotImplementedError

    def _build_engine_model(self, state_dict):
        raise NotImplementedError

    def _math(self, queries, keys, values, valid_lens, layers, dropout):
        raise NotImplementedError

    @staticmethod
    def _module_weights(weights):
        """The engine's attention weights (a NumPy array) in the module's
        shape."""
        return weights

    def _engine_params(self, names):
        """The parameters the engine model is built from, or None when a
        layer or parameter has been swapped for something else."""
        modules = self._modules  # plain dict lookups: nn.Module.__getattr__
        try:                     # costs about 1 µs a step
            params = [modules[layer]._parameters[name] for layer, name in names]
        except (KeyError, AttributeError):
            return None
        return params if all(isinstance(p, torch.Tensor) for p in params) else None

    def _engine_model(self, names, params):
        """The engine model for params, or None if the engine cannot serve
        them (not float32 CPU tensors, or not finite)."""
        cache = self._engine_model_cache
        if cache is None or not cache.matches(params):
            if any(p.dtype != torch.float32 or not p.is_cpu
                   or p.layout != torch.strided for p in params):
                return None
            cache = _EngineModel(params, lambda arrays: self._build_engine_model(
                {f"{layer}.{name}": a for (layer, name), a in zip(names, arrays)}))
            self._engine_model_cache = cache
        return cache.model

    def _serve(self, queries, keys, values, valid_lens):
        """(out, weights as the engine gives them) from the engine, or None
        when it does not serve this call (the module then runs d2l's math)."""
        names = self._engine_param_names()
        params = self._engine_params(names)
        if params is None:
            return None
        q, k, v = _view(queries), _view(keys), _view(values)
        lens = _lens(valid_lens)
        if q is None or k is None or v is None or lens is _UNSERVED:
            return None
        model = self._engine_model(names, params)
        if model is None:
            return None

        def run():
            out, weights = _run(model, engine(), q, k, v, lens, return_weights=True)
            return torch.from_numpy(out), torch.from_numpy(self._module_weights(weights))

        def math_fn(valid_lens, queries, keys, values, *params):
            layers = {}
            for (layer, name), p in zip(names, params):
                layers.setdefault(layer, {})[name] = p
            layers = {layer: _linear(**p) for layer, p in layers.items()}
            return self._math(queries, keys, values, valid_lens, layers, _no_dropout)

        return _forward(run, math_fn, valid_lens, (queries, keys, values, *params))

    def refresh_engine_model(self):
        """Drops the engine model; the next engine call rebuilds it. Never
        needed for correctness: every call compares the parameters."""
        self._engine_model_cache = None

    def __getstate__(self):
        # The engine model is not picklable; copies and torch.save(module)
        # rebuild it on first use.
        state = self.__dict__.copy()
        state.pop("_engine_model_cache", None)
        return state


class AdditiveAttention(_ServedByModel):
    """d2l's additive attention: softmax(w_vᵀ tanh(W_q q + W_k k)) V, masked by
    valid_lens. Returns the output; keeps the weights in attention_weights.
    state_dict: W_k.weight (H, Dk), W_q.weight (H, Dq), w_v.weight (1, H)."""

    def __init__(self, key_size, query_size, num_hiddens, dropout=0.0,
                 **kwargs):
        super().__init__(**kwargs)
        self.W_k = nn.Linear(key_size, num_hiddens, bias=False)
        self.W_q = nn.Linear(query_size, num_hiddens, bias=False)
        self.w_v = nn.Linear(num_hiddens, 1, bias=False)
        self.dropout = nn.Dropout(dropout)

    def _engine_param_names(self):
        return (("W_q", "weight"), ("W_k", "weight"), ("w_v", "weight"))

    def _build_engine_model(self, state_dict):
        return _AdditiveModel.from_state_dict(state_dict)

    def _math(self, queries, keys, values, valid_lens, layers, dropout):
        queries, keys = layers["W_q"](queries), layers["W_k"](keys)
        features = torch.tanh(queries.unsqueeze(2) + keys.unsqueeze(1))
        scores = layers["w_v"](features).squeeze(-1)
        weights = _torch_masked_softmax(scores, valid_lens)
        return torch.bmm(dropout(weights), values), weights

    def forward(self, queries, keys, values, valid_lens=None):
        served = self._serve(queries, keys, values, valid_lens) if _dropout_off(self) else None
        out, self.attention_weights = served or self._math(
            queries, keys, values, valid_lens,
            {"W_q": self.W_q, "W_k": self.W_k, "w_v": self.w_v}, self.dropout)
        return out


class Attn(_ServedByModel):
    """The seq2seq tutorial's Attn(query_size, key_size, value_size1,
    value_size2, output_size): W = softmax(attn([q; k])) over the
    value_size1 rows of V, out = attn_combine([q; W V]).

    forward(Q (B, N, Dq), K (B, N, Dk), V (B, value_size1, value_size2),
    valid_lens=None) returns (out (B, N, output_size), W (B, N, value_size1))
    and keeps W in attention_weights; valid_lens masks V's rows as d2l's
    masked_softmax does. forward_tutorial(Q, K, V) is the tutorial's own
    forward: batch entry 0 only, W returned as (N, value_size1).
    state_dict: attn.weight, attn.bias, attn_combine.weight,
    attn_combine.bias."""

    def __init__(self, query_size, key_size, value_size1, value_size2,
                 output_size):
        super().__init__()
        self.query_size = query_size
        self.key_size = key_size
        self.value_size1 = value_size1
        self.value_size2 = value_size2
        self.output_size = output_size
        self.attn = nn.Linear(query_size + key_size, value_size1)
        self.attn_combine = nn.Linear(query_size + value_size2, output_size)

    def _engine_param_names(self):
        return (("attn", "weight"), ("attn", "bias"),
                ("attn_combine", "weight"), ("attn_combine", "bias"))

    def _build_engine_model(self, state_dict):
        return _ConcatModel.from_state_dict(state_dict, self.query_size)

    def _math(self, Q, K, V, valid_lens, layers, dropout):
        scores = layers["attn"](torch.cat((Q, K), -1))
        weights = _torch_masked_softmax(scores, valid_lens)
        applied = torch.bmm(weights, V)
        return layers["attn_combine"](torch.cat((Q, applied), -1)), weights

    def forward(self, Q, K, V, valid_lens=None):
        out, self.attention_weights = self._serve(Q, K, V, valid_lens) or self._math(
            Q, K, V, valid_lens, {"attn": self.attn, "attn_combine": self.attn_combine},
            _no_dropout)
        return out, self.attention_weights

    def forward_tutorial(self, Q, K, V):
        out, weights = self.forward(Q[:1], K[:1], V)
        return out, weights[0]


def _transpose_qkv(X, num_heads):
    """d2l's transpose_qkv: (B, N, H) -> (B * num_heads, N, H / num_heads)."""
    X = X.reshape(X.shape[0], X.shape[1], num_heads, -1)
    X = X.permute(0, 2, 1, 3)
    return X.reshape(-1, X.shape[2], X.shape[3])


def _transpose_output(X, num_heads):
    """d2l's transpose_output, the inverse of _transpose_qkv."""
    X = X.reshape(-1, num_heads, X.shape[1], X.shape[2])
    X = X.permute(0, 2, 1, 3)
    return X.reshape(X.shape[0], X.shape[1], -1)


class MultiHeadAttention(_ServedByModel):
    """d2l's multi-head attention: W_q, W_k, W_v project the queries, keys
    and values to num_hiddens features, split into num_heads heads; the
    scaled dot product runs per head with the valid lengths repeated per
    head; the heads are concatenated and projected by W_o. attention_weights
    is d2l's (B * num_heads, N, M), kept by the module's `attention`, a
    DotProductAttention. state_dict: W_q, W_k, W_v, W_o .weight, and their
    .bias when bias=True."""

    def __init__(self, key_size, query_size, value_size, num_hiddens, num_heads,
                 dropout=0.0, bias=False, **kwargs):
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.attention = DotProductAttention(dropout)
        self.W_q = nn.Linear(query_size, num_hiddens, bias=bias)
        self.W_k = nn.Linear(key_size, num_hiddens, bias=bias)
        self.W_v = nn.Linear(value_size, num_hiddens, bias=bias)
        self.W_o = nn.Linear(num_hiddens, num_hiddens, bias=bias)

    @property
    def attention_weights(self):
        return self.attention.attention_weights

    def _engine_param_names(self):
        layers = ("W_q", "W_k", "W_v", "W_o")
        # The engine takes the four weights, then the four biases if any
        # layer has one (a layer without one then makes _engine_params None).
        names = tuple((layer, "weight") for layer in layers)
        if any(getattr(self._modules.get(layer), "bias", None) is not None
               for layer in layers):
            names += tuple((layer, "bias") for layer in layers)
        return names

    def _build_engine_model(self, state_dict):
        return _MultiHeadModel.from_state_dict(state_dict, self.num_heads)

    @staticmethod
    def _module_weights(weights):
        # (B, num_heads, N, M), C order, as d2l's (B * num_heads, N, M).
        return weights.reshape(-1, weights.shape[2], weights.shape[3])

    def _math(self, queries, keys, values, valid_lens, layers, dropout):
        h = self.num_heads
        queries = _transpose_qkv(layers["W_q"](queries), h)
        keys = _transpose_qkv(layers["W_k"](keys), h)
        values = _transpose_qkv(layers["W_v"](values), h)
        if valid_lens is not None:
            valid_lens = torch.repeat_interleave(valid_lens, repeats=h, dim=0)
        output, weights = _dot_product_math(queries, keys, values, valid_lens, dropout)
        return layers["W_o"](_transpose_output(output, h)), weights

    def forward(self, queries, keys, values, valid_lens=None):
        served = self._serve(queries, keys, values, valid_lens) \
            if _dropout_off(self.attention) else None
        out, self.attention.attention_weights = served or self._math(
            queries, keys, values, valid_lens,
            {name: getattr(self, name) for name in ("W_q", "W_k", "W_v", "W_o")},
            self.attention.dropout)
        return out
