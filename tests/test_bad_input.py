"""Malformed and mutated inputs must fail with an akgpy error, never a crash, a hang or a bare
Python exception (errors.py: "Every error akgpy raises on bad input derives from AkgpyError").

Every case starts from a real corpus file (corpus/ in the repository), loads its
JSON, mutates a copy, and hands the result to `akgpy.load_composite` (or `akgpy.fuse`, or calls a
compiled program for the runtime cases). The cases are one table: id -> base file -> mutation ->
expected error class -> (optionally) the op / tensor the error must name.
"""
from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest

import akgpy
from akgpy.errors import (AkgpyError, ArgumentError, AttrError, CompileError, FormatError, ShapeError,
                          UnsupportedOpError)

# -- corpus -------------------------------------------------------------------------------------

BASE = {
    # Add(input_0, input_1) -> output_0_0; InplaceAssign(input_0, output_0_0, output_0_0) -> output_0_1
    # (fake_output). int32[1]: small enough to compile in the runtime cases.
    "assign_add": "networks/alexnet/Fused_AssignAdd_11514799015909298180.info",
    # Add(input_0, input_1) -> output_0_0, float16 [32,13,13,512], NHWC
    "add_f16": "networks/yolov3_darknet53/Fused_Add_split_381591517177050963.info",
    # Cast(input_0: bool[1], dst_type int32) -> output_0_0
    "cast": "networks/bert_base/Fused_Cast_split_17933060085881663043.info",
    # Transpose(input_0 f16[64,3,3,3], perm [0,3,1,2]) -> output_0_0
    "transpose": "networks/vgg16/Fused_Transpose_fusion_15039980198205697252.info",
    # Reshape([64,25088] -> output_0_0 [64,512,7,7]); Transpose(perm [0,2,3,1]) -> output_0_1
    "reshape_transpose": "networks/vgg16/Fused_Reshape_Transpose_fusion_15437656989273688715.info",
    # ReduceSum(input_0 f32[16,2], axis [1], keep_dims) -> output_0_0 [16,1]
    "reduce_sum": "networks/bert_base/Fused_ReduceSum_split_10163980091148009539.info",
    # MatMul(input_0 f16[100352,64], input_1 f16[64,64], transpose_b) -> output_0_0 [100352,64]
    "matmul": "networks/resnet101/Fused_MatMul_split_7001529160777602543.info",
    # Conv2D(input_0 f16[32,57,57,128] NHWC, input_1 f16[128,3,3,128] OHWI, stride 2) -> [32,28,28,128]
    "conv2d": "networks/resnet101/Fused_Conv2D_split_1342295295185146405.info",
    # OneHot(input_0 int32[1,8192], on 1.0, off 0.0, depth 32, axis -1) -> f32[1,8192,32]
    "one_hot": "networks/gpt/Fused_OneHot_split_17512347889077641172.info",
    # PadAkg(input_0 f16[32,52,52,256], head 0, tail [0,1,1,0]) -> [32,53,53,256]
    "pad": "networks/yolov3_darknet53/Fused_PadAkg_split_1335691012697875742.info",
    # UnPadAkg(input_0 f16[32,32], tail [0,22]) -> [32,10]
    "unpad": "networks/alexnet/Fused_UnPadAkg_split_15677013698056147489.info",
    # BroadcastTo(constant 16.0, shape [64,1]) -> output_0_0; no inputs
    "broadcast": "networks/vgg16/Fused_BroadcastTo_split_11484144656369677747.info",
    # Select(input_0 bool[1], input_1 int32[1], input_2 int32[1]) -> output_0_0
    "select": "networks/bert_base/Fused_Select_fusion_14934853107941257467.info",
    # Complex(input_0 f32[512,384], input_1 f32[512,384]) written as [[x, y]] -> complex64
    "complex": "composite/complex/complex.info",
    # Custom hybrid solver(input_0, input_1) -> output_0_0
    "custom": "networks/custom/lu.info",
    # Mul(input_0 f32[1], constant input_1 = 0.00048828125) -> output_0_0
    "mul_const": "networks/wide_deep/Fused_Mul_fusion_8663813751116570727.info",
    # AddN of four f16[4096,768] in one inner list
    "addn": "ops/gpu/mind-trick_cases/operators/Fused_AddN_fusion_9584919353229493170.json",
}


