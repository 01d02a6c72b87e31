"""Private kernels of hw.logits and their variants (registered in hw.variants).

scoring.py           shared tile helpers (E8M0 / E2M1 decoding, MXFP4 and FP8 q.k tiles, NaN-keeping relu, head sum)
prefill.py           the ragged prefill kernel (contiguous K)
paged.py             the persistent paged decode kernel
schedule.py          the on-device (sequence, page) work split of the decode kernel (torch ops, no host sync)
calls.py             the checked arguments of one launch, as the launchers hand them to a variant
common.py            declared precisions, head padding, where tl.dot_scaled runs
prefill_variants.py  the prefill kernel's variants (one per q.k path) and their settings
paged_variants.py    the decode kernel's variants and their settings
"""

ISA_SPECS = ()   # the scorer variants' cross-compile specs come with their records in hw.variants
