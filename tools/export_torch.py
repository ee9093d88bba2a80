#!/usr/bin/python3
"""Export PyTorch models and inputs in the files attnscore reads.

  export_torch.py convert STATE.pt OUT.safetensors
                  [--kind additive|concat|bilinear|multihead]
                  [--num-heads NH] [--query-size DQ]
      A state_dict (or a whole module) saved with torch.save, written as
      .safetensors with the state_dict keys as tensor names; --kind and the
      hyperparameters go to the header's __metadata__ (as strings), where
      attnscore-server and `attnscore run` read them.

  export_torch.py additive --query-size DQ --key-size DK --hidden H --out DIR
                  [--batch B --queries N --keys M --value-dim DV]
                  [--valid-lens none|L0,L1,...] [--seed S] [--toy]
      The seed AdditiveAttention module (tools/seed_modules.py) with random
      weights: DIR/NAME.safetensors, random float32 inputs as DIR/queries.npy,
      keys.npy, values.npy (and valid_lens.npy, int64, one per batch entry),
      and what the module itself returns: DIR/out.npy and DIR/weights.npy.
      --toy uses d2l's inputs instead: keys all ones, values arange(M*DV)
      repeated over the batch.

  export_torch.py concat --query-size DQ --key-size DK --value-rows M --value-dim DV
                  --output-size O --out DIR [--batch B --queries N]
                  [--valid-lens none|L0,L1,...] [--seed S]
      The seq2seq tutorial's Attn module (tools/seed_modules.py; Attn(DQ, DK,
      M, DV, O)) with random weights, written as for additive: its state_dict
      (attn.weight, attn.bias, attn_combine.weight, attn_combine.bias), random
      Q (B, N, DQ), K (B, N, DK), V (B, M, DV), and its out and weights.

  export_torch.py multihead --query-size DQ --key-size DK --value-size DV
                  --hiddens H --heads NH --out DIR [--bias] [--batch B]
                  [--queries N --keys M] [--valid-lens none|L0,L1,...] [--seed S]
      d2l's MultiHeadAttention (tools/seed_modules.py) with random weights:
      its state_dict (W_q, W_k, W_v, W_o .weight, and .bias with --bias),
      random Q (B, N, DQ), K (B, M, DK), V (B, M, DV), its out (B, N, H)
      and its weights as the engine lays them out, (B, NH, N, M).

  export_torch.py bilinear --query-size DQ --key-size DK --out DIR
                  [--batch B --queries N --keys M --value-dim DV]
                  [--valid-lens none|L0,L1,...] [--seed S]
      The bilinear score q^T W k (tools/seed_modules.py's BilinearAttention)
      with random W: its state_dict (W.weight (DQ, DK)), inputs and outputs.

Every model command also takes --name NAME (default model): the state_dict
goes to DIR/NAME.safetensors, whose __metadata__ says what the model is:
"kind" (the command) and, for multihead, "num_heads", for concat,
"query_size". Such a file can be dropped into a server's models folder as it
is, and served as NAME.

Floating-point tensors are written as float32 (F32, the engine's type);
integer tensors keep their type. The file is written by hand when the
`safetensors` package is absent: an 8-byte little-endian header length, the
JSON header (tensors sorted by name, padded with spaces to a multiple of 8),
then the tensors back to back. Files are written to a temporary name and
renamed, so a failure leaves nothing behind.

As a library: save_safetensors(state_dict, path) and save_npy(array, path).
"""

import argparse
import json
import os
import struct
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from seed_modules import AdditiveAttention, Attn, BilinearAttention, MultiHeadAttention  # noqa: E402

DTYPES = {np.dtype("<f4"): "F32", np.dtype("<f8"): "F64", np.dtype("<f2"): "F16",
          np.dtype("<i8"): "I64", np.dtype("<i4"): "I32", np.dtype("<i2"): "I16",
          np.dtype("i1"): "I8", np.dtype("u1"): "U8", np.dtype("bool"): "BOOL"}


