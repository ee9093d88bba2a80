"""attnscore: attention scoring functions on the CPU, for NumPy arrays.

    import numpy as np
    import attnscore

    engine = attnscore.Engine()                 # threads=1, isa="best", precision="fp32"
    q = np.random.rand(2, 1, 2).astype(np.float32)
    k = np.ones((2, 10, 2), np.float32)
    v = np.tile(np.arange(40, dtype=np.float32).reshape(1, 10, 4), (2, 1, 1))
    out, weights = engine.dot_product_attention(q, k, v, np.array([2, 6]),
                                                return_weights=True)

    model = attnscore.AdditiveAttention.from_state_dict(module.state_dict())
    out = model(engine, queries, keys, values, valid_lens)

Engine: masked_softmax(x, valid_lens=None, out=None),
dot_product_attention(q, k, v, valid_lens=None, return_weights=False,
out=None, weights_out=None) and multihead_attention(q, k, v, valid_lens=None,
causal="none", scale=0.0, window=None, alibi_slopes=None, softcap=0.0,
sinks=None, bias=None, return_weights=False, out=None, weights_out=None) on
(B, N, H, D) arrays, and multihead_attention_packed(q, k, v, cu_seqlens_q,
cu_seqlens_k, ...) on sequences packed row after row. Models (AdditiveAttention, ConcatAttention,
BilinearAttention) are called as model(engine, q, k, v, valid_lens=None,
return_weights=False, out=None, weights_out=None); d2l's MultiHeadAttention
takes causal= too. KvCache(batch, capacity, kv_heads, key_dim, value_dim,
precision="fp32", block_positions=0, blocks=0) holds keys and values for
decoding, its sequences sharing a pool of blocks where block_positions and
blocks are set: append(keys, values, counts=None), append_to, clear, length,
blocks_in_use and attend(engine, q, query_counts=None, return_weights=False,
...multihead_attention's score keywords), packed with a count per sequence
when counts are given;
KvCache.block_positions_multiple(key_dim, value_dim) is the multiple
block_positions must be. What each op computes, with its valid lengths and
tolerances, is docs/semantics.md.

The catalogue: catalogue() lists every op and model (name, inputs, outputs,
weights, parameters), and Op(name, weights=None, **model_params) or
Op.load(path, **model_params) runs any of them by name:
op(engine, return_weights=False, queries=q, keys=k, values=v, causal=...).

Arrays:
- Tensors must be float32 NumPy arrays (native byte order); anything else
  (float64, int, a list, a torch tensor) raises TypeError naming the
  argument: nothing is converted silently. Any strides are accepted: an
  array whose strides are non-negative multiples of 4 bytes and whose data
  is aligned is read in place (a transposed view is not copied); one with
  negative strides or unaligned data is first copied to C order.
- valid_lens is None, or an int32 / int64 array of shape (B,) (one length
  per batch entry) or (B, N) (one per query); it is copied to C order when
  it is not.
- out= and weights_out= are writable float32 arrays of the output's shape,
  any non-negative strides, written in place (and returned). Otherwise the
  outputs are new C-order arrays. out=x makes masked_softmax work in place.
- Inputs are checked before any output is allocated. A refused call raises
  ValueError with the engine's message (InvalidArgument and Unsupported),
  OSError for a model file that cannot be read, RuntimeError for an internal
  failure, and writes nothing.
- The GIL is released while an op runs: an Engine and a model may serve
  many Python threads at once.
- Ctrl-C stops a call of the main thread within about a row of its work
  and raises KeyboardInterrupt; out= and weights_out= are then left as they
  were (while SIGINT's handler is Python's default).
"""

from ._attnscore import (AdditiveAttention, BilinearAttention, ConcatAttention, Engine, KvCache,
                         MultiHeadAttention, Op, __version__, catalogue)

__all__ = ["Engine", "AdditiveAttention", "ConcatAttention", "BilinearAttention",
           "MultiHeadAttention", "KvCache", "Op", "catalogue", "__version__"]