def _corpus_dir() -> Path:
    return Path(__file__).resolve().parents[1] / "corpus"


@pytest.fixture(scope="session")
def corpus() -> Path:
    root = _corpus_dir()
    assert root.is_dir(), f"corpus not found at {root}: the mutation cases start from real files"
    return root


@pytest.fixture(scope="session")
def load_base(corpus):
    cache: dict[str, dict] = {}

    def get(key: str) -> tuple[dict, Path]:
        path = corpus / BASE[key]
        if key not in cache:
            cache[key] = json.loads(path.read_text())
        return copy.deepcopy(cache[key]), path

    return get


pytestmark = pytest.mark.usefixtures("no_hang")  # a malformed input must not hang akgpy (conftest)


# -- mutation helpers ----------------------------------------------------------------------------

def all_descs(d: dict):
    """Every tensor desc in a composite doc: top-level inputs, op inputs/outputs, top-level outputs."""
    for group in d.get("input_desc") or []:
        yield from group
    for op in d["op_desc"]:
        for group in op.get("input_desc") or []:
            yield from group
        yield from op.get("output_desc") or []
    yield from d["output_desc"]


def set_tensor(d: dict, name: str, **fields) -> dict:
    """Change a tensor consistently everywhere it is described (so only the intended rule fires)."""
    hit = False
    for t in all_descs(d):
        if t.get("tensor_name") == name:
            t.update(fields)
            hit = True
    assert hit, f"mutation found no tensor {name!r}"
    return d


def op_named(d: dict, name: str, k: int = 0) -> dict:
    return [op for op in d["op_desc"] if op["name"] == name][k]


def set_attr(op: dict, name: str, value: Any) -> dict:
    for a in op["attr"]:
        if a["name"] == name:
            a["value"] = value
            return op
    op["attr"].append({"data_type": "listInt" if isinstance(value, list) else "int", "name": name, "value": value})
    return op


def drop_attr(op: dict, name: str) -> dict:
    before = len(op["attr"])
    op["attr"] = [a for a in op["attr"] if a["name"] != name]
    assert len(op["attr"]) == before - 1
    return op


def op_input(op: dict, k: int) -> dict:
    return [t for group in op["input_desc"] for t in group][k]


def _swap_first_two_ops(d):
    d["op_desc"][0], d["op_desc"][1] = d["op_desc"][1], d["op_desc"][0]
    return d


def _duplicate_op(d):
    d["op_desc"].append(copy.deepcopy(d["op_desc"][0]))
    return d


def _shadow_input(d):
    d["op_desc"][0]["output_desc"][0]["tensor_name"] = "input_0"
    d["op_desc"][0]["output_desc"][0]["shape"] = [32, 13, 13, 512]
    d["output_desc"][0]["tensor_name"] = "input_0"
    return d


def _transpose_output_reuses_reshape_name(d):
    t = d["op_desc"][1]["output_desc"][0]
    t["tensor_name"] = "output_0_0"  # already defined by Reshape (with another shape)
    d["output_desc"][0]["tensor_name"] = "output_0_0"
    return d


def _input_listed_twice(d):
    d["input_desc"].append(copy.deepcopy(d["input_desc"][0]))
    return d


def _inplace_target_const(d):
    t = op_input(op_named(d, "InplaceAssign"), 0)
    t["tensor_name"] = "const_target"
    t["value"] = 0
    return d


def _inplace_target_float32(d):
    # InplaceAssign(input_2: float32[1], output_0_0: int32[1], ...): value and target dtypes differ.
    desc = {"data_type": "float32", "format": "DefaultFormat", "shape": [1], "tensor_name": "input_2"}
    d["input_desc"].append([dict(desc)])
    op_named(d, "InplaceAssign")["input_desc"][0] = [dict(desc)]
    return d


