"""The allowlist admits tensor machinery and model classes, and nothing that can act on the system."""

from __future__ import annotations

import pytest

from auditor.load.allowlist import (
    ImportPolicy,
    graph_target_reason,
    is_unknown_import,
    refusal_reason,
    sym_expr_reason,
)

DEFAULT = ImportPolicy()
TRUST_ALL = ImportPolicy(trust_all=True)


@pytest.mark.parametrize(
    "full",
    [
        "torch._utils._rebuild_tensor_v2",
        "torch._utils._rebuild_parameter",
        "torch.FloatStorage",
        "torch.storage.UntypedStorage",
        "torch.Size",
        "torch.device",
        "torch.float32",
        "torch.bfloat16",
        "torch.nn.parameter.Parameter",
        "torch.nn.modules.conv.Conv2d",
        "torch.nn.functional.relu",
        "collections.OrderedDict",
        "builtins.set",
        "builtins.dict",
        "functools.partial",
        "copyreg._reconstructor",
        "builtins.object",
        "numpy.core.multiarray._reconstruct",
        "numpy._core.multiarray.scalar",
        "numpy.dtype",
        "numpy.ndarray",
        "numpy.dtypes.Float64DType",
        "__torch__.torch.nn.modules.conv.Conv2d",
        "torch.jit._pickle.build_intlist",
        "torchvision.models.resnet.ResNet",
        "timm.models.resnet.ResNet",
        "timm.layers.format.Format",
    ],
)
def test_allowed(full: str) -> None:
    module, name = full.rsplit(".", 1)
    assert refusal_reason(module, name, DEFAULT) is None


@pytest.mark.parametrize(
    ("full", "words"),
    [
        ("posix.system", "operating-system"),
        ("os.system", "operating-system"),
        ("nt.system", "operating-system"),
        ("subprocess.Popen", "operating-system"),
        ("builtins.eval", "evaluates"),
        ("builtins.exec", "executes"),
        ("builtins.getattr", "attributes"),
        ("builtins.open", "opens files"),
        ("builtins.__import__", "imports"),
        ("builtins.print", "builtin other than"),
        ("runpy.run_path", "runs"),
        ("importlib.import_module", "imports"),
        ("pickle.loads", "nested"),
        ("marshal.loads", "code objects"),
        ("socket.socket", "network"),
        ("ctypes.CDLL", "native"),
        ("torch.load", "checkpoint"),
        ("torch.hub.load", "downloads"),
        ("torch.jit.load", "TorchScript"),
        ("torch.storage._load_from_bytes", "torch.load"),
        ("torch.serialization.load", "without the static check"),
        ("torch._dynamo.optimize", "code"),
        ("torch.ops.aten", "operators"),
        ("operator.attrgetter", "attributes"),
        ("sys.exit", "interpreter"),
    ],
)
def test_denied_even_with_trust(full: str, words: str) -> None:
    module, name = full.rsplit(".", 1)
    for policy in (DEFAULT, TRUST_ALL, ImportPolicy(trusted_imports=(module.split(".")[0],))):
        reason = refusal_reason(module, name, policy)
        assert reason is not None and reason.startswith("denied") and words in reason


@pytest.mark.parametrize(
    "full",
    [
        "timm.models.load_checkpoint",
        "timm.create_model",
        "torchvision.models.get_model",
        "torchvision.models.resnet.resnet18",
        "timm.models._helpers.load_checkpoint",
    ],
)
def test_model_zoo_functions_are_refused(full: str) -> None:
    module, name = full.rsplit(".", 1)
    reason = refusal_reason(module, name, DEFAULT)
    assert reason is not None and "not a torch.nn.Module class" in reason


def test_unknown_module_needs_import_or_trust() -> None:
    assert "pass --import mypkg" in (refusal_reason("mypkg.models", "Net", DEFAULT) or "")
    assert is_unknown_import("mypkg.models", "Net", DEFAULT)
    assert refusal_reason("mypkg.models", "Net", ImportPolicy(trusted_imports=("mypkg",))) is None
    assert refusal_reason("html.parser", "HTMLParser", TRUST_ALL) is None  # a class: --trust may build it
    assert refusal_reason("mypkgx.models", "Net", ImportPolicy(trusted_imports=("mypkg",))) is not None