_ADDITIVE_KEYS = ("W_q.weight", "W_k.weight", "w_v.weight")
_CONCAT_KEYS = ("attn.weight", "attn.bias", "attn_combine.weight", "attn_combine.bias")
_BILINEAR_KEYS = ("W.weight",)
_MULTIHEAD_WEIGHTS = ("W_q.weight", "W_k.weight", "W_v.weight", "W_o.weight")
_MULTIHEAD_BIASES = ("W_q.bias", "W_k.bias", "W_v.bias", "W_o.bias")


def _state_dict_arrays(model, state_dict, names):
    """The entries `names` of a state_dict, in order, as NumPy arrays.

    Torch tensors (and Parameters) are converted with .detach().cpu().numpy(),
    without importing torch; other values are passed on as they are, for the
    extension to refuse anything that is not a float32 array. A missing or an
    unexpected key is a ValueError, as an unexpected tensor in a model file is.
    """
    try:
        keys = list(state_dict.keys())
    except AttributeError:
        raise TypeError("%s.from_state_dict: the state_dict must be a mapping of names to "
                        "arrays, got %s" % (model, type(state_dict).__name__)) from None
    missing = [name for name in names if name not in keys]
    unexpected = [str(key) for key in keys if key not in names]
    if missing or unexpected:
        problems = []
        if missing:
            problems.append("missing " + ", ".join(missing))
        if unexpected:
            problems.append("unexpected " + ", ".join(unexpected))
        raise ValueError("%s.from_state_dict: %s; the state_dict must hold exactly %s"
                         % (model, "; ".join(problems), ", ".join(names)))
    arrays = []
    for name in names:
        value = state_dict[name]
        module = type(value).__module__ or ""
        if module == "torch" or module.startswith("torch."):
            value = value.detach().cpu().numpy()
        arrays.append(value)
    return arrays


def _additive_from_state_dict(state_dict):
    """AdditiveAttention from d2l's AdditiveAttention state_dict.

    state_dict maps W_q.weight (H, Dq), W_k.weight (H, Dk) and w_v.weight
    (1, H) to float32 NumPy arrays or torch tensors. The weights are copied.
    """
    return AdditiveAttention._from_arrays(
        *_state_dict_arrays("AdditiveAttention", state_dict, _ADDITIVE_KEYS))


def _concat_from_state_dict(state_dict, query_size):
    """ConcatAttention from the seq2seq tutorial's Attn state_dict.

    state_dict maps attn.weight (M, Dq + Dk), attn.bias (M),
    attn_combine.weight (O, Dq + Dv) and attn_combine.bias (O) to float32
    NumPy arrays or torch tensors; query_size is Dq. The weights are copied.
    """
    return ConcatAttention._from_arrays(
        query_size, *_state_dict_arrays("ConcatAttention", state_dict, _CONCAT_KEYS))


def _bilinear_from_state_dict(state_dict):
    """BilinearAttention from a state_dict holding W.weight (Dq, Dk) (an
    nn.Linear(Dk, Dq, bias=False) named W). The weight is copied."""
    return BilinearAttention._from_arrays(
        *_state_dict_arrays("BilinearAttention", state_dict, _BILINEAR_KEYS))


def _multihead_from_state_dict(state_dict, num_heads):
    """MultiHeadAttention from d2l's MultiHeadAttention state_dict: W_q, W_k,
    W_v and W_o .weight, and their .bias when the module has biases; the
    heads are not in the state_dict, so num_heads is given. Copied."""
    keys = getattr(state_dict, "keys", None)
    with_bias = keys is not None and any(name in keys() for name in _MULTIHEAD_BIASES)
    names = _MULTIHEAD_WEIGHTS + (_MULTIHEAD_BIASES if with_bias else ())
    return MultiHeadAttention._from_arrays(
        num_heads, *_state_dict_arrays("MultiHeadAttention", state_dict, names))


AdditiveAttention.from_state_dict = staticmethod(_additive_from_state_dict)
BilinearAttention.from_state_dict = staticmethod(_bilinear_from_state_dict)
MultiHeadAttention.from_state_dict = staticmethod(_multihead_from_state_dict)
ConcatAttention.from_state_dict = staticmethod(_concat_from_state_dict)
