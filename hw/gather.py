"""Placeholder: being written."""
def cp_gather_indexer_k_quant_cache(kv_cache, block_table, cu_seq_lens, layout=None):
    raise NotImplementedError
