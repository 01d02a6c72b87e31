"""Placeholder: being written."""
def indexer_k_quant_and_cache(k, kv_cache, slot_mapping, kv_dtype="fp8", layout=None, scale_rule="rceil"):
    raise NotImplementedError


def quantize_q_mxfp4(q, scale_rule="rceil"):
    raise NotImplementedError


def quantize_q_fp8(q, weights):
    raise NotImplementedError
