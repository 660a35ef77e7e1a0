"""`etj render -f job.yaml`: print the objects a job renders to, as a YAML stream.

Like `helm template`: nothing is sent to a cluster. An invalid file fails with the same
rules as admission, each message naming the field and the fix. A job whose restore the
spec alone shows at risk (RestoreAtRisk: a model of known size through the proxy) renders
with a warning on stderr.
"""
from __future__ import annotations

import argparse
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-f", "--filename", required=True,
                        help="ElasticTrainingJob manifest ('-' for stdin)")
    parser.add_argument("-n", "--namespace",
                        help="namespace to render into (default: the manifest's, else none)")


def run(args: argparse.Namespace) -> int:
    # Imported here: `etj` imports every subcommand's module to build its parser, and the
    # models (pydantic) would slow down every other subcommand's start.
    import yaml

    from elastic_api.restore_risk import assess
    from elastic_api.validation import validate_job
    from elastic_operator.render import render, to_yaml_stream

    try:
        if args.filename == "-":
            text = sys.stdin.read()
        else:
            with open(args.filename, encoding="utf-8") as f:
                text = f.read()
    except OSError as exc:
        print(f"etj render: cannot read {args.filename}: {exc.strerror}", file=sys.stderr)
        return 2
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        print(f"etj render: {args.filename} is not valid YAML: {exc}", file=sys.stderr)
        return 2
    if not docs:
        print(f"etj render: {args.filename} holds no ElasticTrainingJob", file=sys.stderr)
        return 2
    out = []
    for index, doc in enumerate(docs):
        if args.namespace and isinstance(doc, dict):
            doc.setdefault("metadata", {})["namespace"] = args.namespace
        try:
            job = validate_job(doc)
        except ValueError as exc:
            where = f"{args.filename}" + (f" (document {index + 1})" if len(docs) > 1 else "")
            print(f"etj render: {where} is not a valid ElasticTrainingJob:", file=sys.stderr)
            for line in str(exc).splitlines():
                print(f"  {line}", file=sys.stderr)
            return 1
        risk = assess(job.spec, None)  # the spec alone, as the first reconcile sees it
        if risk.status == "True":
            print(f"etj render: warning: {job.metadata.name}: RestoreAtRisk: {risk.message}",
                  file=sys.stderr)
        out.extend(render(job))
    sys.stdout.write(to_yaml_stream(out))
    return 0
