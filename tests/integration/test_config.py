"""IndexerConfig: parsing the --attention-config JSON, and every rejection."""
from __future__ import annotations

import pytest

from integration.config import KNOWN_KEYS, SCALE_RULES, IndexerConfig
from sim.formats import ScaleRule


def test_default_is_fp8():
    for text in (None, "", "  ", "{}"):
        config = IndexerConfig.from_json(text)
        assert config == IndexerConfig("fp8", None, "rceil")
        assert config.resolved_layout == "fp8"


def test_mxfp4_choices():
    config = IndexerConfig.from_json('{"indexer_kv_dtype": "mxfp4"}')
    assert (config.kv_dtype, config.resolved_layout, config.scale_rule) == ("mxfp4", "mxfp4", "rceil")
    config = IndexerConfig.from_json(
        '{"indexer_kv_dtype": "mxfp4", "indexer_layout": "mxfp4_tiled", "indexer_scale_rule": "even"}')
    assert (config.kv_dtype, config.resolved_layout, config.scale_rule) == ("mxfp4", "mxfp4_tiled", "even")
    config = IndexerConfig.from_json('{"indexer_kv_dtype": "mxfp4", "scale_rule": "floor"}')  # the short spelling
    assert config.scale_rule == "floor"


@pytest.mark.parametrize("config", [IndexerConfig(), IndexerConfig("mxfp4"), IndexerConfig("mxfp4", "mxfp4", "floor"),
                                    IndexerConfig("mxfp4", "mxfp4_tiled", "ceil")])
def test_to_json_round_trips(config):
    assert IndexerConfig.from_json(config.to_json()) == config


def test_scale_rules_are_sims():
    assert set(SCALE_RULES) == {rule.value for rule in ScaleRule}


@pytest.mark.parametrize("text, message", [
    ("{indexer_kv_dtype: mxfp4}", "not valid JSON"),
    ('["mxfp4"]', "must be a JSON object, got list"),
    ('{"indexer_kv_dtype": "mxfp4", "indexer_kv_dtpye": "fp8"}', r"unknown key\(s\) \['indexer_kv_dtpye'\]"),
    ('{"indexer_kv_dtype": "nvfp4"}', r"indexer_kv_dtype must be one of \['fp8', 'mxfp4'\], got 'nvfp4'"),
    ('{"indexer_kv_dtype": 4}', "indexer_kv_dtype must be one of"),
    ('{"indexer_kv_dtype": "mxfp4", "indexer_layout": "fp8"}',
     r"indexer_layout must be one of \['mxfp4', 'mxfp4_tiled'\]"),
    ('{"indexer_kv_dtype": "mxfp4", "indexer_scale_rule": "round"}', r"indexer_scale_rule must be one of \['rceil'"),
    ('{"indexer_layout": "mxfp4_tiled"}', 'with indexer_kv_dtype="fp8" leave them out'),
    ('{"indexer_kv_dtype": "fp8", "indexer_scale_rule": "floor"}', 'with indexer_kv_dtype="fp8" leave them out'),
    ('{"indexer_kv_dtype": "mxfp4", "scale_rule": "floor", "indexer_scale_rule": "even"}', "not both"),
    ('{"indexer_kv_dtype": "mxfp4", "scale_rule": "nearest"}', r"indexer_scale_rule must be one of"),
    # json.loads would keep the last of two equal keys silently
    ('{"indexer_kv_dtype": "mxfp4", "indexer_kv_dtype": "fp8"}', r"key 'indexer_kv_dtype' is given twice"),
])
def test_rejections_name_the_choices(text, message):
    with pytest.raises(ValueError, match=message) as info:
        IndexerConfig.from_json(text)
    assert str(info.value).startswith("--attention-config")    # every message names the option


@pytest.mark.parametrize("value", [42, b'{"indexer_kv_dtype": "fp8"}', {"indexer_kv_dtype": "fp8"}])
def test_from_json_takes_a_string(value):
    with pytest.raises(ValueError, match=f"--attention-config must be a JSON string, got {type(value).__name__}"):
        IndexerConfig.from_json(value)


def test_unknown_key_message_lists_valid_keys():
    with pytest.raises(ValueError) as info:
        IndexerConfig.from_json('{"kv_dtype": "mxfp4"}')
    for key in KNOWN_KEYS:
        assert key in str(info.value)
