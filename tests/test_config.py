"""ScheduleConfig as data: every field's domain, JSON with a schema version, and the JSON Schema."""
from __future__ import annotations

import dataclasses
import json

import pytest

from akgpy.errors import CompileError
from akgpy.schedule.config import SCHEMA_VERSION, BandChoice, Bands, Choices, Range, ScheduleConfig, Sequence


def _outside(dom):
    """A value of the right type just outside `dom`."""
    if isinstance(dom, Range):
        return dom.hi + 1 if dom.integer else dom.hi + 0.5
    if isinstance(dom, Choices):
        probe = dom.values[0]
        if isinstance(probe, bool):
            return 1  # an int where a bool is wanted
        return max(dom.values) + 1
    if isinstance(dom, Bands):
        return (BandChoice("a"), BandChoice("a"))  # two records for one band
    assert isinstance(dom, Sequence)
    return (_outside(dom.item),)


def test_every_field_declares_a_domain_and_its_default_is_inside():
    doms = ScheduleConfig.domains()
    assert set(doms) == {f.name for f in dataclasses.fields(ScheduleConfig)}
    default = ScheduleConfig()
    for name, dom in doms.items():
        assert isinstance(dom, (Range, Choices, Sequence)), name
        assert dom.contains(getattr(default, name)), name


def test_round_trip_through_json_text():
    cfg = ScheduleConfig(tile=(8, 16), stream_share=0.25, parallel=False, narrow_transpose_bytes=16,
                         fusion_depth=0, prefetch_bytes=2048)
    d = cfg.to_json()
    assert d["schema"] == SCHEMA_VERSION and d["tile"] == [8, 16]
    back = ScheduleConfig.from_json(json.loads(json.dumps(d)))
    assert back == cfg and isinstance(back.tile, tuple)
    assert ScheduleConfig.from_json(ScheduleConfig().to_json()) == ScheduleConfig()


def test_fields_left_out_keep_their_defaults():
    assert ScheduleConfig.from_json({"schema": SCHEMA_VERSION, "tile_i": 4}) == ScheduleConfig(tile_i=4)


@pytest.mark.parametrize("name", [f.name for f in dataclasses.fields(ScheduleConfig)])
def test_a_value_outside_its_domain_is_refused_naming_the_field(name):
    bad = _outside(ScheduleConfig.domains()[name])
    with pytest.raises(CompileError, match=f"ScheduleConfig.{name} "):
        ScheduleConfig(**{name: bad})
    d = {**ScheduleConfig().to_json(), name: bad if not isinstance(bad, tuple) else list(bad)}
    with pytest.raises(CompileError, match=f"ScheduleConfig.{name} "):
        ScheduleConfig.from_json(d)


def test_wrong_type_and_unknown_fields_and_versions_are_refused():
    with pytest.raises(CompileError, match="tile_i"):
        ScheduleConfig.from_json({"schema": SCHEMA_VERSION, "tile_i": "8"})
    with pytest.raises(CompileError, match="parallel"):
        ScheduleConfig.from_json({"schema": SCHEMA_VERSION, "parallel": 1})
    with pytest.raises(CompileError, match="no_such_knob"):
        ScheduleConfig.from_json({"schema": SCHEMA_VERSION, "no_such_knob": 1})
    with pytest.raises(CompileError, match="schema"):
        ScheduleConfig.from_json({"schema": SCHEMA_VERSION + 1})
    with pytest.raises(CompileError, match="schema"):
        ScheduleConfig.from_json({"tile_i": 8})
    with pytest.raises(CompileError, match="dict"):
        ScheduleConfig.from_json([1, 2])


def _check_by_hand(value, schema, where):
    """The subset of JSON Schema json_schema() uses, for when jsonschema is not installed."""
    if "const" in schema:
        assert value == schema["const"], where
    if "enum" in schema:
        assert any(type(value) is type(e) and value == e for e in schema["enum"]), where
    kind = schema.get("type")
    if kind == "object":
        assert isinstance(value, dict), where
        assert set(schema["required"]) <= set(value), where
        if schema.get("additionalProperties") is False:
            assert set(value) <= set(schema["properties"]), where
        for k, v in value.items():
            _check_by_hand(v, schema["properties"][k], f"{where}.{k}")
    elif kind == "array":
        assert isinstance(value, list) and len(value) <= schema["maxItems"], where
        for i, v in enumerate(value):
            _check_by_hand(v, schema["items"], f"{where}[{i}]")
    elif kind in ("integer", "number"):
        ok = isinstance(value, int) if kind == "integer" else isinstance(value, (int, float))
        assert ok and not isinstance(value, bool), where
        assert schema["minimum"] <= value <= schema["maximum"], where


def _validate(value, schema):
    try:
        import jsonschema
    except ImportError:
        _check_by_hand(value, schema, "config")
        return
    jsonschema.validate(value, schema)
    _check_by_hand(value, schema, "config")


def test_the_json_schema_accepts_to_json_output_and_refuses_bad_values():
    schema = ScheduleConfig.json_schema()
    assert schema["properties"]["schema"] == {"const": SCHEMA_VERSION}
    for cfg in (ScheduleConfig(), ScheduleConfig(tile=(4, 4, 32), stream_share=1, unroll=False)):
        _validate(json.loads(json.dumps(cfg.to_json())), schema)
    bad = {**ScheduleConfig().to_json(), "tile_i": 0}
    with pytest.raises(Exception):
        _validate(bad, schema)
    with pytest.raises(Exception):
        _validate({**ScheduleConfig().to_json(), "extra": 1}, schema)
