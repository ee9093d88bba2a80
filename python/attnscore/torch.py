"""Drop-in replacements for the PyTorch attention modules of d2l.ai's chapter
"Attention Scoring Functions" and of the seq2seq tutorial, served by the
attnscore engine where no gradient is needed.

    from attnscore.torch import (masked_softmax, DotProductAttention,
                                 AdditiveAttention, Attn)

Each class has the constructor, parameters, state_dict keys and
`attention_weights` attribute of the module it replaces
(tools/seed_modules.py restates them), so a state_dict saved from one loads
into the other.

Which code runs (docs/python.md has the whole story):

- The engine, when no gradient is needed (torch.is_grad_enabled() is false,
  or neither an input nor a parameter requires grad), dropout is inactive
  (eval mode, or p = 0), every tensor is a 3-D, non-empty float32 CPU tensor,
  the parameters are finite float32 CPU tensors, and valid_lens is None or a
  CPU int32/int64 tensor of one or two dims. The engine reads the tensors'
  own memory through NumPy views, strided ones (a transposed K) included;
  the output and the attention weights it allocates are returned as torch
  tensors over the same memory (torch.from_numpy): nothing is copied but
  valid_lens when it is not contiguous.
- d2l's PyTorch math otherwise, so training, autograd, other dtypes and other
  devices work as before.

Threads: each call uses the shared engine for torch.get_num_threads(), one
engine per thread count, created on first use (engine()). Results do not
depend on the thread count (docs/semantics.md section 7.2).

Parameters: AdditiveAttention and Attn build an engine model from their
parameters on first use and keep a copy of the parameters it was built
from. Every engine call compares the parameters with that copy, bit for bit,
and rebuilds on any difference: load_state_dict, an optimizer step, a write
through `.data` or a NumPy view (which autograd's version counter does not
see), a replaced Parameter or a dtype change are all picked up.

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

from . import AdditiveAttention as _AdditiveModel
from . import ConcatAttention as _ConcatModel
from . import Engine as _Engine

__all__ = ["masked_softmax", "DotProductAttention", "AdditiveAttention",
           "Attn", "engine"]

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
# d2l's PyTorch math: the path for gradients, active dropout, other dtypes and
# devices. Same operations in the same order as d2l, so dropout draws the same
# random numbers and autograd gives the same gradients.

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


# ---------------------------------------------------------------------------
# The drop-ins.

def masked_softmax(X, valid_lens):
    """d2l's masked_softmax: softmax over the last axis of X (B, N, M), each
    row over its first L entries (valid_lens None, (B,) or (B, N)); the rest
    get weight 0."""
    if not _needs_grad((X,)):
        x, lens = _view(X), _lens(valid_lens)
        if x is not None and lens is not _UNSERVED:
            return torch.from_numpy(_run(engine().masked_softmax, x, lens))
    return _torch_masked_softmax(X, valid_lens)


def _dropout_off(module):
    return not module.training or module.dropout.p == 0


class DotProductAttention(nn.Module):
    """d2l's scaled dot-product attention: softmax(Q Kᵀ / √d) V, masked by
    valid_lens. Returns the output; keeps the weights in attention_weights."""

    def __init__(self, dropout=0.0, **kwargs):
        super().__init__(**kwargs)
        self.dropout = nn.Dropout(dropout)

    def forward(self, queries, keys, values, valid_lens=None):
        if _dropout_off(self) and not _needs_grad((queries, keys, values)):
            q, k, v = _view(queries), _view(keys), _view(values)
            lens = _lens(valid_lens)
            if (q is not None and k is not None and v is not None
                    and lens is not _UNSERVED):
                out, weights = _run(engine().dot_product_attention, q, k, v,
                                    lens, return_weights=True)
                self.attention_weights = torch.from_numpy(weights)
                return torch.from_numpy(out)
        d = queries.shape[-1]
        scores = torch.bmm(queries, keys.transpose(1, 2)) / math.sqrt(d)
        self.attention_weights = _torch_masked_softmax(scores, valid_lens)
        return torch.bmm(self.dropout(self.attention_weights), values)


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


class _ServedByModel(nn.Module):
    """What AdditiveAttention and Attn share: the engine model, kept with the
    parameters it was built from, and the engine path of forward."""

    # (layer, parameter) pairs in the order the engine model takes them; the
    # state_dict key of each is "layer.parameter".
    _ENGINE_PARAMS = ()
    _engine_model_cache = None

    def _build_engine_model(self, state_dict):
        raise NotImplementedError

    def _engine_params(self):
        """The parameters the engine model is built from, or None when a
        layer or parameter has been swapped for something else."""
        modules = self._modules  # plain dict lookups: nn.Module.__getattr__
        try:                     # costs about 1 µs a step
            params = [modules[layer]._parameters[name]
                      for layer, name in self._ENGINE_PARAMS]
        except (KeyError, AttributeError):
            return None
        return params if all(isinstance(p, torch.Tensor) for p in params) else None

    def _engine_model(self, params):
        """The engine model for params, or None if the engine cannot serve
        them (not float32 CPU tensors, or not finite)."""
        cache = self._engine_model_cache
        if cache is None or not cache.matches(params):
            if any(p.dtype != torch.float32 or not p.is_cpu
                   or p.layout != torch.strided for p in params):
                return None
            cache = _EngineModel(params, lambda arrays: self._build_engine_model(
                {f"{layer}.{name}": a for (layer, name), a
                 in zip(self._ENGINE_PARAMS, arrays)}))
            self._engine_model_cache = cache
        return cache.model

    def _serve(self, queries, keys, values, valid_lens):
        """(out, weights) from the engine, or None when it does not serve
        this call (the module then runs d2l's math)."""
        params = self._engine_params()
        if params is None or _needs_grad((queries, keys, values, *params)):
            return None
        q, k, v = _view(queries), _view(keys), _view(values)
        lens = _lens(valid_lens)
        if q is None or k is None or v is None or lens is _UNSERVED:
            return None
        model = self._engine_model(params)
        if model is None:
            return None
        out, weights = _run(model, engine(), q, k, v, lens, return_weights=True)
        weights = torch.from_numpy(weights)
        self.attention_weights = weights
        return torch.from_numpy(out), weights

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

    _ENGINE_PARAMS = (("W_q", "weight"), ("W_k", "weight"), ("w_v", "weight"))

    def __init__(self, key_size, query_size, num_hiddens, dropout=0.0,
                 **kwargs):
        super().__init__(**kwargs)
        self.W_k = nn.Linear(key_size, num_hiddens, bias=False)
        self.W_q = nn.Linear(query_size, num_hiddens, bias=False)
        self.w_v = nn.Linear(num_hiddens, 1, bias=False)
        self.dropout = nn.Dropout(dropout)

    def _build_engine_model(self, state_dict):
        return _AdditiveModel.from_state_dict(state_dict)

    def forward(self, queries, keys, values, valid_lens=None):
        if _dropout_off(self):
            served = self._serve(queries, keys, values, valid_lens)
            if served is not None:
                return served[0]
        queries, keys = self.W_q(queries), self.W_k(keys)
        features = torch.tanh(queries.unsqueeze(2) + keys.unsqueeze(1))
        scores = self.w_v(features).squeeze(-1)
        self.attention_weights = _torch_masked_softmax(scores, valid_lens)
        return torch.bmm(self.dropout(self.attention_weights), values)


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

    _ENGINE_PARAMS = (("attn", "weight"), ("attn", "bias"),
                      ("attn_combine", "weight"), ("attn_combine", "bias"))

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

    def _build_engine_model(self, state_dict):
        return _ConcatModel.from_state_dict(state_dict, self.query_size)

    def forward(self, Q, K, V, valid_lens=None):
        served = self._serve(Q, K, V, valid_lens)
        if served is not None:
            return served
        scores = self.attn(torch.cat((Q, K), -1))
        self.attention_weights = _torch_masked_softmax(scores, valid_lens)
        applied = torch.bmm(self.attention_weights, V)
        return (self.attn_combine(torch.cat((Q, applied), -1)),
                self.attention_weights)

    def forward_tutorial(self, Q, K, V):
        out, weights = self.forward(Q[:1], K[:1], V)
        return out, weights[0]
