"""MindSpore's version-2 composite requests: the recorded ones (bench/record_mindspore.py) load,
compile and match the reference, and the loader's value-input rules (VALUE_ATTRS) hold."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest

import akgpy
from akgpy.errors import AttrError, FormatError, UnsupportedOpError
from akgpy.frontends.composite import VALUE_ATTRS
from akgpy.testing import check_program

REQUESTS = Path(__file__).parent / "data" / "mindspore" / "requests"
FILES = sorted(REQUESTS.glob("*.json"))
# Requests akgpy refuses, with the op it does not know.
EXCLUDED: dict[str, str] = {}  # request file -> the op akgpy refuses in it (none now)


def _request(path: Path) -> dict:
    return json.loads(path.read_text())["json"]


def _v1_twin(desc: dict) -> dict:
    """The request written the version-1 way, each value input moved into its attribute: the
    independent statement of what the loader's rule must give."""
    doc = copy.deepcopy(desc)
    for op in doc["op_desc"]:
        rule = VALUE_ATTRS.get(op["name"], {})
        kept, attrs = [], list(op.get("attr") or [])
        for k, group in enumerate(op["input_desc"] or []):
            t = group[0]
            if k in rule and "value" in t:
                v = t["value"] if isinstance(t["value"], list) else [t["value"]]
                attrs = [a for a in attrs if a["name"] != rule[k]] + [
                    {"data_type": "listInt", "name": rule[k], "value": v}]
            else:
                kept.append(group)
        op["input_desc"], op["attr"] = kept, attrs or None
    doc.pop("version", None)
    return doc


def test_recorded_set_covers_the_zoo():
    assert 20 <= len(FILES) <= 40, f"{len(FILES)} recorded requests"
    networks = {p.name.split("__")[0] for p in FILES}
    assert networks == {"transformer_block", "conv_bn_relu", "adam_step", "reduction_loss"}
    assert set(EXCLUDED) <= {p.name for p in FILES}
    seen = set()
    for p in FILES:
        d = _request(p)
        assert d["version"] == 2 and "target_info" in d, p.name
        for op in d["op_desc"]:
            for k, group in enumerate(op["input_desc"] or []):
                if "value" in group[0] and k in VALUE_ATTRS.get(op["name"], {}):
                    seen.add((op["name"], k))
    # the value inputs the rule exists for are really in the recorded set
    assert {("ReduceSum", 1), ("ReduceMax", 1), ("Transpose", 1), ("Reshape", 1), ("BroadcastTo", 1)} <= seen


def test_recorded_requests_are_distinct_graphs():
    hashes = [akgpy.load_composite(_request(p)).hash() for p in FILES if p.name not in EXCLUDED]
    assert len(hashes) == len(set(hashes))


def test_adam_update_divides_and_assigns_to_placeholders():
    """MindSpore's Adam update divides with Div (RealDiv under another name) and declares each
    Assign's output as one element: a placeholder slot, never written (fake_output)."""
    g = akgpy.load_composite(_request(REQUESTS / "adam_step__Fused_Adam_17010435699683442553.json"))
    assert "Div" in {op.name for op in g.ops}
    assigns = [op for op in g.ops if op.name == "Assign"]
    assert assigns and all(op.attrs.get("fake_output") is True for op in assigns)
    assert {op.outputs[0] for op in assigns} <= g.fake_outputs
    assert not set(g.real_outputs) & g.fake_outputs


@pytest.mark.timeout(300)
@pytest.mark.parametrize("path", [p for p in FILES if p.name not in EXCLUDED], ids=lambda p: p.stem)
def test_recorded_request(path: Path):
    desc = _request(path)
    g = akgpy.load_composite(desc)
    assert g.meta["target_info"] == desc["target_info"] and g.meta["version"] == 2
    for op in g.ops:  # no list-valued constant survives as an operand
        assert all(not isinstance(g.tensors[n].value, (list, tuple)) for n in op.inputs), op
    twin = akgpy.load_composite(_v1_twin(desc))
    assert twin == g and twin.hash() == g.hash()
    again = akgpy.load_composite(g.to_composite())
    assert again == g and again.hash() == g.hash() and again.meta == g.meta
    prog = akgpy.fuse(g, target="llvm")
    assert len(prog.kernels) == 1
    assert check_program(g, prog) == []


# -- the rules, on hand-written requests ---------------------------------------------------

def _desc(name, shape, dtype="float32", value=None):
    d = {"data_type": dtype, "format": "DefaultFormat", "shape": list(shape), "tensor_name": name}
    if value is not None:
        d["value"] = value
    return d


def _one_op(op, x_shape, value, out_shape, attrs=(), *, dtype="int64", extra_inputs=()):
    ins = [[_desc("x", x_shape)]] + [[_desc(f"v{k}", [len(v)] if isinstance(v, list) else [1], dtype, v)]
                                     for k, v in enumerate([value, *extra_inputs])]
    return {"composite": True, "op": f"k_{op}", "process": "cpu", "version": 2,
            "target_info": {"arch": "x86_64", "cpu": "core-avx2", "feature": "avx", "system": "linux"},
            "input_desc": [[_desc("x", x_shape)]], "output_desc": [_desc("y", out_shape)],
            "op_desc": [{"name": op, "attr": [{"data_type": type(v).__name__, "name": k, "value": v}
                                              for k, v in attrs] or None,
                         "input_desc": ins, "output_desc": [_desc("y", out_shape)]}]}


