"""The command line: every flag documented, bad settings refused with one clear message, --once on a cluster that
cannot be reached fails without a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from daemons.quarantine.__main__ import EXIT_BAD_SETTINGS, build_parser, main


def test_help_documents_every_flag() -> None:
    parser = build_parser()
    text = " ".join(parser.format_help().split())
    for flag in ("--settings", "--kubeconfig", "--listen", "--identity", "--once", "--dry-run", "--log-level"):
        assert flag in text
    for action in parser._actions:
        assert action.help, f"{action.option_strings} has no help"
    assert "gpucluster.io/quarantine" in text
    assert "maxShare" in text
    assert "default: :9108" in text


def test_bad_settings_exit_2_naming_every_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    settings = tmp_path / "s.yaml"
    settings.write_text("maxShare: 2\nbreakerWindow: soon\nflavors: [{name: h100, nodeLabels: {}}]\n")
    assert main(["--settings", str(settings)]) == EXIT_BAD_SETTINGS
    err = capsys.readouterr().err
    for key in ("maxShare", "breakerWindow", "flavors[0].nodeLabels"):
        assert key in err
    assert "Traceback" not in err


def test_a_missing_settings_file_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--settings", str(tmp_path / "absent.json")]) == EXIT_BAD_SETTINGS
    assert "absent.json" in capsys.readouterr().err


def test_a_bad_listen_address_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--settings", str(tmp_path / "s.json"), "--listen", "nowhere"])
    assert info.value.code == 2


def test_disabled_does_nothing(tmp_path: Path) -> None:
    settings = tmp_path / "s.json"
    settings.write_text('{"enabled": false}')
    assert main(["--settings", str(settings)]) == 0