def _unpad_batch_tail(d):
    # rank 3: [2,32,32] -> [2,32,10]; a nonzero tail on the batch dim is not allowed
    set_tensor(d, "input_0", shape=[2, 32, 32])
    set_tensor(d, "output_0_0", shape=[1, 32, 10])
    set_attr(d["op_desc"][0], "tail", [1, 0, 22])
    return d


def _reshape_bad_count(d):
    set_tensor(d, "output_0_0", shape=[64, 512, 7, 8])
    return d


def _matmul_bad_k(d):
    set_tensor(d, "input_1", shape=[64, 32])  # transpose_b: K of B is its last dim (32 != 64)
    return d


def _mut(fn: Callable[[dict], Any]) -> Callable[[dict, Path], Any]:
    return lambda d, path: fn(d)


@dataclass(frozen=True)
class Case:
    id: str
    base: str
    mutate: Callable[[dict, Path], Any]  # (doc copy, base path) -> what load_composite gets
    expected: type | tuple[type, ...]
    op: str | None = None  # must appear in the error (err.op or its text)
    tensor: str | None = None  # must appear in the error (err.tensor or its text)


def _text(d):
    return json.dumps(d)


CASES = [
    # --- not JSON / not a composite object ------------------------------------------------------
    Case("truncated_json_text", "assign_add", lambda d, p: p.read_text()[: len(p.read_text()) // 2], FormatError),
    Case("truncated_json_bytes", "assign_add", lambda d, p: p.read_bytes()[:-7], FormatError),
    Case("json_trailing_garbage", "assign_add", lambda d, p: p.read_text() + "}}", FormatError),
    Case("top_level_list_text", "assign_add", lambda d, p: "[" + p.read_text() + "]", FormatError),
    Case("top_level_list_object", "assign_add", lambda d, p: [d], FormatError),
    Case("top_level_none", "assign_add", lambda d, p: None, FormatError),
    Case("top_level_int", "assign_add", lambda d, p: 42, FormatError),
    Case("deeply_nested_json_array", "assign_add", lambda d, p: "[" * 200_000 + "]" * 200_000, FormatError),
    Case("deeply_nested_json_object", "assign_add", lambda d, p: '{"a":' * 200_000 + "1" + "}" * 200_000,
         FormatError),
    Case("file_does_not_exist", "assign_add", lambda d, p: p.with_name(p.name + ".missing"), FormatError),
    Case("file_does_not_exist_str", "assign_add", lambda d, p: str(p) + ".missing", FormatError),
    Case("path_is_a_directory", "assign_add", lambda d, p: p.parent, FormatError),
    Case("path_with_nul_byte", "assign_add", lambda d, p: str(p) + "\x00.info", FormatError),
    # --- top-level structure --------------------------------------------------------------------
    Case("missing_op_desc", "assign_add", _mut(lambda d: d.pop("op_desc") and d), FormatError),
    Case("op_desc_not_a_list", "assign_add", _mut(lambda d: {**d, "op_desc": d["op_desc"][0]}), FormatError),
    Case("op_desc_entry_not_object", "assign_add", _mut(lambda d: {**d, "op_desc": [1, 2]}), FormatError),
    Case("missing_output_desc", "assign_add", _mut(lambda d: d.pop("output_desc") and d), FormatError),
    Case("input_desc_not_a_list", "assign_add", _mut(lambda d: {**d, "input_desc": {"x": 1}}), FormatError),
    Case("input_desc_entry_two_descs", "assign_add",
         _mut(lambda d: {**d, "input_desc": [d["input_desc"][0] + d["input_desc"][1]]}), FormatError),
    Case("kernel_name_not_string", "assign_add", _mut(lambda d: {**d, "op": 17}), FormatError),
    Case("op_name_missing", "assign_add", _mut(lambda d: d["op_desc"][0].pop("name") and d), FormatError),
    Case("op_output_desc_not_list", "assign_add",
         _mut(lambda d: d["op_desc"][0].update(output_desc=d["op_desc"][0]["output_desc"][0]) or d), FormatError,
         op="Add"),
    Case("empty_graph", "assign_add", _mut(lambda d: {**d, "op_desc": [], "output_desc": []}), ShapeError),
    # --- ops -------------------------------------------------------------------------------------
    Case("unknown_op_name", "assign_add", _mut(lambda d: d["op_desc"][0].update(name="FancyAdd") or d),
         UnsupportedOpError, op="FancyAdd"),
    Case("unary_op_with_two_inputs", "assign_add", _mut(lambda d: d["op_desc"][0].update(name="Neg") or d),
         ShapeError, op="Neg"),
    Case("op_without_outputs", "assign_add",
         _mut(lambda d: d["op_desc"][0].update(output_desc=[]) or d), ShapeError, op="Add"),
    # --- attrs -----------------------------------------------------------------------------------
    Case("attr_not_a_list", "transpose", _mut(lambda d: d["op_desc"][0].update(attr="perm=0,3,1,2") or d),
         FormatError, op="Transpose"),
    Case("attr_entry_without_value", "transpose",
         _mut(lambda d: d["op_desc"][0].update(attr=[{"name": "perm"}]) or d), FormatError, op="Transpose"),
    Case("transpose_missing_perm", "transpose", _mut(lambda d: drop_attr(d["op_desc"][0], "perm") and d),
         AttrError, op="Transpose", tensor="output_0_0"),
    Case("transpose_perm_not_a_list", "transpose",
         _mut(lambda d: set_attr(d["op_desc"][0], "perm", "0,3,1,2") and d), AttrError, op="Transpose"),
    Case("transpose_perm_null", "transpose", _mut(lambda d: set_attr(d["op_desc"][0], "perm", None) and d),
         AttrError, op="Transpose"),
    Case("transpose_perm_not_a_permutation", "transpose",
         _mut(lambda d: set_attr(d["op_desc"][0], "perm", [0, 3, 3, 2]) and d), AttrError, op="Transpose"),
    Case("transpose_perm_wrong_rank", "transpose",
         _mut(lambda d: set_attr(d["op_desc"][0], "perm", [0, 2, 1]) and d), AttrError, op="Transpose"),
    Case("transpose_output_shape_disagrees_with_perm", "reshape_transpose",
         _mut(lambda d: set_attr(d["op_desc"][1], "perm", [0, 1, 2, 3]) and d), ShapeError, op="Transpose",
         tensor="output_0_1"),
    Case("cast_dst_type_disagrees_with_output", "cast",
         _mut(lambda d: set_attr(d["op_desc"][0], "dst_type", "float16") and d), (AttrError, ShapeError),
         op="Cast", tensor="output_0_0"),
    Case("cast_dst_type_unknown", "cast", _mut(lambda d: set_attr(d["op_desc"][0], "dst_type", "float8") and d),
         (AttrError, ShapeError), op="Cast"),
    Case("reduce_axis_out_of_range", "reduce_sum",
         _mut(lambda d: set_attr(d["op_desc"][0], "axis", [2]) and d), AttrError, op="ReduceSum"),
    Case("reduce_negative_axis_out_of_range", "reduce_sum",
         _mut(lambda d: set_attr(d["op_desc"][0], "axis", [-3]) and d), AttrError, op="ReduceSum"),
    Case("reduce_axis_is_string", "reduce_sum",
         _mut(lambda d: set_attr(d["op_desc"][0], "axis", "1") and d), AttrError, op="ReduceSum"),
    Case("reduce_keep_dims_not_bool", "reduce_sum",
         _mut(lambda d: set_attr(d["op_desc"][0], "keep_dims", "yes") and d), AttrError, op="ReduceSum"),
    Case("reduce_output_shape_wrong", "reduce_sum", _mut(lambda d: set_tensor(d, "output_0_0", shape=[16, 2])),
         ShapeError, op="ReduceSum", tensor="output_0_0"),
    Case("conv2d_negative_pad_list", "conv2d",
         _mut(lambda d: set_attr(d["op_desc"][0], "pad_list", [1, -1, 1, 1]) and d), AttrError, op="Conv2D"),
    Case("conv2d_dilation_2", "conv2d",
         _mut(lambda d: set_attr(d["op_desc"][0], "dilation", [1, 1, 2, 2]) and d), AttrError, op="Conv2D"),
    Case("conv2d_channel_mismatch", "conv2d", _mut(lambda d: set_tensor(d, "input_1", shape=[128, 3, 3, 64])),
         ShapeError, op="Conv2D", tensor="input_1"),
    Case("conv2d_stride_one_element", "conv2d",
         _mut(lambda d: set_attr(d["op_desc"][0], "stride", [2]) and d), (AttrError, FormatError), op="Conv2D"),
    Case("one_hot_missing_depth", "one_hot", _mut(lambda d: drop_attr(d["op_desc"][0], "depth") and d),
         AttrError, op="OneHot"),
    Case("one_hot_float_indices", "one_hot", _mut(lambda d: set_tensor(d, "input_0", data_type="float32")),
         ShapeError, op="OneHot", tensor="input_0"),
    Case("pad_head_wrong_rank", "pad", _mut(lambda d: set_attr(d["op_desc"][0], "head", [0, 0]) and d),
         AttrError, op="PadAkg"),
    Case("pad_negative_tail", "pad", _mut(lambda d: set_attr(d["op_desc"][0], "tail", [0, -1, 1, 0]) and d),
         AttrError, op="PadAkg"),
    Case("unpad_tail_on_batch_dim", "unpad", _mut(_unpad_batch_tail), AttrError, op="UnPadAkg"),
    Case("unpad_output_shape_disagrees", "unpad",
         _mut(lambda d: set_attr(d["op_desc"][0], "tail", [1, 22]) and d), ShapeError, op="UnPadAkg",
         tensor="output_0_0"),
    Case("broadcast_to_incompatible_shape", "broadcast",
         _mut(lambda d: set_tensor(set_attr(d["op_desc"][0], "shape", [64, 3]) and d, "input_0", shape=[2])),
         ShapeError, op="BroadcastTo"),
    Case("custom_without_func_type", "custom", _mut(lambda d: drop_attr(d["op_desc"][0], "func_type") and d),
         AttrError, op="Custom"),
    # --- shapes ----------------------------------------------------------------------------------
    Case("binary_not_broadcastable", "add_f16", _mut(lambda d: set_tensor(d, "input_1", shape=[32, 13, 13, 7])),
         ShapeError, op="Add", tensor="output_0_0"),
    Case("binary_output_shape_wrong", "add_f16",
         _mut(lambda d: set_tensor(d, "output_0_0", shape=[32, 13, 13, 511])), ShapeError, op="Add",
         tensor="output_0_0"),
    Case("reshape_wrong_element_count", "reshape_transpose", _mut(_reshape_bad_count), ShapeError, op="Reshape",
         tensor="output_0_0"),
    Case("output_desc_shape_disagrees", "add_f16",
         _mut(lambda d: d["output_desc"][0].update(shape=[32, 13, 13, 256]) or d), ShapeError, tensor="output_0_0"),
    Case("output_desc_dtype_disagrees", "add_f16",
         _mut(lambda d: d["output_desc"][0].update(data_type="float32") or d), ShapeError, tensor="output_0_0"),
    Case("op_input_desc_disagrees_with_definition", "add_f16",
         _mut(lambda d: op_input(d["op_desc"][0], 1).update(shape=[32, 13, 13, 256]) or d), ShapeError,
         op="Add", tensor="input_1"),
    Case("matmul_mismatched_k", "matmul", _mut(_matmul_bad_k), ShapeError, op="MatMul", tensor="input_1"),
    Case("matmul_rank_1", "matmul", _mut(lambda d: set_tensor(d, "input_1", shape=[64])), ShapeError,
         op="MatMul"),
    Case("matmul_dst_type_disagrees", "matmul",
         _mut(lambda d: set_attr(d["op_desc"][0], "dst_type", "float32") and d), (AttrError, ShapeError),
         op="MatMul"),
    Case("negative_dimension", "add_f16", _mut(lambda d: set_tensor(d, "input_1", shape=[32, -13, 13, 512])),
         ShapeError, tensor="input_1"),
    Case("shape_not_a_list", "add_f16", _mut(lambda d: set_tensor(d, "input_1", shape="32,13,13,512")),
         FormatError, tensor="input_1"),
    Case("shape_of_floats", "add_f16", _mut(lambda d: set_tensor(d, "input_1", shape=[32.0, 13, 13, 512])),
         FormatError, tensor="input_1"),
    Case("shape_of_bools", "cast", _mut(lambda d: set_tensor(d, "input_0", shape=[True])), FormatError,
         tensor="input_0"),
    Case("shape_missing", "add_f16", _mut(lambda d: [t.pop("shape") for t in all_descs(d)] and d), FormatError),
    # --- dtypes ----------------------------------------------------------------------------------
    Case("add_float16_with_float32", "add_f16", _mut(lambda d: set_tensor(d, "input_1", data_type="float32")),
         ShapeError, op="Add", tensor="input_1"),
    Case("unknown_data_type", "add_f16", _mut(lambda d: set_tensor(d, "input_1", data_type="float8")),
         (FormatError, ShapeError), tensor="input_1"),
    Case("data_type_missing", "add_f16", _mut(lambda d: [t.pop("data_type") for t in all_descs(d)] and d),
         FormatError),
    Case("data_type_not_string", "add_f16", _mut(lambda d: set_tensor(d, "input_0", data_type=16)), FormatError,
         tensor="input_0"),
    Case("select_branch_dtypes_differ", "select", _mut(lambda d: set_tensor(d, "input_2", data_type="float32")),
         ShapeError, op="Select"),
    Case("complex_of_int_parts", "complex", _mut(lambda d: set_tensor(d, "input_1", data_type="int32")),
         ShapeError, op="Complex"),
    Case("constant_value_is_string", "mul_const",
         _mut(lambda d: op_input(d["op_desc"][0], 1).update(value="0.5") or d), FormatError, op="Mul",
         tensor="input_1"),
    Case("constant_value_is_list_of_two", "mul_const",
         _mut(lambda d: op_input(d["op_desc"][0], 1).update(value=[1.0, 2.0]) or d), FormatError, op="Mul"),
    # --- linking ---------------------------------------------------------------------------------
    Case("tensor_name_missing_in_op_input", "add_f16",
         _mut(lambda d: op_input(d["op_desc"][0], 1).pop("tensor_name") and d), FormatError, op="Add"),
    Case("tensor_name_missing_in_graph_input", "add_f16",
         _mut(lambda d: d["input_desc"][1][0].pop("tensor_name") and d), FormatError),
    Case("tensor_name_missing_in_output_desc", "add_f16",
         _mut(lambda d: d["output_desc"][0].pop("tensor_name") and d), FormatError),
    Case("tensor_name_not_string", "add_f16", _mut(lambda d: set_tensor(d, "input_1", tensor_name=1)),
         FormatError),
    Case("tensor_desc_not_object", "add_f16",
         _mut(lambda d: d["op_desc"][0]["input_desc"][1].__setitem__(0, "input_1") or d), FormatError, op="Add"),
    Case("tensor_used_before_definition", "assign_add", _mut(_swap_first_two_ops), ShapeError,
         op="InplaceAssign", tensor="output_0_0"),
    Case("tensor_never_defined", "add_f16",
         _mut(lambda d: op_input(d["op_desc"][0], 1).update(tensor_name="ghost") or d), ShapeError, op="Add",
         tensor="ghost"),
    Case("output_never_produced", "add_f16",
         _mut(lambda d: d["output_desc"][0].update(tensor_name="nowhere") or d), ShapeError, tensor="nowhere"),
    Case("duplicate_definition_same_desc", "add_f16", _mut(_duplicate_op), ShapeError, op="Add",
         tensor="output_0_0"),
    Case("duplicate_definition_different_desc", "reshape_transpose", _mut(_transpose_output_reuses_reshape_name),
         ShapeError, tensor="output_0_0"),
    Case("op_output_shadows_graph_input", "add_f16", _mut(_shadow_input), ShapeError, tensor="input_0"),
    Case("graph_input_listed_twice", "assign_add", _mut(_input_listed_twice), (FormatError, ShapeError),
         tensor="input_0"),
    Case("graph_input_is_constant", "assign_add",
         _mut(lambda d: d["input_desc"][0][0].update(value=1) or d), (FormatError, ShapeError), tensor="input_0"),
    Case("op_output_is_constant", "assign_add",
         _mut(lambda d: d["op_desc"][0]["output_desc"][0].update(value=1) or d), FormatError, op="Add"),
    Case("inplace_assign_targets_constant", "assign_add", _mut(_inplace_target_const), ShapeError,
         op="InplaceAssign"),
    Case("inplace_assign_dtype_mismatch", "assign_add", _mut(_inplace_target_float32), ShapeError,
         op="InplaceAssign", tensor="output_0_0"),
    Case("addn_operand_shapes_differ", "addn", _mut(lambda d: set_tensor(d, "input_3", shape=[4096, 7])),
         ShapeError, op="AddN"),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_load_composite_rejects(case: Case, load_base):
    doc, path = load_base(case.base)
    src = case.mutate(doc, path)
    with pytest.raises(AkgpyError) as info:
        akgpy.load_composite(src)
    err = info.value
    assert isinstance(err, case.expected), f"expected {case.expected}, got {type(err).__name__}: {err}"
    text = str(err)
    if case.op is not None:
        assert case.op in (err.op or "") or case.op in text, f"error does not name op {case.op}: {text}"
    if case.tensor is not None:
        assert case.tensor in (err.tensor or "") or case.tensor in text, \
            f"error does not name tensor {case.tensor}: {text}"


def test_case_table_is_large_and_unique():
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))
    assert len(ids) >= 20


def test_base_files_load_unmutated(load_base):
    """Guard for the table: every base file is valid, so each error comes from its mutation."""
    for key in BASE:
        doc, path = load_base(key)
        akgpy.load_composite(doc)
        akgpy.load_composite(path)
        akgpy.load_composite(str(path))
        akgpy.load_composite(path.read_text())


# -- fuse() on bad input ---------------------------------------------------------------------------

def test_fuse_missing_file(corpus):
    with pytest.raises(FormatError):
        akgpy.fuse(corpus / "no_such_dir" / "no_such_file.info")


def test_fuse_unknown_op(load_base):
    doc, _ = load_base("assign_add")
    doc["op_desc"][0]["name"] = "Frobnicate"
    with pytest.raises(UnsupportedOpError) as info:
        akgpy.fuse(doc)
    assert "Frobnicate" in str(info.value)


def test_fuse_unknown_target(load_base):
    doc, _ = load_base("assign_add")
    with pytest.raises(CompileError):
        akgpy.fuse(doc, target="nonsense")


def test_fuse_element_count_overflowing_int64(load_base):
    """[2**40, 2**40] has 2**80 elements: no index type holds that. Loading may accept the shape,
    but compiling it must fail with an akgpy error, not an internal TVM ValueError."""
    doc, _ = load_base("assign_add")
    huge = [2 ** 40, 2 ** 40]
    for name in ("input_0", "input_1", "output_0_0", "output_0_1"):
        set_tensor(doc, name, shape=huge)
    with pytest.raises(AkgpyError):
        akgpy.fuse(doc)


# -- an in-place write into a tensor that is not a buffer the caller owns ---------------------------

def _inplace_into_intermediate(load_base) -> dict:
    # InplaceAssign(output_0_0, output_0_0, output_0_0): the target is an op output, not a kernel arg.
    doc, _ = load_base("assign_add")
    op_input(op_named(doc, "InplaceAssign"), 0)["tensor_name"] = "output_0_0"
    return doc


@pytest.mark.parametrize("stage", ["reference", "compiled"])
def test_inplace_target_not_a_graph_input(stage, load_base):
    """The format's in-place target is an input buffer. akgpy may reject a graph that targets an
    intermediate tensor (AkgpyError at any stage) or run it, but must not die with a bare error."""
    doc = _inplace_into_intermediate(load_base)
    a, b = np.array([3], np.int32), np.array([4], np.int32)
    try:
        g = akgpy.load_composite(doc)
        if stage == "reference":
            akgpy.reference.run(g, [a, b])
        else:
            akgpy.fuse(g)(a, b)
    except AkgpyError:
        pass


# -- runtime: calling a compiled program with bad arguments ----------------------------------------

@pytest.fixture(scope="module")
def program(corpus):
    # Add(input_0, input_1) written in place into input_0; both int32[1].
    return akgpy.fuse(corpus / BASE["assign_add"])


def _i32(*v):
    return np.array(v, dtype=np.int32)


RUNTIME_CASES = [
    ("no_arrays", lambda: (), None),
    ("one_array_too_few", lambda: (_i32(1),), None),
    ("one_array_too_many", lambda: (_i32(1), _i32(2), _i32(3)), None),
    ("wrong_dtype_float32", lambda: (_i32(1).astype(np.float32), _i32(2)), "input_0"),
    ("wrong_dtype_int64", lambda: (_i32(1), _i32(2).astype(np.int64)), "input_1"),
    ("wrong_dtype_python_list", lambda: ([1], _i32(2)), "input_0"),
    ("wrong_shape_longer", lambda: (_i32(1), _i32(2, 3)), "input_1"),
    ("wrong_shape_0d", lambda: (np.array(1, np.int32), _i32(2)), "input_0"),
    ("wrong_shape_2d", lambda: (_i32(1).reshape(1, 1), _i32(2)), "input_0"),
    ("non_array_object", lambda: (object(), _i32(2)), "input_0"),
    ("non_array_none", lambda: (_i32(1), None), "input_1"),
    ("non_array_dict", lambda: ({"x": 1}, _i32(2)), "input_0"),
    ("non_array_string", lambda: ("1", _i32(2)), "input_0"),
]


@pytest.mark.parametrize("make_args,tensor", [(m, t) for _, m, t in RUNTIME_CASES],
                         ids=[i for i, _, _ in RUNTIME_CASES])
def test_program_call_rejects(program, make_args, tensor):
    with pytest.raises(ArgumentError) as info:
        program(*make_args())
    if tensor is not None:
        assert tensor in (info.value.tensor or "") or tensor in str(info.value)


def test_program_call_good_args_still_work(program):
    """Guard: the fixture program runs, so the failures above are argument checks."""
    a = _i32(3)
    assert program(a, _i32(4)) == ()
    assert a.tolist() == [7]


def test_program_call_read_only_inplace_target(program):
    """input_0 receives the in-place result; a read-only array cannot, and that is the caller's
    mistake: an ArgumentError naming input_0, not numpy's bare ValueError after the kernel ran."""
    a = _i32(3)
    a.flags.writeable = False
    with pytest.raises(ArgumentError) as info:
        program(a, _i32(4))
    assert "input_0" in str(info.value)


# -- the numpy reference takes the same calling convention ----------------------------------------

def test_reference_run_wrong_count(load_base):
    g = akgpy.load_composite(load_base("assign_add")[0])
    with pytest.raises(ArgumentError):
        akgpy.reference.run(g, [_i32(1)])


def test_reference_run_mapping_missing_input(load_base):
    g = akgpy.load_composite(load_base("assign_add")[0])
    with pytest.raises(ArgumentError):
        akgpy.reference.run(g, {"input_1": _i32(1)})


def test_reference_run_wrong_dtype(load_base):
    g = akgpy.load_composite(load_base("assign_add")[0])
    with pytest.raises(ArgumentError) as info:
        akgpy.reference.run(g, [_i32(1).astype(np.float64), _i32(2)])
    assert "input_0" in str(info.value)
