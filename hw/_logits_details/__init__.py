"""Private kernels of hw.logits and their variants (registered in hw.variants).

paged_keys_m.py        the paged decode kernel with the keys on the MMA's M axis (FP8; MXFP4 fold or dot_scaled),
                       its settings and variants, and the conversion helpers the other keys-on-M kernels import
paged_keys_m_wgmma.py  the Gluon (Hopper wgmma) MXFP4 decode kernel and its variant
prefill_keys_m.py      the ragged prefill kernel with the keys on M, its settings and variants
schedule.py            get_paged_mqa_logits_metadata's (sequence, page) work split (torch ops, no host sync)
calls.py               the checked arguments of one launch, as the launchers hand them to a variant
common.py              declared unit roundoffs, the MMA's smallest M, where tl.dot_scaled runs
"""

ISA_SPECS = ()   # the scorer variants' cross-compile specs come with their records in hw.variants