def as_array(tensor):
    """A state_dict entry (a tensor or a NumPy array) as a little-endian
    C-order numpy array; floats as float32."""
    if isinstance(tensor, np.ndarray):
        tensor = torch.from_numpy(tensor)
    t = tensor.detach().cpu()
    if t.is_floating_point():
        t = t.float()
    a = np.ascontiguousarray(t.numpy())
    return a.astype(a.dtype.newbyteorder("<"), copy=False)


def atomic_write(path, chunks):
    tmp = "%s.tmp.%d" % (path, os.getpid())
    try:
        with open(tmp, "wb") as f:
            for chunk in chunks:
                f.write(chunk)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def save_safetensors(state_dict, path, metadata=None):
    """Writes {name: tensor} to path as .safetensors (float tensors as F32),
    with `metadata` ({str: str}) as the header's __metadata__."""
    metadata = {str(k): str(v) for k, v in (metadata or {}).items()}
    arrays = {name: as_array(t) for name, t in state_dict.items()}
    for name, a in arrays.items():
        if a.dtype not in DTYPES:
            raise ValueError("%s: dtype %s has no safetensors name here" % (name, a.dtype))
    try:
        from safetensors.numpy import save_file
    except ImportError:
        save_file = None
    if save_file is not None:
        tmp = "%s.tmp.%d" % (path, os.getpid())
        try:
            save_file(arrays, tmp, metadata=metadata or None)
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.remove(tmp)
            raise
        return
    header, offset = ({"__metadata__": metadata} if metadata else {}), 0
    for name in sorted(arrays):
        a = arrays[name]
        header[name] = {"dtype": DTYPES[a.dtype], "shape": list(a.shape),
                        "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    atomic_write(path, [struct.pack("<Q", len(text)), text] +
                 [arrays[name].tobytes() for name in sorted(arrays)])


def save_npy(array, path):
    a = np.ascontiguousarray(array)
    tmp = "%s.tmp.%d.npy" % (path, os.getpid())
    try:
        np.save(tmp, a, allow_pickle=False)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def convert(args):
    obj = torch.load(args.state, map_location="cpu")
    if isinstance(obj, torch.nn.Module):
        obj = obj.state_dict()
    if not isinstance(obj, dict) or not all(torch.is_tensor(t) for t in obj.values()):
        sys.exit("export_torch.py: error: %s holds neither a module nor a state_dict of tensors"
                 % args.state)
    metadata = {"kind": args.kind} if args.kind else {}
    for name in ("num_heads", "query_size"):
        if getattr(args, name) is not None:
            if not args.kind:
                sys.exit("export_torch.py: error: --%s needs --kind" % name.replace("_", "-"))
            metadata[name] = getattr(args, name)
    save_safetensors(obj, args.out, metadata)
    print("wrote %s: %s" % (args.out, ", ".join(
        "%s %s" % (k, tuple(v.shape)) for k, v in sorted(obj.items()))))


def parse_lens(text, batch):
    if text == "none":
        return None
    lens = [int(x) for x in text.split(",")]
    if len(lens) != batch or min(lens) < 0:
        sys.exit("export_torch.py: error: --valid-lens needs %d non-negative integers, got %r"
                 % (batch, text))
    return torch.tensor(lens, dtype=torch.int64)


def additive(args):
    torch.manual_seed(args.seed)
    model = AdditiveAttention(args.key_size, args.query_size, args.hidden).eval()
    B, N, M, DV = args.batch, args.queries, args.keys, args.value_dim
    q = torch.randn(B, N, args.query_size)
    if args.toy:
        k = torch.ones(B, M, args.key_size)
        v = torch.arange(M * DV, dtype=torch.float32).reshape(1, M, DV).repeat(B, 1, 1)
    else:
        k = torch.randn(B, M, args.key_size)
        v = torch.randn(B, M, DV)
    lens = parse_lens(args.valid_lens, B)
    with torch.no_grad():
        out = model(q, k, v, lens)
    write_case(args, {}, model, q, k, v, lens, out)
    print("wrote %s: %s.safetensors (H=%d), Q%s K%s V%s, out%s" %
          (args.out, args.name, args.hidden, tuple(q.shape), tuple(k.shape), tuple(v.shape), tuple(out.shape)))


