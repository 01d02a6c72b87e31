"""`--attention-config` parsing for the sparse indexer (DESIGN §6).

The attention config is a JSON object; the indexer reads three keys and rejects every other one, so a typo never
silently selects the default:

    indexer_kv_dtype    "fp8" (default) | "mxfp4"
    indexer_layout      page layout of the MXFP4 cache: "mxfp4" (block-planar, default) | "mxfp4_tiled"
    indexer_scale_rule  E8M0 scale rule of the MXFP4 writers: "rceil" (default) | "floor" | "even" | "ceil"
                        (also accepted under the short name "scale_rule"; giving both is an error)

FP8 has exactly one layout and one scale rule (DESIGN §1, §2); naming an MXFP4 layout or scale rule together with
fp8 is an error rather than a silently ignored setting.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from hw.layout import KV_DTYPES, LAYOUTS_OF

# The names of sim.formats.ScaleRule (integration may import sim only for its self-check, so the names are
# listed here and a test pins them to the enum).
SCALE_RULES = ("rceil", "floor", "even", "ceil")
CANONICAL_SCALE_RULE = "rceil"

KEY_KV_DTYPE = "indexer_kv_dtype"
KEY_LAYOUT = "indexer_layout"
KEY_SCALE_RULE = "indexer_scale_rule"
KEY_SCALE_RULE_SHORT = "scale_rule"  # a short spelling of KEY_SCALE_RULE; same meaning
KNOWN_KEYS = (KEY_KV_DTYPE, KEY_LAYOUT, KEY_SCALE_RULE, KEY_SCALE_RULE_SHORT)


@dataclass(frozen=True)
class IndexerConfig:
    """What the user asked for. The gates (integration.gates) decide what actually runs.

    kv_dtype:   "fp8" | "mxfp4"
    layout:     the page layout; None means kv_dtype's block-planar layout ("fp8" or "mxfp4")
    scale_rule: the MXFP4 scale rule (ignored by fp8, which must keep the canonical value)
    """

    kv_dtype: str = "fp8"
    layout: str | None = None
    scale_rule: str = CANONICAL_SCALE_RULE

    def __post_init__(self):
        _check_choice(KEY_KV_DTYPE, self.kv_dtype, KV_DTYPES)
        _check_choice(KEY_SCALE_RULE, self.scale_rule, SCALE_RULES)
        if self.layout is not None:
            _check_choice(KEY_LAYOUT, self.layout, LAYOUTS_OF["mxfp4"])
        if self.kv_dtype == "fp8" and (self.layout is not None or self.scale_rule != CANONICAL_SCALE_RULE):
            raise ValueError(f"--attention-config: {KEY_LAYOUT} and {KEY_SCALE_RULE} configure the MXFP4 cache; with "
                             f'{KEY_KV_DTYPE}="fp8" leave them out (or set {KEY_KV_DTYPE}="mxfp4")')

    @property
    def resolved_layout(self) -> str:
        """The page layout name used by hw/ and sim/ ("fp8", "mxfp4" or "mxfp4_tiled")."""
        return self.layout or self.kv_dtype

    @classmethod
    def from_json(cls, text: str | None) -> "IndexerConfig":
        """Parse the --attention-config string. None or "" gives the defaults (FP8).

        Raises ValueError on malformed JSON, a non-object, a repeated key, unknown keys or values; the message
        lists the choices.
        """
        if text is None:
            return cls()
        if not isinstance(text, str):
            raise ValueError(f"--attention-config must be a JSON string, got {type(text).__name__}: {text!r}")
        if not text.strip():
            return cls()
        try:
            obj = json.loads(text, object_pairs_hook=_object_without_repeated_keys)
        except json.JSONDecodeError as e:
            raise ValueError(f"--attention-config is not valid JSON ({e.msg} at character {e.pos}): {text!r}; "
                             f'expected an object such as {{"{KEY_KV_DTYPE}": "mxfp4"}}') from None
        if not isinstance(obj, dict):
            raise ValueError(f"--attention-config must be a JSON object, got {type(obj).__name__}: {text!r}")
        return cls.from_dict(obj)

    @classmethod
    def from_dict(cls, obj: dict) -> "IndexerConfig":
        unknown = sorted(set(obj) - set(KNOWN_KEYS))
        if unknown:
            raise ValueError(f"--attention-config: unknown key(s) {unknown}; valid keys are {list(KNOWN_KEYS)}")
        if KEY_SCALE_RULE in obj and KEY_SCALE_RULE_SHORT in obj:
            raise ValueError(f"--attention-config: give the scale rule once, as {KEY_SCALE_RULE} or "
                             f"{KEY_SCALE_RULE_SHORT}, not both")
        rule = obj.get(KEY_SCALE_RULE, obj.get(KEY_SCALE_RULE_SHORT, CANONICAL_SCALE_RULE))
        return cls(kv_dtype=obj.get(KEY_KV_DTYPE, "fp8"), layout=obj.get(KEY_LAYOUT), scale_rule=rule)

    def to_json(self) -> str:
        """The canonical --attention-config string of this config (round-trips through from_json)."""
        obj = {KEY_KV_DTYPE: self.kv_dtype}
        if self.layout is not None:
            obj[KEY_LAYOUT] = self.layout
        if self.scale_rule != CANONICAL_SCALE_RULE:
            obj[KEY_SCALE_RULE] = self.scale_rule
        return json.dumps(obj)


def _check_choice(key: str, value, choices: tuple) -> None:
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"--attention-config: {key} must be one of {list(choices)}, got {value!r}")


def _object_without_repeated_keys(pairs: list[tuple[str, object]]) -> dict:
    """json.loads hook: a key given twice is an error (json.loads alone keeps the last one silently)."""
    obj = {}
    for key, value in pairs:
        if key in obj:
            raise ValueError(f"--attention-config: key {key!r} is given twice; give each setting once")
        obj[key] = value
    return obj
