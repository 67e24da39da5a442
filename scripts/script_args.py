"""The scripts' one argument parser: a mistake on the command line is one line naming the value and
the fix, as localspec's own commands say theirs, not argparse's usage block and "invalid int value"."""

from __future__ import annotations

import argparse


class Parser(argparse.ArgumentParser):
    """argparse's parser whose errors are one line ("bench.py: error: argument --n-prompts: 'x' is not
    a whole number: give one like 8; see `bench.py --help`"); type=int and type=float are read by
    whole_number and number, which say what to give. Only argparse's own errors, raised in parse_args,
    point at --help: a script's check of what it parsed (`ap.error(...)` after it) names its own fix."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.register("type", int, whole_number)
        self.register("type", float, number)
        self.parsing = False

    def parse_args(self, args=None, namespace=None):
        self.parsing = True
        try:
            return super().parse_args(args, namespace)
        finally:
            self.parsing = False

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}" + (f"; see `{self.prog} --help`" if self.parsing else "") + "\n")


def whole_number(text: str) -> int:
    """text as an int, else the error argparse puts after the argument's name."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number: give one like 8") from None


def number(text: str) -> float:
    """text as a float, else the error argparse puts after the argument's name."""
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number: give one like 0.5") from None