def concat(args):
    torch.manual_seed(args.seed)
    model = Attn(args.query_size, args.key_size, args.value_rows, args.value_dim,
                 args.output_size).eval()
    B, N = args.batch, args.queries
    q = torch.randn(B, N, args.query_size)
    k = torch.randn(B, N, args.key_size)
    v = torch.randn(B, args.value_rows, args.value_dim)
    lens = parse_lens(args.valid_lens, B)
    with torch.no_grad():
        out, _ = model(q, k, v, lens)
    write_case(args, {"query_size": args.query_size}, model, q, k, v, lens, out)
    print("wrote %s: %s.safetensors (M=%d, O=%d), Q%s K%s V%s, out%s" %
          (args.out, args.name, args.value_rows, args.output_size, tuple(q.shape), tuple(k.shape),
           tuple(v.shape), tuple(out.shape)))


def multihead(args):
    torch.manual_seed(args.seed)
    if args.hiddens % args.heads:
        sys.exit("export_torch.py: error: --heads %d does not divide --hiddens %d"
                 % (args.heads, args.hiddens))
    model = MultiHeadAttention(args.key_size, args.query_size, args.value_size, args.hiddens,
                               args.heads, bias=args.bias).eval()
    B, N, M = args.batch, args.queries, args.keys
    q = torch.randn(B, N, args.query_size)
    k = torch.randn(B, M, args.key_size)
    v = torch.randn(B, M, args.value_size)
    lens = parse_lens(args.valid_lens, B)
    with torch.no_grad():
        out = model(q, k, v, lens)
    weights = model.attention_weights.reshape(B, args.heads, N, M)
    write_case(args, {"num_heads": args.heads}, model, q, k, v, lens, out, weights)
    print("wrote %s: %s.safetensors (H=%d, %d heads%s), Q%s K%s V%s, out%s" %
          (args.out, args.name, args.hiddens, args.heads, ", biases" if args.bias else "", tuple(q.shape),
           tuple(k.shape), tuple(v.shape), tuple(out.shape)))


def bilinear(args):
    torch.manual_seed(args.seed)
    model = BilinearAttention(args.key_size, args.query_size).eval()
    B, N, M = args.batch, args.queries, args.keys
    q = torch.randn(B, N, args.query_size)
    k = torch.randn(B, M, args.key_size)
    v = torch.randn(B, M, args.value_dim)
    lens = parse_lens(args.valid_lens, B)
    with torch.no_grad():
        out = model(q, k, v, lens)
    write_case(args, {}, model, q, k, v, lens, out)
    print("wrote %s: %s.safetensors (W %dx%d), Q%s K%s V%s, out%s" %
          (args.out, args.name, args.query_size, args.key_size, tuple(q.shape), tuple(k.shape),
           tuple(v.shape), tuple(out.shape)))


