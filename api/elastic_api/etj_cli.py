"""The `etj` command: one entry point for whichever parts are installed.

Each subcommand lives in its own module exposing `add_arguments(parser)` and
`run(args) -> int`. Those modules keep their top-level imports light; heavy
dependencies (jax, kopf, kubernetes) are imported inside `run`, so `etj render`
never pays for jax. The images install only some packages (the operator image has no
elastic_trainer, neither image has elastic_devtools): a missing one leaves its
subcommand listed, with what to install.
"""
from __future__ import annotations

import argparse
import importlib
import signal
import sys
from collections.abc import Callable

# Our import packages that an install may leave out, and what provides them.
OUR_PACKAGES = {
    "elastic_operator": "the operator image or a checkout",
    "elastic_trainer": "the trainer image or a checkout",
    "elastic_devtools": "a checkout: make venv",
}

# name -> (module, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "cluster": ("elastic_devtools.localcluster.cluster_cli",
                "run the local control plane (dev/test)"),
    "crd": ("elastic_api.crd_cli", "print the ElasticTrainingJob CRD"),
    "render": ("elastic_operator.entry.render_cli", "print the objects a job renders to"),
    "operator": ("elastic_operator.entry.operator_cli", "run the operator"),
    "train": ("elastic_trainer.train_cli", "run the elastic trainer"),
    "slice-agent": ("elastic_trainer.slice_agent", "stand-in for a Pathways worker"),
    "progress": ("elastic_trainer.progress_cli",
                 "report a trainer's progress from its metrics file (head sidecar)"),
    "demo": ("elastic_devtools.demo.demo_cli",
             "the article's experiment on the local control plane"),
    "maxtext": ("elastic_devtools.maxtext.maxtext_cli",
                "real MaxText on CPU as a head pod runs it (dev)"),
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
            if missing == "elastic_api" or (
                missing.startswith(tuple(OUR_PACKAGES)) and missing not in OUR_PACKAGES
            ):
                raise  # a module inside an installed package of ours: a bug
            if missing in OUR_PACKAGES:
                missing = f"{missing} ({OUR_PACKAGES[missing]})"
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
            f"etj {name}: the Python module {missing} is not installed here; from a checkout, "
            "`make venv` installs everything "
            "(pip install -e '.[operator,trainer,cli,devtools,dev]')",
            file=sys.stderr,
        )
        return 2

    return run


def exit_on_sigterm() -> None:
    """Exit with status 143 (128 + SIGTERM) on SIGTERM, as an unhandled SIGTERM would.

    In a container `etj` is the first process, and the kernel drops a signal sent to it
    whose action is the default: without a handler, `kubectl delete pod` waits the whole
    grace period and then SIGKILLs it. A subcommand may install its own handler (kopf
    does). A non-zero status matters: a pod stopped from outside has not finished its
    work, and its Job must not count it as a success."""
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        def terminate(signum: int, _frame: object) -> None:
            raise SystemExit(128 + signum)

        signal.signal(signal.SIGTERM, terminate)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    exit_on_sigterm()
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
