"""Placeholder: being written."""
def fp8_fp4_mqa_logits(q, kv, weights, cu_seq_len_k_start, cu_seq_len_k_end, clean_logits=True, max_seqlen_k=0,
                       logits_dtype=None):
    raise NotImplementedError


def get_paged_mqa_logits_metadata(context_lens, block_kv, num_sms):
    raise NotImplementedError


def fp8_fp4_paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len,
                             clean_logits=False, logits_dtype=None, layout=None, validate=False):
    raise NotImplementedError
