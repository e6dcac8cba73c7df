"""Depthwise 3x3 conv, a MobileNetV2 inverted-residual block and a ResNet-50 bottleneck: akgpy against onnxruntime, both
on 2 threads, calls interleaved in one process, medians. Not a test: run by hand,
`TVM_NUM_THREADS=2 python bench/bench_cnn_ops.py`."""
from __future__ import annotations

import io
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("TVM_NUM_THREADS", "2")

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import akgpy  # noqa: E402
from akgpy.graph.builder import GraphBuilder  # noqa: E402

ROUNDS = int(os.environ.get("ROUNDS", "30"))


def ort_session(model):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def timed(fns: dict, rounds=ROUNDS) -> dict:
    for f in fns.values():
        f(), f()
    times = {k: [] for k in fns}
    for _ in range(rounds):
        for k, f in fns.items():  # interleaved
            t = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t)
    return {k: statistics.median(v) for k, v in times.items()}


def depthwise(h=112, c=96):
    rng = np.random.default_rng(0)
    w = rng.standard_normal((c, 1, 3, 3)).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w"], ["y"], group=c, pads=[1, 1, 1, 1], kernel_shape=[3, 3])
    graph = helper.make_graph([node], "dw", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, h, h])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              initializer=[numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = rng.standard_normal((1, c, h, h)).astype(np.float32)
    # the bare NHWC Conv2D (input already padded), as a kernel alone
    b = GraphBuilder("dw_nhwc")
    xv, wv = b.input("x", (1, h + 2, h + 2, c)), b.input("w", (c, 3, 3, 1))
    b.output(b.op("Conv2D", [xv, wv], (1, h, h, c), "float32", stride=[1, 1, 1, 1], groups=c))
    nhwc = akgpy.fuse(b.build())
    xn = np.ascontiguousarray(np.pad(x.transpose(0, 2, 3, 1), [(0, 0), (1, 1), (1, 1), (0, 0)]))
    wn = np.ascontiguousarray(w.transpose(0, 2, 3, 1))
    prog = akgpy.fuse(akgpy.from_onnx(model))
    sess = ort_session(model)
    t = timed({"akgpy NHWC Conv2D kernel": lambda: nhwc(xn, wn), "akgpy from ONNX (NCHW in/out)": lambda: prog(x),
               "onnxruntime": lambda: sess.run(None, {"x": x})})
    moved = (xn.nbytes + h * h * c * 4)
    return t, moved, prog


def mobilenet_block(h=56, c=24, expand=6):
    import torch
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from test_cnn_ops import InvertedResidual, _randomise_bn
    torch.manual_seed(0)
    model = _randomise_bn(InvertedResidual(c, c, 1, expand))
    x = np.random.default_rng(1).standard_normal((1, c, h, h)).astype(np.float32)
    buf = io.BytesIO()
    with torch.no_grad():
        torch.onnx.export(model, (torch.from_numpy(x),), buf, dynamo=False, opset_version=17, input_names=["x"])
    proto = onnx.load_from_string(buf.getvalue())
    return compare(proto, x)


def bottleneck(h=56, c=256, mid=64):
    """ResNet-50's bottleneck at 56x56: 1x1 256->64, 3x3 64->64, 1x1 64->256, identity residual."""
    import torch
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from test_cnn_ops import _randomise_bn
    from test_layout_pass import Bottleneck
    torch.manual_seed(0)
    model = _randomise_bn(Bottleneck(c, mid))
    x = np.random.default_rng(1).standard_normal((1, c, h, h)).astype(np.float32)
    buf = io.BytesIO()
    with torch.no_grad():
        torch.onnx.export(model, (torch.from_numpy(x),), buf, dynamo=False, opset_version=17, input_names=["x"])
    return compare(onnx.load_from_string(buf.getvalue()), x)


def compare(proto, x):
    """akgpy with and without graph/layout.py's transpose sinking, and onnxruntime, interleaved."""
    from unittest import mock
    g = akgpy.from_onnx(proto)
    prog = akgpy.fuse(g)
    with mock.patch("akgpy.graph.layout.sink_transposes", lambda graph: graph):
        plain = akgpy.fuse(g)
    sess = ort_session(proto)
    want = sess.run(None, {"x": x})[0]
    for p in (prog, plain):
        np.testing.assert_allclose(p(x)[0], want, rtol=1e-4, atol=1e-4)
    t = timed({"akgpy": lambda: prog(x), "akgpy without layout pass": lambda: plain(x),
               "onnxruntime": lambda: sess.run(None, {"x": x})})
    print(prog.profile(x, repeat=5))
    return t, prog


if __name__ == "__main__":
    t, moved, prog = depthwise()
    print(f"depthwise 3x3, 112x112x96 (launches {prog.launches}):")
    for k, v in t.items():
        print(f"  {k:34s} {v * 1e3:8.3f} ms  {moved / v / 1e9:6.2f} GB/s (input + output)")
    t, prog = mobilenet_block()
    print(f"MobileNetV2 block 56x56x24, expand 6 (launches {prog.launches}):")
    for k, v in t.items():
        print(f"  {k:34s} {v * 1e3:8.3f} ms")
    print(prog.report() if hasattr(prog, "report") else "")
    t, prog = bottleneck()
    print(f"ResNet-50 bottleneck 56x56, 256->64->256 (launches {prog.launches}):")
    for k, v in t.items():
        print(f"  {k:34s} {v * 1e3:8.3f} ms")
    print(prog.report() if hasattr(prog, "report") else "")