def _fused_sum(doc) -> np.ndarray:
    g = akgpy.load_composite(doc)
    prog = akgpy.fuse(g, target="llvm")
    assert check_program(g, prog) == []
    x = np.arange(24, dtype=np.float32).reshape(g.tensors["x"].shape)
    (out,) = prog(x)
    return np.asarray(out)


@pytest.mark.parametrize("value,keep,out_shape,axes", [
    ([0, 2], False, [3], (0, 2)),
    ([0, 2], True, [1, 3, 1], (0, 2)),
    (1, True, [2, 1, 4], (1,)),
    ([-1], False, [2, 3], (2,)),
    ([-3, 2], False, [3], (0, 2)),
])
def test_reduce_axis_value(value, keep, out_shape, axes):
    doc = _one_op("ReduceSum", [2, 3, 4], value, out_shape, [("keep_dims", keep), ("skip_mode", False)])
    g = akgpy.load_composite(doc)
    (op,) = g.ops
    assert op.inputs == ("x",) and op.attrs["axis"] == (tuple(value) if isinstance(value, list) else (value,))
    assert op.attrs["keep_dims"] is keep
    got = _fused_sum(doc)
    want = np.arange(24, dtype=np.float32).reshape(2, 3, 4).sum(axis=axes, keepdims=keep)
    np.testing.assert_array_equal(got, want)
    # a negative axis is the same graph as its non-negative twin
    twin = _one_op("ReduceSum", [2, 3, 4], list(axes), out_shape, [("keep_dims", keep), ("skip_mode", False)])
    assert akgpy.load_composite(twin).hash() == g.hash()


def test_reduce_max_and_transpose_values():
    g = akgpy.load_composite(_one_op("ReduceMax", [2, 3, 4], [1], [2, 4], [("keep_dims", False)]))
    assert g.ops[0].attrs["axis"] == (1,) and g.ops[0].inputs == ("x",)
    g = akgpy.load_composite(_one_op("Transpose", [2, 3, 4], [2, 0, 1], [4, 2, 3]))
    assert g.ops[0].attrs["perm"] == (2, 0, 1) and g.ops[0].inputs == ("x",)
    with pytest.raises(AttrError, match="perm"):
        akgpy.load_composite(_one_op("Transpose", [2, 3, 4], [2, 0, 0], [4, 2, 2]))


def test_list_value_on_an_op_that_takes_none():
    doc = _one_op("Add", [2, 3], [1.0, 2.0, 3.0], [2, 3], dtype="float32")
    with pytest.raises(FormatError, match="Add takes none") as e:
        akgpy.load_composite(doc)
    assert e.value.op.startswith("Add") and e.value.tensor == "v0"


def test_value_past_the_rule_is_a_list_error():
    # ReduceSum's rule covers input 1 only: a second list input is not an axis
    doc = _one_op("ReduceSum", [2, 3, 4], [1], [2, 4], [("keep_dims", False)], extra_inputs=[[0, 1]])
    with pytest.raises(FormatError, match="ReduceSum takes none") as e:
        akgpy.load_composite(doc)
    assert e.value.tensor == "v1"


def test_axis_value_must_be_ints():
    with pytest.raises(FormatError, match="axis must be an int or a list of ints") as e:
        akgpy.load_composite(_one_op("ReduceSum", [2, 3, 4], [1.5], [2, 4], [("keep_dims", False)],
                                     dtype="float32"))
    assert e.value.tensor == "v0"


def test_value_and_attribute_must_agree():
    doc = _one_op("ReduceSum", [2, 3, 4], [1], [2, 4], [("keep_dims", False), ("axis", [2])])
    with pytest.raises(FormatError, match="differs from the attribute"):
        akgpy.load_composite(doc)
    same = _one_op("ReduceSum", [2, 3, 4], [1], [2, 4], [("keep_dims", False), ("axis", [1])])
    assert akgpy.load_composite(same).ops[0].attrs["axis"] == (1,)


def test_skip_mode_with_no_axis_is_refused():
    doc = _one_op("ReduceSum", [2, 3, 4], [], [2, 3, 4], [("keep_dims", False), ("skip_mode", True)])
    with pytest.raises(AttrError, match="skip_mode"):
        akgpy.load_composite(doc)
    # without skip_mode an empty axis list reduces every axis
    every = _one_op("ReduceSum", [2, 3, 4], [], [1], [("keep_dims", False), ("skip_mode", False)])
    assert _fused_sum(every).reshape(-1)[0] == np.arange(24).sum()


def test_log_with_a_base_is_refused():
    doc = _one_op("Log", [2, 3], None, [2, 3], [("base", 2.0), ("scale", 1.0), ("shift", 0.0)])
    doc["op_desc"][0]["input_desc"] = [[_desc("x", [2, 3])]]
    with pytest.raises(AttrError, match="base=2.0"):
        akgpy.load_composite(doc)
    doc["op_desc"][0]["attr"][0]["value"] = -1.0
    assert akgpy.load_composite(doc).ops[0].name == "Log"
