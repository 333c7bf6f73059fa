"""tools/check_names.py, the name check ``make lint`` runs, on small packages written
to a temporary directory: what it reports, and what the allow-list and the public
namespaces let through."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tools.check_names import Finding, check, main, read_allowed


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def lines(findings: list[Finding]) -> list[str]:
    return [str(finding) for finding in findings]


def test_a_public_name_defined_in_two_modules_is_reported_once_with_every_place(
    tmp_path: Path,
) -> None:
    write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "class Step:\n    pass\n",
            "pkg/b.py": "import os\n\n\nStep: int = 1\n",
            "pkg/c.py": "def Step() -> None: ...\n",
        },
    )
    assert lines(check(tmp_path, "pkg")) == [
        "pkg/a.py:1: same-name 'Step' is also defined in pkg/b.py:4, pkg/c.py:1"
    ]


def test_assignments_in_module_level_blocks_count_and_private_names_and_imports_do_not(
    tmp_path: Path,
) -> None:
    write(
        tmp_path,
        {
            "pkg/__init__.py": "from pkg.a import LIMIT, advance\n\n__all__ = ['LIMIT']\n",
            "pkg/a.py": "LIMIT = 1\n_hidden = 2\n\n\ndef advance() -> None: ...\n",
            "pkg/b.py": "from pkg.a import advance\n\n_hidden = 3\n"
            "try:\n    import json\nexcept ImportError:\n    LIMIT, other = 2, 3\n",
            "pkg/c.py": "def f() -> None:\n    LIMIT = 4\n    print(LIMIT)\n\n\n"
            "class C:\n    advance = 1\n",
        },
    )
    assert lines(check(tmp_path, "pkg", namespaces=frozenset({"pkg/__init__.py"}))) == [
        "pkg/a.py:1: same-name 'LIMIT' is also defined in pkg/b.py:7"
    ]


def test_a_module_logger_and_type_variables_are_conventions_not_definitions(
    tmp_path: Path,
) -> None:
    write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": """\
                import logging
                from typing import ParamSpec, TypeVar

                log = logging.getLogger("pkg.a")
                T = TypeVar("T")
                P = ParamSpec("P")
            """,
            "pkg/b.py": """\
                import typing
                from logging import Logger, getLogger

                log: Logger = getLogger(__name__)
                T = typing.TypeVar("T", bound=int)
                if typing.TYPE_CHECKING:
                    P = typing.ParamSpec("P")
            """,
            "pkg/c.py": "from pkg.a import T, log\n\nP = 1\n",
            "pkg/d.py": "import structlog\n\nlog = structlog.getLogger()\nT = make_type()\n",
            "pkg/e.py": "from logging import Logger\n\nlog = Logger('pkg.e')\nT = int\n",
        },
    )
    assert lines(check(tmp_path, "pkg")) == [
        "pkg/d.py:3: same-name 'log' is also defined in pkg/e.py:3",
        "pkg/d.py:4: same-name 'T' is also defined in pkg/e.py:4",
    ]


def test_the_allow_list_lets_a_name_be_in_the_modules_it_names_and_no_others(
    tmp_path: Path,
) -> None:
    write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/store.py": "class Claim: ...\nlog = 1\n",
            "pkg/aio.py": "class Claim: ...\nlog = 2\n",
            "pkg/other.py": "log = 3\n",
        },
    )
    allowed = read_allowed(
        "# a comment\n\n"
        "Claim  pkg/store.py pkg/aio.py  # the sync and async forms of one port\n"
        "log pkg/store.py pkg/aio.py # both log to one logger\n"
    )
    assert lines(check(tmp_path, "pkg", allowed)) == [
        "pkg/aio.py:2: same-name 'log' is also defined in pkg/other.py:1, pkg/store.py:2"
        " (allowed only in pkg/aio.py, pkg/store.py)"
    ]
    allowed += read_allowed("log pkg/other.py  # a second entry adds its modules")
    assert check(tmp_path, "pkg", allowed) == []


def test_an_allow_list_entry_needs_a_reason_and_two_definitions_still_there(
    tmp_path: Path,
) -> None:
    write(
        tmp_path,
        {"pkg/__init__.py": "", "pkg/a.py": "X = 1\nY = 1\nZ = 1\n", "pkg/b.py": "X = 2\n"},
    )
    allowed = read_allowed(
        "X pkg/a.py pkg/b.py\n"
        "Y pkg/a.py pkg/b.py  # once a pair\n"
        "Z pkg/a.py  # its pair's entry is gone\n"
    )
    assert lines(check(tmp_path, "pkg", allowed, allowed_file="tools/allowed.txt")) == [
        "tools/allowed.txt:1: allow-list 'X' has no reason",
        "tools/allowed.txt:2: allow-list 'Y' is not defined in pkg/b.py: take it off the entry",
        "tools/allowed.txt:3: allow-list 'Z' is defined in one module only: remove the entry",
    ]


RE_EXPORTING = {
    "runlane_sqs/__init__.py": "from runlane_sqs.core.model import Run\n",
    "runlane_sqs/testing.py": "from runlane_sqs.core.model import Run\n\n\ndef helper(): ...\n",
    "runlane_sqs/aio/__init__.py": "from runlane_sqs.core.model import Run as AsyncRun\n",
    "runlane_sqs/local/__init__.py": "from runlane_sqs.core import model\n",
    "runlane_sqs/core/__init__.py": "",
    "runlane_sqs/core/model.py": "from enum import Enum\n\n\nclass Run: ...\n",
    "runlane_sqs/engine/__init__.py": "",
    "runlane_sqs/engine/steps.py": "from runlane_sqs.core.model import Enum, Run\n",
}


def test_a_name_imported_from_a_module_that_only_imports_it_is_reported(
    tmp_path: Path,
) -> None:
    write(
        tmp_path,
        {
            **RE_EXPORTING,
            "runlane_sqs/engine/message.py": """\
                from runlane_sqs.core import model
                from runlane_sqs.core.model import Run
                from runlane_sqs.engine.steps import Run as StepRun
                from . import steps
                from .steps import Enum


                def later() -> None:
                    from ..core.model import Enum
            """,
        },
    )
    assert lines(check(tmp_path, "runlane_sqs")) == [
        "runlane_sqs/engine/message.py:3: re-export 'Run' imported from runlane_sqs.engine.steps,"
        " which does not define it (only imported there)",
        "runlane_sqs/engine/message.py:5: re-export 'Enum' imported from runlane_sqs.engine.steps,"
        " which does not define it (only imported there)",
        "runlane_sqs/engine/message.py:9: re-export 'Enum' imported from runlane_sqs.core.model,"
        " which does not define it (only imported there)",
        "runlane_sqs/engine/steps.py:1: re-export 'Enum' imported from runlane_sqs.core.model,"
        " which does not define it (only imported there)",
    ]


def test_a_name_listed_in_all_by_a_module_that_only_imports_it_is_reported(
    tmp_path: Path,
) -> None:
    write(
        tmp_path,
        {
            **RE_EXPORTING,
            "runlane_sqs/engine/__init__.py": "from . import steps\n\n__all__ = ['steps']\n",
            "runlane_sqs/engine/steps.py": """\
                from runlane_sqs.core.model import Run

                LIMIT = 1
                __all__ = ["LIMIT", "Run"]
            """,
            "runlane_sqs/engine/message.py": """\
                from runlane_sqs.core import model

                __all__: list[str] = ["model", "later"]
                __all__ += ("model",)


                def later() -> None:
                    __all__ = ["model"]
            """,
            "runlane_sqs/testing.py": "from runlane_sqs.core.model import Run\n__all__ = ['Run']\n",
        },
    )
    assert lines(check(tmp_path, "runlane_sqs")) == [
        "runlane_sqs/engine/message.py:3: re-export 'model' listed in __all__ of"
        " runlane_sqs.engine.message, which does not define it",
        "runlane_sqs/engine/message.py:4: re-export 'model' listed in __all__ of"
        " runlane_sqs.engine.message, which does not define it",
        "runlane_sqs/engine/steps.py:4: re-export 'Run' listed in __all__ of"
        " runlane_sqs.engine.steps, which does not define it",
    ]


def test_a_name_read_through_a_module_that_only_imports_it_is_reported(
    tmp_path: Path,
) -> None:
    write(
        tmp_path,
        {
            **RE_EXPORTING,
            "runlane_sqs/engine/steps.py": """\
                from runlane_sqs.core.model import Run

                LIMIT = 1
            """,
            "runlane_sqs/engine/message.py": """\
                import runlane_sqs.engine.steps as step_module
                import runlane_sqs.core.model
                from runlane_sqs import testing
                from runlane_sqs.core import model
                from runlane_sqs.engine import steps
                from . import steps as same_steps


                def run() -> object:
                    from runlane_sqs.engine import steps as local_steps

                    model.Run, model.Enum, steps.LIMIT, runlane_sqs.core.model.Enum
                    steps.Run, steps.Run(), step_module.Run, same_steps.Run
                    testing.helper, testing.Run, local_steps.LIMIT
                    return steps.Run.mro
            """,
            "runlane_sqs/local/demo.py": """\
                from runlane_sqs import testing
                from runlane_sqs.engine import steps

                testing.Run, steps.Run
            """,
            "runlane_sqs/aws_lambda.py": "from runlane_sqs.engine import steps\n\nsteps.Run\n",
        },
    )
    assert [line for line in lines(check(tmp_path, "runlane_sqs")) if "message" in line] == [
        "runlane_sqs/engine/message.py:12: re-export 'Enum' read as model.Enum from"
        " runlane_sqs.core.model, which does not define it (only imported there)",
        "runlane_sqs/engine/message.py:13: re-export 'Run' read as same_steps.Run from"
        " runlane_sqs.engine.steps, which does not define it (only imported there)",
        "runlane_sqs/engine/message.py:13: re-export 'Run' read as step_module.Run from"
        " runlane_sqs.engine.steps, which does not define it (only imported there)",
        "runlane_sqs/engine/message.py:13: re-export 'Run' read as steps.Run from"
        " runlane_sqs.engine.steps, which does not define it (only imported there)",
        "runlane_sqs/engine/message.py:14: re-export 'Run' read as testing.Run from"
        " runlane_sqs.testing, which does not define it (a public namespace)",
        "runlane_sqs/engine/message.py:15: re-export 'Run' read as steps.Run from"
        " runlane_sqs.engine.steps, which does not define it (only imported there)",
    ]
    assert [line for line in lines(check(tmp_path, "runlane_sqs")) if "demo" in line] == [
        "runlane_sqs/local/demo.py:4: re-export 'Run' read as steps.Run from"
        " runlane_sqs.engine.steps, which does not define it (only imported there)",
    ]


def test_the_public_namespaces_may_gather_names_but_the_package_does_not_import_through_them(
    tmp_path: Path,
) -> None:
    write(
        tmp_path,
        {
            **RE_EXPORTING,
            "runlane_sqs/engine/steps.py": "from runlane_sqs.core.model import Run\n",
            "runlane_sqs/engine/message.py": """\
                from runlane_sqs import Run
                from runlane_sqs.aio import AsyncRun
                from runlane_sqs.local import model
                from runlane_sqs.testing import Run as TestRun, helper
            """,
        },
    )
    assert lines(check(tmp_path, "runlane_sqs")) == [
        "runlane_sqs/engine/message.py:1: re-export 'Run' imported from runlane_sqs,"
        " which does not define it (a public namespace)",
        "runlane_sqs/engine/message.py:2: re-export 'AsyncRun' imported from runlane_sqs.aio,"
        " which does not define it (a public namespace)",
        "runlane_sqs/engine/message.py:3: re-export 'model' imported from runlane_sqs.local,"
        " which does not define it (a public namespace)",
        "runlane_sqs/engine/message.py:4: re-export 'Run' imported from runlane_sqs.testing,"
        " which does not define it (a public namespace)",
    ]


def test_aws_lambda_is_a_public_namespace_the_package_does_not_import_through(
    tmp_path: Path,
) -> None:
    write(
        tmp_path,
        {
            **RE_EXPORTING,
            "runlane_sqs/engine/steps.py": "from runlane_sqs.core.model import Run\n",
            "runlane_sqs/aws_lambda.py": "from runlane_sqs.engine.steps import Run\n",
            "runlane_sqs/engine/message.py": "from runlane_sqs.aws_lambda import Run\n",
        },
    )
    assert lines(check(tmp_path, "runlane_sqs")) == [
        "runlane_sqs/engine/message.py:1: re-export 'Run' imported from runlane_sqs.aws_lambda,"
        " which does not define it (a public namespace)",
    ]


def test_the_demo_imports_through_the_public_namespaces_as_user_code_does(
    tmp_path: Path,
) -> None:
    imports = """\
        from runlane_sqs import Run
        from runlane_sqs.local import model
        from runlane_sqs.engine.steps import Enum
    """
    write(
        tmp_path,
        {
            **RE_EXPORTING,
            "runlane_sqs/local/demo.py": imports,
            "runlane_sqs/local/server.py": imports,
        },
    )
    assert [line for line in lines(check(tmp_path, "runlane_sqs")) if "/local/" in line] == [
        "runlane_sqs/local/demo.py:3: re-export 'Enum' imported from runlane_sqs.engine.steps,"
        " which does not define it (only imported there)",
        "runlane_sqs/local/server.py:1: re-export 'Run' imported from runlane_sqs,"
        " which does not define it (a public namespace)",
        "runlane_sqs/local/server.py:2: re-export 'model' imported from runlane_sqs.local,"
        " which does not define it (a public namespace)",
        "runlane_sqs/local/server.py:3: re-export 'Enum' imported from runlane_sqs.engine.steps,"
        " which does not define it (only imported there)",
    ]


def test_a_parameter_named_as_an_imported_module_is_reported(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/adapters/__init__.py": "",
            "pkg/adapters/claims.py": "def claim() -> None: ...\n",
            "pkg/store.py": """\
                import json
                import os.path as osp
                from typing import TYPE_CHECKING

                from pkg.adapters import claims
                from pkg.adapters.claims import claim

                if TYPE_CHECKING:
                    import decimal


                def create(claims, claim, json=None):
                    return lambda *osp: osp


                class Store:
                    async def put(self, *, decimal, os, **typing): ...
            """,
        },
    )
    assert lines(check(tmp_path, "pkg")) == [
        "pkg/store.py:12: shadowed-module parameter 'claims' of create() shadows the module"
        " pkg.adapters.claims",
        "pkg/store.py:12: shadowed-module parameter 'json' of create() shadows the module json",
        "pkg/store.py:13: shadowed-module parameter 'osp' of lambda() shadows the module os.path",
        "pkg/store.py:17: shadowed-module parameter 'decimal' of put() shadows the module decimal",
    ]


def test_the_command_prints_one_line_per_finding_and_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(tmp_path, {"pkg/__init__.py": "", "pkg/a.py": "X = 1\n", "pkg/b.py": "X = 2\n"})
    allowed = write(tmp_path, {"allowed.txt": ""}) / "allowed.txt"
    assert main([str(tmp_path / "pkg"), "--allowed", str(allowed)]) == 1
    out, err = capsys.readouterr()
    assert out == "pkg/a.py:1: same-name 'X' is also defined in pkg/b.py:1\n"
    assert "1 findings (same-name 1, re-export 0, shadowed-module 0, allow-list 0)" in err

    allowed.write_text("X pkg/a.py pkg/b.py  # two forms of one thing\n")
    assert main([str(tmp_path / "pkg"), "--allowed", str(allowed)]) == 0
    assert capsys.readouterr() == ("", "")
