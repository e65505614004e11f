"""One root for the project's errors, each class naming the wire code its failure is answered with."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

from ctxpress_core.errors import (
    CtxpressError,
    CursorOutOfRange,
    ErrorCode,
    Forbidden,
    InferenceTimeout,
    InferenceUnavailable,
    RequestError,
    UnsupportedLanguage,
)
from ctxpress_core.wire.v1 import ErrorBody

# Exceptions that are signals inside one module (or between the stages of one assembly), never an error anyone
# sees, and the modules that must run without the project installed (build_engines stands alone; the git hook's
# publisher runs on the standard library only).
NOT_ERRORS = {"serving.engine.generation.GaveWay", "ctxpress.http.upstream.Superseded", "ctxpress.lsp.stdio._NotAPipe",
              "context.assembly.state.AssemblyFailed"}
STANDALONE = ("build_engines", "indexer.hook_publish")


def project_exceptions() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for package in ("ctxpress", "ctxpress_core", "workers", "context", "indexer", "syntax", "serving", "db"):
        root = importlib.import_module(package)
        for info in pkgutil.walk_packages(root.__path__, f"{package}."):
            if info.name.startswith(STANDALONE):
                continue
            module = importlib.import_module(info.name)
            for name, value in vars(module).items():
                if inspect.isclass(value) and issubclass(value, BaseException) and value.__module__ == info.name:
                    found[f"{info.name}.{name}"] = value
    return found


def test_every_error_of_the_project_derives_from_the_root() -> None:
    found = project_exceptions()
    assert "serving.weights.ModelNotInstalled" in found  # the walk sees the packages
    strays = sorted(name for name, cls in found.items()
                    if not issubclass(cls, CtxpressError) and name not in NOT_ERRORS)
    assert strays == []
    assert set(NOT_ERRORS) <= set(found)  # the list names nothing that is gone


def test_a_failure_is_answered_with_its_class_code() -> None:
    assert ErrorBody.of(InferenceTimeout("no answer in 3 s")).code is ErrorCode.INFERENCE_TIMEOUT
    assert ErrorBody.of(InferenceUnavailable("down")).code is ErrorCode.INFERENCE_UNAVAILABLE
    assert ErrorBody.of(CursorOutOfRange("line 9 of 3")).code is ErrorCode.CURSOR_OUT_OF_RANGE
    assert ErrorBody.of(Forbidden("no grant for beta")).code is ErrorCode.FORBIDDEN
    assert ErrorBody.of(UnsupportedLanguage("cobol", ["go", "python"])).code is ErrorCode.UNSUPPORTED_LANGUAGE
    body = ErrorBody.of(RequestError(ErrorCode.INVALID_REQUEST, "bad", [{"field": "line", "problem": "< 0"}]))
    assert (body.code, body.message, body.details) == (ErrorCode.INVALID_REQUEST, "bad", [{"field": "line",
                                                                                           "problem": "< 0"}])
    assert ErrorBody.of(CtxpressError("a bug")).code is ErrorCode.INTERNAL