@pytest.mark.parametrize(
    ("module", "name"),
    [("cProfile", "run"), ("profile", "run"), ("html", "escape"), ("json", "loads"), ("mypkg.models", "make")],
)
def test_trust_never_allows_a_function(module: str, name: str) -> None:
    reason = refusal_reason(module, name, TRUST_ALL)
    assert reason is not None and not is_unknown_import(module, name, TRUST_ALL)


@pytest.mark.parametrize(
    "full",
    ["argparse.Namespace", "collections.defaultdict", "pathlib.PurePosixPath", "pathlib.PosixPath",
     "pathlib.PureWindowsPath", "datetime.datetime", "uuid.UUID"],
)
def test_data_only_classes_are_allowed(full: str) -> None:
    assert refusal_reason(*full.rsplit(".", 1), DEFAULT) is None


def test_denied_and_unknown_imports_are_told_apart() -> None:
    assert not is_unknown_import("os", "system", DEFAULT) and not is_unknown_import("cProfile", "run", DEFAULT)
    assert not is_unknown_import("pathlib", "Path", DEFAULT)  # allowed, so not refused at all
    assert not is_unknown_import("timm.models", "load_checkpoint", DEFAULT)


@pytest.mark.parametrize(
    ("module", "name"),
    [
        ("torch.nn.functional", "torch.load"),
        ("mypkg", "os.system"),
        ("os system", "x"),
        ("mypkg.__main__", "x"),
    ],
)
def test_attribute_paths_and_odd_names_are_refused_even_when_trusted(module: str, name: str) -> None:
    policy = ImportPolicy(trusted_imports=("mypkg",), trust_all=True)
    assert refusal_reason(module, name, policy) is not None


def test_torch_internals_outside_the_list_are_not_allowed_by_default() -> None:
    assert refusal_reason("torch", "manual_seed", DEFAULT) is not None
    assert refusal_reason("torch.nn.modules.module", "register_module_forward_hook", DEFAULT) is not None
    assert refusal_reason("torch.nn.functional", "handle_torch_function", DEFAULT) is not None


@pytest.mark.parametrize(
    "expr",
    [
        "Add(Mul(Integer(8), Symbol('s65', positive=True, integer=True)), Integer(4))",
        "FloorDiv(s0, 2) + 1.5*s1",
        "Max(1, u0) <= 64",
        "Pow(s0, 2) + s1**-3 + 2**s2 + PowByNatural(s3, Integer(4))",
    ],
)
def test_exported_sympy_expressions_that_are_plain_math(expr: str) -> None:
    assert sym_expr_reason(expr) is None


@pytest.mark.parametrize(
    "expr",
    [
        "__import__('os').system('id')",
        "exec(chr(105) + chr(100))",
        "Symbol('s0').func",
        "lambdify(s0, s0)",
        "x[0]",
        "Symbol('a b')",
        "2**2**2**2**2**2",
        "Pow(2, Pow(2, Pow(2, 100)))",
        "PowByNatural(s0, 10**9)",
        "s0**100000",
        "+".join(["s0"] * 1500),
    ],
)
def test_exported_sympy_expressions_with_code_are_refused(expr: str) -> None:
    assert sym_expr_reason(expr) is not None


@pytest.mark.parametrize(
    ("target", "safe"),
    [
        ("torch.ops.aten.linear.default", True),
        ("_operator.getitem", True),
        ("math.sqrt", True),
        ("torch.sym_int", True),
        ("#custom:op", True),
        ("torch.ops.aten.from_file.default", False),
        ("torch.load", False),
        ("torchvision.load", False),  # resolved as torch.load by the deserializer
        ("_operator.attrgetter", False),
        ("math.__loader__", False),
    ],
)
def test_exported_graph_targets(target: str, safe: bool) -> None:
    assert (graph_target_reason(target) is None) is safe
