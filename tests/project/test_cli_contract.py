"""What del-eval and del-check share, written once in ``del_plugin.inputs``: the error class of an input that
cannot be used, the exit statuses (and the rows each ``--help`` prints), and the bounded reader of an input file.

The scan reads the package's source (ast), so a second definition is refused wherever it is added; its own
controls feed it the definitions it replaced, so that a scan that finds nothing cannot pass for one that works."""

from __future__ import annotations

import ast
import os
import threading
from pathlib import Path

import pytest

from del_plugin import inputs
from del_plugin.axolotl import check
from del_plugin.evaluation import cli

PACKAGE = Path(inputs.__file__).resolve().parent
SHARED = {"UnusableInput", "read_input_bytes", "decode_text", "json_value", "is_unicode_text", "utf8_error_position"}


def _exit_aliases(trees: dict[str, ast.Module]) -> set[str]:
    """The names under which a module imports an exit status of ``inputs`` (``EXIT_OK as PASSED``)."""
    return {
        alias.asname
        for tree in trees.values()
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[-1] == "inputs"
        for alias in node.names
        if alias.name.startswith("EXIT_") and alias.asname
    }


def _bound_names(node: ast.AST) -> list[str]:
    """The names an assignment binds (tuple targets unpacked)."""
    targets = {
        ast.Assign: lambda n: n.targets,
        ast.AnnAssign: lambda n: [n.target],
        ast.AugAssign: lambda n: [n.target],
        ast.NamedExpr: lambda n: [n.target],
    }.get(type(node), lambda n: [])(node)
    return [name.id for target in targets for name in ast.walk(target) if isinstance(name, ast.Name)]


def second_definitions(trees: dict[str, ast.Module]) -> list[str]:
    """``module: what`` for each definition in ``trees`` (modules other than ``inputs``) of what ``inputs`` holds:
    a class or function of its name, an assignment to an exit status (``EXIT_*``, or a name one is imported as,
    here or in the package)."""
    exit_names = {name for name in vars(inputs) if name.startswith("EXIT_")}
    exit_names |= _exit_aliases(trees) | _exit_aliases(_package_trees())
    found = []
    for module, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and node.name in SHARED:
                found.append(f"{module}: {node.name}")
            found += [f"{module}: {name} =" for name in _bound_names(node) if name in exit_names or "EXIT_" in name]
    return found


def _package_trees() -> dict[str, ast.Module]:
    return {
        str(path.relative_to(PACKAGE.parent)): ast.parse(path.read_text(encoding="utf-8"))
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != PACKAGE / "inputs.py"
    }


def test_no_module_of_the_package_defines_again_what_inputs_holds():
    assert second_definitions(_package_trees()) == []


@pytest.mark.parametrize(
    "source, expected",
    [
        # the definitions del_plugin held before inputs did
        ("class UnusableInput(Exception):\n    pass\n", ["m.py: UnusableInput"]),
        ("EXIT_USAGE = 2\n", ["m.py: EXIT_USAGE ="]),
        ("EXIT_NO_MODEL: int = 5\n", ["m.py: EXIT_NO_MODEL ="]),
        (
            "PASSED, CHECK_FAILED, PARTLY_CHECKED, UNUSABLE_INPUT = 0, 1, 2, 3\n",
            ["m.py: PASSED =", "m.py: CHECK_FAILED =", "m.py: PARTLY_CHECKED =", "m.py: UNUSABLE_INPUT ="],
        ),
        (
            "from ..inputs import EXIT_OK as PASSED\nPASSED, FAILED = 0, 1\n",
            ["m.py: PASSED ="],
        ),
        ("def read_input_bytes(path, what):\n    return b''\n", ["m.py: read_input_bytes"]),
        ("from ..inputs import UnusableInput, read_input_bytes\nOK = 0\n", []),
    ],
)
def test_the_scan_finds_a_second_definition(source, expected):
    assert second_definitions({"m.py": ast.parse(source)}) == expected


def test_inputs_stands_on_the_ground_floor():
    """It imports nothing of del_plugin, so that every floor (core, hf, axolotl, evaluation) may import it."""
    tree = ast.parse((PACKAGE / "inputs.py").read_text(encoding="utf-8"))
    imported = [node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))]
    assert imported and all(getattr(node, "level", 0) == 0 for node in imported)
    names = [alias.name for node in imported for alias in node.names] + [getattr(n, "module", "") for n in imported]
    assert not [name for name in names if name and name.startswith("del_plugin")]


# ---------------------------------------------------------------------------------------------- exit statuses