def write_case(args, metadata, model, q, k, v, lens, out, weights=None):
    """A module's state_dict as args.out/NAME.safetensors (its kind and
    hyperparameters in the header's __metadata__), its inputs and what it
    returned (its attention weights unless `weights` is given)."""
    folder = args.out
    os.makedirs(folder, exist_ok=True)
    save_safetensors(model.state_dict(), os.path.join(folder, args.name + ".safetensors"),
                     {"kind": args.command, **metadata})
    weights = model.attention_weights if weights is None else weights
    for name, t in (("queries", q), ("keys", k), ("values", v), ("out", out),
                    ("weights", weights)):
        save_npy(t.numpy().astype("<f4"), os.path.join(folder, name + ".npy"))
    if lens is not None:
        save_npy(lens.numpy().astype("<i8"), os.path.join(folder, "valid_lens.npy"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.splitlines()[1:]))
    sub = ap.add_subparsers(dest="command", required=True)
    c = sub.add_parser("convert", help="a torch.save'd state_dict or module to .safetensors")
    c.add_argument("state")
    c.add_argument("out")
    c.add_argument("--kind", choices=["additive", "concat", "bilinear", "multihead"],
                   help="the model's kind, written to the header's __metadata__")
    c.add_argument("--num-heads", type=int, help="multihead: num_heads, to the metadata")
    c.add_argument("--query-size", type=int, help="concat: Dq, to the metadata")
    a = sub.add_parser("additive", help="the seed AdditiveAttention, its inputs and outputs")
    a.add_argument("--query-size", type=int, required=True)
    a.add_argument("--key-size", type=int, required=True)
    a.add_argument("--hidden", type=int, required=True)
    a.add_argument("--batch", type=int, default=2)
    a.add_argument("--queries", type=int, default=1)
    a.add_argument("--keys", type=int, default=10)
    a.add_argument("--value-dim", type=int, default=4)
    a.add_argument("--valid-lens", default="none")
    a.add_argument("--seed", type=int, default=0)
    a.add_argument("--toy", action="store_true")
    a.add_argument("--out", required=True)
    t = sub.add_parser("concat", help="the seq2seq tutorial's Attn, its inputs and outputs")
    t.add_argument("--query-size", type=int, required=True)
    t.add_argument("--key-size", type=int, required=True)
    t.add_argument("--value-rows", type=int, required=True, help="M (value_size1)")
    t.add_argument("--value-dim", type=int, required=True, help="Dv (value_size2)")
    t.add_argument("--output-size", type=int, required=True)
    t.add_argument("--batch", type=int, default=1)
    t.add_argument("--queries", type=int, default=1)
    t.add_argument("--valid-lens", default="none")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--out", required=True)
    m = sub.add_parser("multihead", help="d2l's MultiHeadAttention, its inputs and outputs")
    m.add_argument("--query-size", type=int, required=True)
    m.add_argument("--key-size", type=int, required=True)
    m.add_argument("--value-size", type=int, required=True)
    m.add_argument("--hiddens", type=int, required=True, help="num_hiddens")
    m.add_argument("--heads", type=int, required=True, help="num_heads")
    m.add_argument("--bias", action="store_true")
    m.add_argument("--batch", type=int, default=2)
    m.add_argument("--queries", type=int, default=4)
    m.add_argument("--keys", type=int, default=6)
    m.add_argument("--valid-lens", default="none")
    m.add_argument("--seed", type=int, default=0)
    m.add_argument("--out", required=True)
    b = sub.add_parser("bilinear", help="the bilinear score q^T W k, its inputs and outputs")
    b.add_argument("--query-size", type=int, required=True)
    b.add_argument("--key-size", type=int, required=True)
    b.add_argument("--batch", type=int, default=2)
    b.add_argument("--queries", type=int, default=1)
    b.add_argument("--keys", type=int, default=10)
    b.add_argument("--value-dim", type=int, default=4)
    b.add_argument("--valid-lens", default="none")
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--out", required=True)
    for p in (a, t, m, b):
        p.add_argument("--name", default="model",
                       help="the model's name: its file is OUT/NAME.safetensors (default model)")
    args = ap.parse_args()
    if not all(c.isalnum() or c in "_-." for c in getattr(args, "name", "x")) or \
            set(getattr(args, "name", "x")) <= {"."}:
        ap.error("--name takes letters, digits, '_', '-' and '.', not dots alone")
    for name in ("query_size", "key_size", "hidden", "batch", "queries", "keys", "value_dim",
                 "value_rows", "output_size", "value_size", "hiddens", "heads", "num_heads"):
        if getattr(args, name, None) is not None and getattr(args, name) < 1:
            ap.error("--%s must be >= 1" % name.replace("_", "-"))
    {"convert": convert, "additive": additive, "concat": concat, "multihead": multihead,
     "bilinear": bilinear}[args.command](args)


if __name__ == "__main__":
    main()
