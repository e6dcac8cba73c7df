import re

from setuptools import find_packages, setup

VERSION = re.search(r'__version__ = "([^"]+)"', open("akgpy/version.py").read()).group(1)

setup(
    name="akgpy",
    version=VERSION,
    description="Graph-kernel fusion compiler: ONNX / composite-JSON / builder graphs -> fused TVM TE -> LLVM kernels",
    long_description=open("README.md").read() if __import__("os").path.exists("README.md") else "",
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["akgpy", "akgpy.*"]),
    # the standalone kernels' C runtime, and the `akg` package MindSpore imports (not an akgpy subpackage)
    package_data={"akgpy": ["targets/cpu/standalone_rt.c", "runtime/openmp_launcher.c", "mindspore/shim/akg/*.py", "mindspore/shim/akg/ms/*.py"]},
    install_requires=["islpy", "apache-tvm==0.27.*", "numpy>=1.24", "sympy"],
    extras_require={
        "test": ["pytest>=7", "hypothesis>=6", "pytest-timeout>=2.2", "pytest-xdist>=3", "onnx>=1.16",
                 "onnxruntime>=1.18", "ray>=2.9", "optuna>=3.4", "lightgbm>=4.0",
                 "torch==2.13.0",  # tests/test_torch_*.py; pinned as in the torch extra
                 "transformers>=4.40", "onnxscript>=0.5"],  # HF model families; torch.onnx's dynamo exporter
        "onnx": ["onnx>=1.16"],
        "torch": ["torch==2.13.0"],  # pinned: an unpinned torch pulls a multi-GB CUDA build
        "distributed": ["ray>=2.9"],  # akgpy-tune --ray
        "tune": ["lightgbm>=4.0", "optuna>=3.4"],  # search="model" (default) / "tpe" (tune/search.py); "random" needs nothing
        "cli": ["rich>=13", "matplotlib>=3.7"],  # akgpy-tune's progress bar and report plots (optional)
    },
    entry_points={"console_scripts": ["akgpy-tune = akgpy.tune.cli:main"],
                  "torch_dynamo_backends": ["akgpy = akgpy.torch.backend:akgpy_backend"]},
)