def _help(main, argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("command", [None, "run", "score", "compare", "lm-eval-tasks"])
def test_del_eval_help_lists_the_table_rows(command, capsys):
    out = _help(cli.main, [command, "--help"] if command else ["--help"], capsys)
    rows = inputs.EXIT_STATUS_TABLES.get(("del-eval", command)) or inputs.EXIT_STATUSES
    assert out.rstrip().endswith(inputs.exit_status_help(command))
    listed = [int(line.split()[0]) for line in out.split("exit status:")[1].splitlines() if line[:6].strip().isdigit()]
    assert listed == [status for status, _ in rows] == [0, 1, 2, 3, 4, 130, 143]


def test_del_check_help_lists_the_table_rows_one_a_line(capsys):
    out = _help(check.parse_args, ["--help"], capsys)
    rows = inputs.EXIT_STATUS_TABLES[("del-check", None)]
    assert out.rstrip().endswith(inputs.exit_status_help(program="del-check"))
    for status, meaning in rows:
        assert f"\n  {status:<4} {meaning.split()[0]}" in out
    # the statuses del-check returns are the rows it lists
    assert [status for status, _ in rows] == [check.PASSED, check.CHECK_FAILED, check.PARTLY_CHECKED, 3]
    assert check.UNUSABLE_INPUT == inputs.EXIT_UNUSABLE_INPUT == 3
    # the description is still filled to the terminal's width, not left as one line
    assert max(map(len, out.split("exit status:")[0].splitlines())) <= int(os.environ.get("COLUMNS", 80))


def test_del_check_answers_a_wrong_command_line_with_the_tables_unusable_input(capsys):
    with pytest.raises(SystemExit) as stop:
        check.parse_args(["config.yml", "--gpus", "0"])
    assert stop.value.code == inputs.EXIT_UNUSABLE_INPUT
    assert "--gpus 0: at least 1" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------- one reader


def test_both_commands_refuse_a_device_and_a_missing_file_with_the_same_reader(tmp_path, capsys):
    """The same refusal for the same file, each with its own fix, on one line, exit status 3."""
    assert check.main(["/dev/zero"]) == inputs.EXIT_UNUSABLE_INPUT
    err = capsys.readouterr().err
    assert err == "del-check: /dev/zero is a device, not a file: pass the path of the Axolotl YAML you train with\n"
    out = tmp_path / "out"
    argv = ["score", "--benchmark", "gsm8k", "--predictions", "/dev/zero", "--out", str(out)]
    assert cli.main(argv) == inputs.EXIT_UNUSABLE_INPUT
    err = capsys.readouterr().err
    assert err.endswith("/dev/zero is a device, not a predictions file: give the file\n") and err.count("\n") == 1

    missing = tmp_path / "missing.jsonl"
    argv[4] = str(missing)
    assert cli.main(argv) == inputs.EXIT_UNUSABLE_INPUT
    assert capsys.readouterr().err.endswith(f"{missing}: no such predictions file\n")


def test_del_check_reads_a_pipe_and_refuses_a_config_past_its_limit(tmp_path, capsys):
    """A pipe (``del-check <(envsubst < config.yml)``) is read as del-eval reads one; a file over the YAML limit
    (16 MiB, far below del-eval's) is refused before it is parsed."""
    fifo = tmp_path / "config.fifo"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_text("base_model: x\n", encoding="utf-8"))
    writer.start()
    status = check.main([str(fifo)])
    writer.join()
    out, err = capsys.readouterr()
    # read, and refused for what it holds: no DEL plugin line (a check that failed, not an unusable file)
    assert status == check.CHECK_FAILED and "does not list del_plugin" in out, out + err

    big = tmp_path / "big.yml"
    big.write_bytes(b"base_model: x\n" + b"#" * (check.MAX_YAML_BYTES - 13))
    assert big.stat().st_size == check.MAX_YAML_BYTES + 1
    assert check.main([str(big)]) == inputs.EXIT_UNUSABLE_INPUT
    err = capsys.readouterr().err
    assert err == (
        f"del-check: {big}: this file is larger than 16 MiB, far more than an Axolotl config holds: pass the config "
        "itself\n"
    )


def test_the_reader_reads_up_to_its_limit_and_names_the_line_of_a_byte_that_is_not_utf8(tmp_path):
    exact = tmp_path / "exact.jsonl"
    exact.write_bytes(b"x" * 1000)
    assert inputs.read_input_bytes(exact, "predictions file", limit=1000) == b"x" * 1000
    with pytest.raises(inputs.UnusableInput, match=r"this predictions file is larger than 0 MiB, more than del-eval"):
        inputs.read_input_bytes(exact, "predictions file", limit=999)
    raw = "ok\ncaf\u00e9\n".encode("latin-1")
    with pytest.raises(inputs.UnusableInput) as refused:
        inputs.decode_text(raw, exact, "report")
    assert str(refused.value) == f"{exact}:2: this report is not UTF-8 (byte 0xe9 at column 4); save it as UTF-8"
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as err:
        assert inputs.utf8_error_position(raw, err) == (2, 4)  # "caf" then the byte, on the second line
