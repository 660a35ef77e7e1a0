"""`etj crd`: print the ElasticTrainingJob CRD as YAML.

The output is committed as crds/elastictrainingjobs.yaml; a unit test fails when stale.
"""
from __future__ import annotations

import argparse
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-o", "--output", help="write to this file instead of stdout")


def run(args: argparse.Namespace) -> int:
    from elastic_api.crd import crd_yaml

    text = crd_yaml()
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0
