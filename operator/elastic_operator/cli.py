"""The `etj` command.

Each subcommand lives in its own module exposing `add_arguments(parser)` and
`run(args) -> int`. Those modules keep their top-level imports light; heavy
dependencies (jax, kopf, kubernetes) are imported inside `run`, so `etj render`
never pays for jax.
"""
from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable

# name -> (module, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "cluster": ("elastic_operator.localcluster.cli", "run the local control plane (dev/test)"),
    "crd": ("elastic_operator.api.crd_cli", "print the ElasticTrainingJob CRD"),
    "render": ("elastic_operator.api.render_cli", "print the objects a job renders to"),
    "operator": ("elastic_operator.operator_cli", "run the operator"),
    "train": ("elastic_trainer.cli", "run the elastic trainer"),
    "slice-agent": ("elastic_trainer.slice_agent", "stand-in for a Pathways worker"),
    "demo": ("elastic_operator.demo.cli", "the article's experiment on the local control plane"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="etj", description="Elastic JAX training on TPU.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            # An image installs one extra only (the trainer image has no kopf, the operator
            # image no jax): keep the subcommand visible and say what to install.
            missing = exc.name or "a dependency"
            if missing.startswith(("elastic_operator", "elastic_trainer")):
                raise  # our own module: a bug, not a missing extra
            sub_parser = sub.add_parser(name, help=f"{help_text} (unavailable: needs {missing})")
            sub_parser.set_defaults(func=_unavailable(name, missing))
            continue
        sub_parser = sub.add_parser(name, help=help_text)
        module.add_arguments(sub_parser)
        sub_parser.set_defaults(func=module.run)
    return parser


def _unavailable(name: str, missing: str) -> Callable[[argparse.Namespace], int]:
    def run(_: argparse.Namespace) -> int:
        print(
            f"etj {name}: the Python module {missing!r} is not installed; install the extra "
            f"that provides it, e.g. pip install 'elastic-training-operator[operator,trainer,dev]'",
            file=sys.stderr,
        )
        return 2

    return run


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
