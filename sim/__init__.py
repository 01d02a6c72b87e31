"""sim: the bit-exact NumPy/Numba oracle (formats, page layouts, 64-bit addressing, reference scorer, top-k).

Imports numpy and numba only, never torch.
"""
