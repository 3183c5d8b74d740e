"""`satsgate serve` as an operator starts it: the log it writes while starting."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import serve_process

ROOT = Path(__file__).resolve().parents[1]


def test_start_up_log_holds_only_satsgate_records(tmp_path: Path) -> None:
    """Libraries log below WARNING nowhere, from the first import on (WeasyPrint logs its
    stylesheet parsing while it is imported, before the service has started)."""
    with serve_process("--data-dir", str(tmp_path / "data")) as (_port, lines):
        pass
    record = re.compile(r"^\S+ \S+ (DEBUG|INFO) (\S+): ")
    foreign = [
        line
        for line in lines
        if (found := record.match(line)) and not found.group(2).startswith("satsgate")
    ]
    assert foreign == [], "".join(foreign)


def test_every_option_says_what_it_is_for() -> None:
    from satsgate.cli import _parser

    parser = _parser()
    commands = next(a for a in parser._actions if a.dest == "command").choices
    assert isinstance(commands, dict)
    silent = [
        f"{name} {option.option_strings[0]}"
        for name, command in commands.items()
        for option in command._actions
        if option.option_strings and option.dest != "help" and not option.help
    ]
    assert silent == []
