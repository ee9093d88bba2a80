#!/usr/bin/python3
"""What a bf16 KvCache's decode could round if it ran on the CPU's bf16 dot
products (VDPBF16PS, two bf16 products summed into a float lane), which take
the query and the weights in bf16 too: the error of candidate forms against
float64 attention over the fp32 keys and values, on int8_scales.py's data,
as a multiple of the bound docs/semantics.md section 5.3 sets for bf16 (1.5x
the error of float64 attention over the keys and values rounded to bf16).
Below 1 holds the bound. Keys and values are rounded to bf16 in every form;
sums are in float64.

A float held as two bf16 parts (hi = bf16(x), lo = bf16(x - hi)) costs two
bf16 products where a float costs one multiply-add: VDPBF16PS does 32
products an instruction and a 512-bit FMA 16, so forms that hold the bound
at every seed do no more float products per instruction than the float
kernels the cache runs.

  /usr/bin/python3 bench/bf16_parts.py [--seeds N]
"""
import numpy as np

from int8_scales import attend, bf16, report


def two_parts(x):
    """hi + lo, hi = bf16(x) and lo = bf16(x - hi): within 2^-17 of x."""
    hi = bf16(x).astype(np.float64)
    return hi + bf16(np.asarray(x, np.float64) - hi)


FORMS = {
    "query in one bf16 part, weights in bf16": (bf16, bf16),
    "query in two bf16 parts, weights in bf16": (two_parts, bf16),
    "query in two bf16 parts, weights in two": (two_parts, two_parts),
}


def ratios(k, v, q):
    """Each form's error / the bound on one draw of data."""
    exact = attend(k, v, q)
    rk, rv = bf16(k), bf16(v)
    bound = 1.5 * np.abs(attend(rk, rv, q) - exact).max()
    return {name: np.abs(attend(rk, rv, q, query, weight) - exact).max() / bound
            for name, (query, weight) in FORMS.items()}


if __name__ == "__main__":
    report(__doc__, ratios, "form")
