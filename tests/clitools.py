"""Running `localspec` commands in-process, and what a user mistake must look like."""

from __future__ import annotations

from click.testing import CliRunner

from localspec.cli import cli


def invoke(*args, input=None, env=None):
    """Run `localspec ARGS` in this process (click's CliRunner); the Result."""
    return CliRunner().invoke(cli, [str(a) for a in args], input=input, env=env)


def assert_one_line_error(result, *fragments):
    """A user mistake: non-zero exit, one 'Error:' line naming the problem, no traceback."""
    assert result.exit_code != 0, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error:"), result.output
    assert "Traceback" not in result.output
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
